// Package node is the node agent (`kplane node`): it registers a Node, renews its Lease in
// kube-node-lease, and runs the pods bound to it (field selector spec.nodeName) as local
// processes, reporting their status.
//
// Each pod's lifecycle is two parts. podMachine (machine.go) is a pure state machine: given
// the pod, process exits, probe results and the time, it decides what to start, restart,
// probe, signal and report, and the status to write; it does no I/O and reads no clock, and
// its tests drive it table by table. The pod worker (worker.go) is its executor: one
// goroutine per pod feeds it and carries out its actions with the runtime (runtime.go:
// processes and their logs), the probes (probe.go) and the API. Time comes from
// Options.Clock.
//
// Each container runs command+args (a first word "kplane" is this binary) in
// <data-dir>/pods/<uid>/<container>/, with its env values plus POD_IP, POD_NAME and
// POD_NAMESPACE, in its own process group with SIGKILL as parent-death signal. Its stdout
// and stderr are copied into LogFile there, a time per line (a restart renames it to
// PreviousLogFile), so logs can be shown with --timestamps, --since and --since-time. Each pod gets
// one address of --pod-cidr (default 127.77.0.0/16, loopback, so binding $POD_IP:port needs
// no setup; when the range is used up the pod stays Pending with a FailedCreatePodSandBox
// event, and is tried again on its next update). Exited containers are
// restarted per restartPolicy with a doubling backoff; a pod with a deletionTimestamp gets
// SIGTERM, its grace period, SIGKILL, then its object is deleted with grace period 0.
//
// Init containers run one after another, each to completion, before the containers start;
// a failing one is restarted with the same backoff (under restartPolicy Never it fails the
// pod). Startup, liveness and readiness probes (exec in the container's directory and env,
// tcpSocket, httpGet to the pod IP by default) run as the kubelet's (probe.go): a container is
// started once its startup probe passed and ready once its readiness probe passes; failing
// liveness or startup probes kill it (SIGTERM, then SIGKILL after the grace period) and it is
// restarted per restartPolicy. A liveness probe first runs one period after its container
// started (after initialDelaySeconds if that is longer), about when the kubelet's ticker
// first probes it, so a program gets that long to listen. Unlike the kubelet, a readiness
// probe that has not passed yet in a run is tried again after 25 ms, doubling up to 100 ms,
// for one period after its first run (those failures make no Unhealthy event), so a
// container is Ready within moments of listening, not a period later.
//
// Volumes (volumes.go) are prepared before a pod's containers start: emptyDir (on disk under
// <data-dir>/pods/<uid>/volumes/<name>; medium Memory as a tmpfs there) and, in a tmpfs the
// agent mounts at <data-dir>/tmpfs while it runs (secrets never reach the disk), configMap,
// secret, downwardAPI and projected (configMap, secret, downwardAPI, serviceAccountToken from
// the TokenRequest API, renewed at 80% of its life) written the kubelet's way — the files
// are links into a "..data" link to a content directory, swapped in one rename when the
// source changes (every --sync-frequency, 10 s, and on label or annotation changes) —
// hostPath (with its type's checks) and persistentVolumeClaim (the bound volume's hostPath
// or local path). A volume that cannot be prepared (a ConfigMap that does not exist yet)
// keeps the pod's containers in ContainerCreating with a FailedMount event, tried again
// after 0.5 s doubling to 8 s. A container with volumeMounts runs in a mount namespace of
// its own (node/mountns) in which each volume, or its subPath, is bind-mounted at its
// mountPath (ConfigMap, Secret, downward API and projected volumes read-only, as the
// kubelet mounts them); nothing is created on the host. As root the agent makes the
// namespace itself; otherwise in a user namespace (the agent's user is root in there). Where
// the machine allows neither, such a container waits with CreateContainerConfigError saying
// why, and never runs without its files.
// Exec probes run in the container's namespace too.
//
// Each container run gets its own cgroup, kplane/<node>/pod<uid>/<container>, before its
// process starts (node/cgroups, cgroup.go): cgroup v2 where the machine offers it (the process
// is born inside), else v1 (the process joins right after it starts). limits.memory is the
// memory limit (an OOM kill there ends the run with reason OOMKilled, exit code 137),
// limits.cpu the CFS quota, requests.cpu the CPU shares (weight); the pod's cgroup carries the
// pod's totals. The run's cgroup is removed when it exits, after whatever is left in it is
// killed, and the pod's when the pod is done. Where the node may not create cgroups (or
// Options.DisableCgroups), usage is read from /proc by process group and limits are not
// enforced: a log line and a CgroupsUnavailable Warning event on the Node say so.
//
// The Node reports the machine's CPUs, memory, the data dir's filesystem
// (ephemeral-storage) and 110 pods as capacity, and as allocatable the same less the
// kubelet's default hard eviction thresholds (100Mi of memory, 10% of the filesystem; no
// kube-reserved or system-reserved) (capacity.go).
//
// The agent serves HTTP on --address:--port (0: a free port, reported in the Node's
// status.daemonEndpoints): GET /containerLogs/<ns>/<pod>/<container>, which the apiserver's
// pods/log proxies to, with follow, previous, tailLines and limitBytes; GET /stats/summary, the
// kubelet's stats API (k8s.io/kubelet/pkg/apis/stats/v1alpha1: the node's, each running pod's
// and container's cumulative CPU and memory), and GET /metrics/resource, the kubelet's resource
// metrics in the Prometheus text format (node_, pod_ and container_cpu_usage_seconds_total and
// _memory_working_set_bytes, container_start_time_seconds, scrape_error), which the apiserver's
// metrics.k8s.io reads (stats.go); and the kubelet's streaming endpoints
// /exec/<ns>/<pod>/<container>, /attach/<ns>/<pod>/<container> and /portForward/<ns>/<pod>
// (streaming.go), which pods/exec, pods/attach and pods/portforward pass through to, upgraded
// connection and all. Like a v1.36 kubelet, they speak what kubectl asks for first, WebSocket
// (v5.channel.k8s.io; port-forward: SPDY tunnelled through WebSocket), and SPDY/3.1, its
// fallback: SPDY with k8s.io/cri-streaming's server side, v5 with k8s.io/streaming's wsstream.
// An exec'd process starts through containerRun.startProcess (process.go): command looked up in
// the container's PATH as the container sees its files, the container's env (plus TERM=xterm on
// a terminal), working directory, mount namespace and cgroup, a process group of its own (a
// session on a pseudo-terminal with -t, of the client's first size when it sends one within a
// second, resized as the client asks); what it leaves in its
// group is killed when it exits, and all of it when the container's process exits or the agent
// stops. A program that does not exist exits 127, one that cannot be executed 126, as in a
// shell. A container with stdin: true gets a stdin pipe the agent keeps for attach (stdinOnce:
// closed when the first attach session that wrote it ends); tty: true runs it on a
// pseudo-terminal, logged as stdout; attached clients get the output as it is read
// (sessions.go). Port-forward connects to the pod IP, never 127.0.0.1 (which could be another
// pod's or the host's port): a program that listens on 127.0.0.1 only is not reachable. A
// connection that fails is reported on its error stream and the session goes on (kubectl itself
// then ends it); once one side of a forwarded connection has ended, the other has a second to
// finish (as socat's -t), then both are closed.
//
// A container's environment is built as the kubelet's (env.go): envFrom (ConfigMaps, Secrets,
// with prefix), then env in order (value with $(VAR) references to variables defined before
// it, "$$" escaping "$"; valueFrom fieldRef, configMapKeyRef, secretKeyRef), POD_IP, POD_NAME
// and POD_NAMESPACE defined first so that both can override and refer to them; command and
// args have their $(VAR) references expanded against it. A missing ConfigMap, Secret or key
// that is not optional keeps the container Waiting with reason CreateContainerConfigError,
// retried every backoff base (not counted as a restart). Events as component "kubelet":
// Started, Failed, BackOff, Killing, Unhealthy.
//
// Start it in-process with New(c, o) and (*Agent).Run(ctx), or Run(ctx, o) from a kubeconfig.
//
// TODO (issue 6, not done yet):
//   - probes: grpc, httpGet with scheme HTTPS; a container killed by a liveness probe whose
//     process exits 0 is not restarted under OnFailure (the kubelet restarts it).
//   - env: fileKeyRef.
//   - volumes: the volume types of clusters (nfs, csi, iscsi, ephemeral, image, ...), which
//     fail with FailedMount; memory-backed emptyDirs without root are plain directories.
//   - sidecars (init containers with restartPolicy Always: such a container stays Waiting
//     with CreateContainerConfigError saying so, and the pod Pending), ephemeral containers.
//   - The node's HTTP endpoint is plain and unauthenticated.
//   - exec and exec probes find the container's namespaces by its process ID: one that
//     starts in the moment the container exits could, were the ID reused that fast, enter
//     another process's (the fix: namespace descriptors opened when the container starts).
//     Without cgroups, a process exec'd into a container that leaves its process group or
//     session (setsid, a shell's background job on a terminal) outlives the container; a
//     -t exec whose client goes away runs on until it exits, as under containerd.
//   - events: Created/Pulled; the involved object has no fieldPath
//     (spec.containers{name}), the source host is the machine's hostname, not the node name.
//   - node status beyond Ready (pressure conditions), node shutdown marking pods.
//   - resources: no QoS tiers (burstable/besteffort cgroups), no cpuset,
//     hugepages or pids limits, no eviction, no usageNanoCores in /stats/summary, no
//     network, filesystem or volume stats.
//   - tests of restart backoff with OnFailure and of the agent's own shutdown.
package node
