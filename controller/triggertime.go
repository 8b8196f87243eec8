package controller

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TriggerTimes computes the endpoints.kubernetes.io/last-change-trigger-time annotation the
// endpoints and EndpointSlice controllers write: when did the change happen that a write of a
// service's endpoints reflects? Latency monitoring subtracts it from the moment proxies see the
// new endpoints (kube-proxy's network_programming_duration_seconds).
//
// It remembers, per service, the service's creationTimestamp and each pod's Ready transition
// time seen at the previous sync. The trigger of a sync is the earliest of those that moved
// forward since then; the first sync of a service reports its creationTimestamp. Changes
// without a time (a pod deleted, the service's spec edited) give the zero time, and the
// annotation is removed. The answer is approximate by nature: a pod that changed twice between
// syncs counts with its last change.
//
// A sync first computes its trigger (Observe), then, unless its write failed, commits what it
// saw (Commit): a failed sync is retried, and the retry must find the same changes new, or the
// change it finally writes would carry no trigger time. (Kubernetes records the state before
// writing, so after a failed write the annotation is lost.)
//
// Safe for concurrent use by different services; calls for one service must not overlap,
// which the work queue guarantees (a key is never synced twice at once).
type TriggerTimes struct {
	mu       sync.Mutex
	services map[string]TriggerState
}

// TriggerState is what one sync of a service saw, to be committed if the sync succeeds.
type TriggerState struct {
	created  time.Time
	podReady map[string]time.Time // pod name → Ready lastTransitionTime
}

// NewTriggerTimes returns an empty tracker.
func NewTriggerTimes() *TriggerTimes {
	return &TriggerTimes{services: map[string]TriggerState{}}
}

// Observe compares the current state of the service (key "ns/name") and the pods its
// selector matches with the last committed one and returns the trigger time for this sync
// (zero when nothing moved forward) and the state to commit once the sync succeeded.
func (t *TriggerTimes) Observe(key string, svc *corev1.Service, pods []*corev1.Pod) (time.Time, TriggerState) {
	t.mu.Lock()
	prev, known := t.services[key]
	t.mu.Unlock()

	var earliest time.Time
	consider := func(at time.Time) {
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	next := TriggerState{created: svc.CreationTimestamp.Time, podReady: make(map[string]time.Time, len(pods))}
	for _, pod := range pods {
		c := PodReadyCondition(pod)
		if c == nil || c.LastTransitionTime.IsZero() {
			continue
		}
		at := c.LastTransitionTime.Time
		next.podReady[pod.Name] = at
		if at.After(prev.podReady[pod.Name]) {
			consider(at)
		}
	}
	if next.created.After(prev.created) {
		consider(next.created) // the service was deleted and created again
	}
	if !known {
		return svc.CreationTimestamp.Time, next
	}
	return earliest, next
}

// Commit makes state, from Observe, the one the next sync of key compares with.
func (t *TriggerTimes) Commit(key string, state TriggerState) {
	t.mu.Lock()
	t.services[key] = state
	t.mu.Unlock()
}

// Forget drops what is known about a deleted service.
func (t *TriggerTimes) Forget(key string) {
	t.mu.Lock()
	delete(t.services, key)
	t.mu.Unlock()
}

// PodReadyCondition returns the pod's Ready condition, or nil.
func PodReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
