// Package cgroups puts a node's containers into cgroups, enforces their resource limits and
// reads their usage, as the kubelet's container manager (pkg/kubelet/cm) and its runtime do.
//
// Each container run gets its own cgroup in one hierarchy per node:
// kplane/<node>/pod<uid>/<container>. The pod's cgroup carries the pod's totals (cpu shares
// of all requests; a cpu quota and a memory limit only when every container sets one), the
// container's cgroup its own values:
//
//	limits.memory → memory.limit_in_bytes (v1) / memory.max (v2): an OOM kill in the
//	                cgroup is reported as reason OOMKilled
//	limits.cpu    → CFS quota per 100 ms period: cpu.cfs_quota_us (v1) / cpu.max (v2)
//	requests.cpu  → cpu.shares, 2 when none (v1) / cpu.weight converted from the shares (v2)
//
// The version is what the machine mounts. cgroup v2 is used where a cgroup2 mount offers the
// cpu and memory controllers; the hierarchy then starts at that mount's root, as the
// kubelet's /kubepods does (v2 forbids controllers in a cgroup that holds processes, so it
// cannot hang below the agent's own cgroup), and a process starts inside its cgroup
// (clone3 with CLONE_INTO_CGROUP), never outside it. Otherwise cgroup v1 is used where the
// memory, cpu and cpuacct controllers are mounted (hybrid machines often mount an empty v2
// hierarchy beside them, which is ignored); each hierarchy then starts at the agent's own
// cgroup in that controller, so a node agent confined to a cgroup keeps its containers
// inside it, and a process joins its cgroup right after it starts (Container.Join) or, forked
// from a locked thread that Container.ThreadHooks moves into the cgroup for the fork, is born
// there.
//
// Where the node may not create cgroups (not root, cgroupfs read-only or missing), or when
// Config.Disabled forces it, the Manager falls back to accounting from /proc by process
// group, enforces nothing, and says why (Manager.Enforced).
//
// Usage figures are the kubelet's: cumulative CPU time in nanoseconds, and the memory
// working set, usage minus inactive file pages (pages the kernel can drop at once).
package cgroups
