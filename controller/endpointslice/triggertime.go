package endpointslice

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// triggerTimes computes the endpoints.kubernetes.io/last-change-trigger-time of a Service's
// slices: when the earliest change not yet reflected in them happened, which lets anyone measure
// how long a change took to reach the proxies.
//
// A change is a pod's Ready condition moving (its lastTransitionTime newer than the one seen at
// the previous sync) or the Service being (re)created. The first sync of a Service reports its
// creation. Changes without a timestamp (a pod deleted, a Service spec edited) give the zero time,
// and the annotation is removed. If one object changes twice between two syncs, only the last
// change is seen: the value is an approximation, as in Kubernetes.
//
// Safe for concurrent use, but the syncs of one Service must not overlap (the work queue
// guarantees it).
type triggerTimes struct {
	mu     sync.Mutex
	states map[types.NamespacedName]triggerState
}

// triggerState is what the previous sync of a Service saw.
type triggerState struct {
	service time.Time            // the Service's creationTimestamp
	pods    map[string]time.Time // pod name → Ready lastTransitionTime
}

func newTriggerTimes() *triggerTimes {
	return &triggerTimes{states: map[types.NamespacedName]triggerState{}}
}

// Compute returns the trigger time for a sync of svc over its pods, and remembers what it saw for
// the next sync. Call it on every sync, whether it writes or not.
func (t *triggerTimes) Compute(svc *corev1.Service, pods []*corev1.Pod) time.Time {
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	t.mu.Lock()
	prev, known := t.states[key]
	t.mu.Unlock()

	var earliest time.Time
	consider := func(ts time.Time) {
		if earliest.IsZero() || ts.Before(earliest) {
			earliest = ts
		}
	}
	next := triggerState{service: svc.CreationTimestamp.Time, pods: make(map[string]time.Time, len(pods))}
	for _, pod := range pods {
		c := readyCondition(pod)
		if c == nil || c.LastTransitionTime.IsZero() {
			continue
		}
		ts := c.LastTransitionTime.Time
		next.pods[pod.Name] = ts
		if ts.After(prev.pods[pod.Name]) {
			consider(ts)
		}
	}
	if next.service.After(prev.service) {
		consider(next.service)
	}

	t.mu.Lock()
	t.states[key] = next
	t.mu.Unlock()
	if !known {
		return svc.CreationTimestamp.Time
	}
	return earliest
}

// Forget drops what was seen of a Service (it is gone).
func (t *triggerTimes) Forget(svc types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.states, svc)
}
