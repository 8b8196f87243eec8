package endpoints

import (
	"maps"
	"slices"

	"github.com/kplane/kplane/cache"
	corev1 "k8s.io/api/core/v1"
)

// podChange says how a pod update may affect Endpoints.
type podChange struct {
	// endpoint: the pod's own entry may change (readiness, IPs, deletion).
	endpoint bool
	// membership: which services select the pod, or its hostname under them, may change.
	membership bool
}

// classifyPodUpdate compares two states of one pod. Everything else a pod update can change
// (annotations, nodeName once set, status details) leaves Endpoints as they are.
func classifyPodUpdate(old, cur *corev1.Pod) podChange {
	var c podChange
	c.membership = !maps.Equal(old.Labels, cur.Labels) ||
		old.Spec.Hostname != cur.Spec.Hostname || old.Spec.Subdomain != cur.Spec.Subdomain
	// The deletionTimestamps are compared as pointers, as Kubernetes does: two decoded states
	// never share one, so every update of a terminating pod counts.
	c.endpoint = old.DeletionTimestamp != cur.DeletionTimestamp ||
		podReady(old) != podReady(cur) ||
		!slices.Equal(old.Status.PodIPs, cur.Status.PodIPs)
	return c
}

// servicesToSync returns the keys ("ns/name", sorted) of the services whose Endpoints a pod
// event may change; services are those of the pod's namespace. old is nil for a new pod, cur
// nil for a deleted one.
//
// For an update that changes only the pod's endpoint, the services selecting it now are
// synced. When its labels (or hostname or subdomain) change too, both the services that
// selected it before and those selecting it now are; when only labels change, only the
// services it joined or left: its entry in the others is the same as before. (So a hostname
// change alone syncs nothing; the pod API does not allow one anyway.) A resync, delivered as
// an update without a new resourceVersion, syncs nothing: services have their own resync.
func servicesToSync(services servicesMatching, old, cur *corev1.Pod) []string {
	switch {
	case old == nil && cur == nil:
		return nil
	case old == nil:
		return sortedKeys(selecting(services, cur.Labels))
	case cur == nil:
		return sortedKeys(selecting(services, old.Labels))
	case old.ResourceVersion == cur.ResourceVersion:
		return nil
	}
	change := classifyPodUpdate(old, cur)
	switch {
	case !change.membership && !change.endpoint:
		return nil
	case !change.membership:
		return sortedKeys(selecting(services, cur.Labels))
	}
	before, after := selecting(services, old.Labels), selecting(services, cur.Labels)
	out := map[string]bool{}
	for k := range after {
		if change.endpoint || !before[k] {
			out[k] = true
		}
	}
	for k := range before {
		if change.endpoint || !after[k] {
			out[k] = true
		}
	}
	return sortedKeys(out)
}

// servicesMatching returns the services (of the pod's namespace) whose selector matches a
// pod's labels.
type servicesMatching func(podLabels map[string]string) []*corev1.Service

// selecting returns the keys of the services selecting podLabels.
func selecting(services servicesMatching, podLabels map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, svc := range services(podLabels) {
		out[cache.MetaNamespaceKey(svc)] = true
	}
	return out
}

func sortedKeys(set map[string]bool) []string {
	return slices.Sorted(maps.Keys(set))
}
