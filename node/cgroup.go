package node

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/node/cgroups"
	"github.com/kplane/kplane/node/mountns"
	corev1 "k8s.io/api/core/v1"
)

// startCgroups sets up the node's cgroup hierarchy (node/cgroups): each container run gets
// a cgroup with its limits; where the machine allows none, usage comes from /proc and limits
// are not enforced, which reportCgroups tells once.
func (a *Agent) startCgroups() {
	a.cgroups = cgroups.New(cgroups.Config{Node: a.name, Disabled: a.o.DisableCgroups})
	if ok, why := a.cgroups.Enforced(); !ok {
		slog.Warn("resource limits are not enforced: containers run without cgroups, usage is read from /proc", "node", a.name, "why", why)
		return
	}
	slog.Info("containers run in cgroups", "node", a.name, "version", a.cgroups.Kind(), "dirs", a.cgroups.NodeDirs())
}

// reportCgroups records a Warning event on the Node when limits are not enforced, so that
// `kubectl describe node` says so.
func (a *Agent) reportCgroups(ctx context.Context) {
	ok, why := a.cgroups.Enforced()
	if ok {
		return
	}
	n, err := client.Resource[*corev1.Node](a.c, "nodes").Get(ctx, a.name)
	if err != nil {
		slog.Error("reading node for its cgroups event", "node", a.name, "err", err)
		return
	}
	a.events.Eventf(n, corev1.EventTypeWarning, cgroupsUnavailable,
		"%s", fmt.Sprintf("cannot use cgroups (%s): container resource limits are not enforced, usage is accounted from /proc by process group", why))
}

// cgroupsUnavailable is the reason of the Node event saying that limits are not enforced.
const cgroupsUnavailable = "CgroupsUnavailable"

// cgroupHooks start a process from a thread that is in the container's cgroup for that
// moment (cgroup v1), so that the process is born there.
func cgroupHooks(cg *cgroups.Container) mountns.Hooks {
	before, after := cg.ThreadHooks()
	return mountns.Hooks{Before: before, After: after}
}
