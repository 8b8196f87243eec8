package endpointslice

import (
	"maps"

	"github.com/kplane/kplane/cache"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
)

// The event handlers turn informer notifications into Service keys on the queue. They run on the
// informers' handler goroutines, read only listers, and never block.

// podAdded queues the Services selecting a pod that appeared or disappeared.
func (c *Controller) podAdded(p *corev1.Pod) {
	c.queueAfterBatch(c.servicesSelecting(p.Namespace, p.Labels))
}

// podUpdated queues the Services a pod change matters to: when its labels changed, the Services
// it joined or left (all of them before and after, if its endpoint changed too); otherwise the
// Services selecting it, if its endpoint changed. Resyncs (same resourceVersion) are ignored:
// the Services' own resync covers them.
func (c *Controller) podUpdated(old, p *corev1.Pod) {
	if old.ResourceVersion == p.ResourceVersion {
		return
	}
	changed := podEndpointChanged(old, p)
	labelsChanged := !maps.Equal(old.Labels, p.Labels)
	if !changed && !labelsChanged {
		return
	}
	keys := c.servicesSelecting(p.Namespace, p.Labels)
	if labelsChanged {
		before := c.servicesSelecting(old.Namespace, old.Labels)
		for k := range before {
			if changed || !keys[k] {
				keys[k] = true
			} else {
				delete(keys, k) // selected before and after, and nothing else changed
			}
		}
	}
	c.queueAfterBatch(keys)
}

// podEndpointChanged reports whether a pod changed in a way that may change its endpoint.
// Kubernetes looks at deletion, readiness and IPs; this also looks at the node (set once, but
// possibly after the IP by a non-kubelet writer), hostname and subdomain, and a move to a
// finished phase, so that no such change waits for the next resync.
func podEndpointChanged(old, p *corev1.Pod) bool {
	if (old.DeletionTimestamp == nil) != (p.DeletionTimestamp == nil) ||
		old.DeletionTimestamp != nil && !old.DeletionTimestamp.Equal(p.DeletionTimestamp) {
		return true
	}
	if podReady(old) != podReady(p) || includePod(old) != includePod(p) {
		return true
	}
	if old.Status.PodIP != p.Status.PodIP || len(old.Status.PodIPs) != len(p.Status.PodIPs) {
		return true
	}
	for i := range old.Status.PodIPs {
		if old.Status.PodIPs[i].IP != p.Status.PodIPs[i].IP {
			return true
		}
	}
	return old.Spec.NodeName != p.Spec.NodeName || old.Spec.Hostname != p.Spec.Hostname || old.Spec.Subdomain != p.Spec.Subdomain
}

// servicesSelecting returns the keys of the Services in ns whose selector matches podLabels. A
// Service without a selector selects nothing (its endpoints are someone else's); an empty one
// selects every pod.
func (c *Controller) servicesSelecting(ns string, podLabels map[string]string) map[string]bool {
	keys := map[string]bool{}
	for _, svc := range c.matcher.Matching(ns, podLabels) {
		keys[cache.MetaNamespaceKey(svc)] = true
	}
	return keys
}

func (c *Controller) queueAfterBatch(keys map[string]bool) {
	for k := range keys {
		c.loop.Queue.AddAfter(k, c.batchPeriod)
	}
}

// Nodes matter for the zone of their pods' endpoints, and for pods left out because their Node
// was missing. Kubernetes watches Nodes only for Auto topology hints, so an endpoint's zone is
// corrected at its Service's next sync and a pod whose Node appears waits for the retry backoff.
// Here the Services with pods on a Node are synced when the Node appears or goes, or its zone
// label changes (rare events, so scanning the pods is cheap enough).

func (c *Controller) nodeAdded(n *corev1.Node, initial bool) {
	if !initial { // every Service is synced after start anyway
		c.queueServicesOnNode(n.Name)
	}
}

func (c *Controller) nodeUpdated(old, n *corev1.Node) {
	if old.Labels[corev1.LabelTopologyZone] != n.Labels[corev1.LabelTopologyZone] {
		c.queueServicesOnNode(n.Name)
	}
}

// queueServicesOnNode queues the Services selecting any endpoint candidate on the named node.
func (c *Controller) queueServicesOnNode(node string) {
	byNamespace := map[string][]labels.Set{}
	for _, p := range c.pods.List(labels.Everything()) {
		if p.Spec.NodeName == node && includePod(p) {
			byNamespace[p.Namespace] = append(byNamespace[p.Namespace], labels.Set(p.Labels))
		}
	}
	keys := map[string]bool{}
	for ns, podLabels := range byNamespace {
		for _, svc := range c.services.Namespace(ns).List(labels.Everything()) {
			if svc.Spec.Selector == nil {
				continue
			}
			sel := labels.SelectorFromValidatedSet(svc.Spec.Selector)
			for _, l := range podLabels {
				if sel.Matches(l) {
					keys[cache.MetaNamespaceKey(svc)] = true
					break
				}
			}
		}
	}
	c.queueAfterBatch(keys)
}

// Slice events queue the slice's Service only for changes this controller did not make itself
// (its own writes are in the tracker), so that a sync's writes do not cause another sync.

func managedHere(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == ControllerName
}

func (c *Controller) sliceAdded(s *discoveryv1.EndpointSlice) {
	switch {
	case !managedHere(s):
	case c.tracker.ShouldSync(s):
		c.queueSliceService(s)
	default:
		c.sliceCaughtUp(s)
	}
}

// sliceCaughtUp is called for informer events that show this controller's own writes: a sync
// of the slice's Service that found the informer behind them is retried at once.
func (c *Controller) sliceCaughtUp(s *discoveryv1.EndpointSlice) {
	if c.tracker.CaughtUp(s) {
		c.loop.Queue.Add(serviceOf(s).String())
	}
}

func (c *Controller) sliceUpdated(old, s *discoveryv1.EndpointSlice) {
	moved := old.Labels[discoveryv1.LabelServiceName] != s.Labels[discoveryv1.LabelServiceName]
	deleting := managedHere(s) && old.DeletionTimestamp == nil && s.DeletionTimestamp != nil
	if moved || deleting || managedHere(old) && !managedHere(s) {
		// The slice is no longer one of its Service's current slices: someone took it over,
		// moved it, or is deleting it (a finalizer holds it). Kubernetes keeps tracking it and
		// then finds the Service's cache stale, for want of the slice, until the slice is gone
		// for good (forever, if taken over); forgetting it lets the sync replace it instead.
		c.tracker.Forget(old)
	}
	switch {
	case moved: // concerns both Services
		c.queueSliceService(old)
		c.queueSliceService(s)
	case deleting || managedHere(old) != managedHere(s) || managedHere(s) && c.tracker.ShouldSync(s):
		c.queueSliceService(s)
	case managedHere(s) && !apiequality.Semantic.DeepEqual(old.OwnerReferences, s.OwnerReferences):
		// Not in the generation (metadata), so Kubernetes notices only at the next resync; a
		// slice that lost its owner is not the Service's any more and must be replaced.
		c.queueSliceService(s)
	case managedHere(s):
		c.sliceCaughtUp(s)
	}
}

func (c *Controller) sliceDeleted(s *discoveryv1.EndpointSlice) {
	if !managedHere(s) {
		return
	}
	switch known, ours := c.tracker.HandleDeletion(s); {
	case !known: // not written by this controller since it started
	case ours:
		c.sliceCaughtUp(s)
	default:
		c.queueSliceService(s) // deleted by someone else: put it back
	}
}

// queueSliceService queues the Service a slice belongs to, after a pause: several slices of one
// Service often change together.
func (c *Controller) queueSliceService(s *discoveryv1.EndpointSlice) {
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return
	}
	c.loop.Queue.AddAfter(s.Namespace+"/"+name, max(minSliceChangeDelay, c.batchPeriod))
}
