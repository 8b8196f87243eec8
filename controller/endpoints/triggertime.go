package endpoints

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// triggerTimes computes the last-change-trigger-time annotation: when did the change happen
// that this write of a service's Endpoints reflects? Latency monitoring subtracts it from the
// moment proxies see the new endpoints.
//
// It remembers, per service, the service's creationTimestamp and each pod's Ready transition
// time seen at the previous sync. The trigger of a sync is the earliest of those that moved
// forward since then; the first sync of a service reports its creationTimestamp. The answer
// is approximate by nature: a pod that changed twice between syncs counts with its last
// change, and a deleted pod leaves no time behind.
//
// A sync first computes its trigger (observe), then, unless its write failed, commits what it
// saw (commit): a failed sync is retried, and the retry must find the same changes new, or
// the change it finally writes would carry no trigger time. (Kubernetes records the state
// before writing, so after a failed write the annotation is lost.)
//
// Safe for concurrent use by different services; calls for one service must not overlap,
// which the work queue guarantees (a key is never synced twice at once).
type triggerTimes struct {
	mu       sync.Mutex
	services map[string]triggerState
}

type triggerState struct {
	created  time.Time
	podReady map[string]time.Time // pod name → Ready lastTransitionTime
}

func newTriggerTimes() *triggerTimes {
	return &triggerTimes{services: map[string]triggerState{}}
}

// observe compares the current state of the service (key "ns/name") and the pods its
// selector matches with the last committed one and returns the trigger time for this sync
// (zero when nothing moved forward) and the state to commit once the sync succeeded.
func (t *triggerTimes) observe(key string, svc *corev1.Service, pods []*corev1.Pod) (time.Time, triggerState) {
	t.mu.Lock()
	prev, known := t.services[key]
	t.mu.Unlock()

	var earliest time.Time
	consider := func(at time.Time) {
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	next := triggerState{created: svc.CreationTimestamp.Time, podReady: make(map[string]time.Time, len(pods))}
	for _, pod := range pods {
		c := podReadyCondition(pod)
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

// commit makes state, from observe, the one the next sync of key compares with.
func (t *triggerTimes) commit(key string, state triggerState) {
	t.mu.Lock()
	t.services[key] = state
	t.mu.Unlock()
}

// forget drops what is known about a deleted service.
func (t *triggerTimes) forget(key string) {
	t.mu.Lock()
	delete(t.services, key)
	t.mu.Unlock()
}
