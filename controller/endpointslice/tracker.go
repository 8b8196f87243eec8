package endpointslice

import (
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// deletionExpected is the generation recorded for a slice this controller deleted.
const deletionExpected = -1

// sliceTracker remembers, for every Service, the slices this controller wrote and the state it
// wrote them in, so that
//
//   - a sync can tell that the informer has not caught up with its own writes yet (the cache is
//     stale: working from it would undo or duplicate them), and
//   - slice events caused by the controller's own writes can be told from changes made by
//     someone else, which call for a sync.
//
// A slice's state is its generation, which the apiserver bumps on every change other than to
// metadata (Kubernetes' and kplane's API servers both do). With a server that left generation
// at 0 on EndpointSlices, the tracker falls back to the resourceVersion to recognise its own
// writes, and cannot tell an outdated cached slice from one changed since (the conditional updates of a
// sync then fail with a conflict instead, and are retried).
//
// The tracker is safe for concurrent use. Slices are attributed to a Service by their
// kubernetes.io/service-name label.
type sliceTracker struct {
	mu        sync.Mutex
	byService map[types.NamespacedName]map[types.UID]sliceState
	// behind holds the Services whose sync is waiting for the informer to catch up with this
	// controller's writes (see StartSync).
	behind map[types.NamespacedName]bool
	// gone holds, per Service, the slices the informer has shown deleted since the Service's
	// last sync began. A sync records its write only once the server has answered, and the
	// informer may show the slice deleted (by someone else) before that: without this, the
	// late record would bring back a slice that can never appear again (UIDs are not reused),
	// and every later sync would find the cache stale for want of it. The next sync of the
	// Service clears them: the workqueue never runs two syncs of one Service at once, so no
	// write of an earlier sync can still be on its way.
	gone map[types.NamespacedName]map[types.UID]bool
}

// sliceState is what the tracker knows of one slice.
type sliceState struct {
	generation      int64 // deletionExpected once deleted
	resourceVersion string
}

func newSliceTracker() *sliceTracker {
	return &sliceTracker{
		byService: map[types.NamespacedName]map[types.UID]sliceState{},
		behind:    map[types.NamespacedName]bool{},
		gone:      map[types.NamespacedName]map[types.UID]bool{},
	}
}

func serviceOf(s *discoveryv1.EndpointSlice) types.NamespacedName {
	return types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[discoveryv1.LabelServiceName]}
}

// Update records a slice as the server returned it from this controller's create or update.
func (t *sliceTracker) Update(s *discoveryv1.EndpointSlice) {
	t.set(s, sliceState{generation: s.Generation, resourceVersion: s.ResourceVersion})
}

// ExpectDeletion records that this controller deleted a slice.
func (t *sliceTracker) ExpectDeletion(s *discoveryv1.EndpointSlice) {
	t.set(s, sliceState{generation: deletionExpected})
}

func (t *sliceTracker) set(s *discoveryv1.EndpointSlice, st sliceState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	svc := serviceOf(s)
	if t.gone[svc][s.UID] {
		return // deleted already: see gone
	}
	m := t.byService[svc]
	if m == nil {
		m = map[types.UID]sliceState{}
		t.byService[svc] = m
	}
	m[s.UID] = st
}

// Forget drops what the tracker knows of one slice (it is gone, and no event will say so).
func (t *sliceTracker) Forget(s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drop(serviceOf(s), s.UID)
}

// drop forgets one slice, and the Service once it has none left. The caller holds mu.
func (t *sliceTracker) drop(svc types.NamespacedName, uid types.UID) {
	if m := t.byService[svc]; m != nil {
		delete(m, uid)
		if len(m) == 0 {
			delete(t.byService, svc)
		}
	}
}

// ShouldSync reports whether a slice seen by the informer is in a state this controller did not
// write (so its Service needs a sync): unknown, expected deleted, or changed since.
func (t *sliceTracker) ShouldSync(s *discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.byService[serviceOf(s)][s.UID]
	switch {
	case !ok || st.generation == deletionExpected:
		return true
	case s.Generation == 0 && st.generation == 0:
		return s.ResourceVersion != st.resourceVersion // a server that keeps no generations
	default:
		return s.Generation > st.generation
	}
}

// HandleDeletion forgets a slice the informer saw deleted, and any record of a write of it still
// to come (see gone). It reports whether the tracker knew the slice and, if so, whether the
// deletion was this controller's (ours) or someone else's (its Service needs a sync).
func (t *sliceTracker) HandleDeletion(s *discoveryv1.EndpointSlice) (known, ours bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	svc := serviceOf(s)
	if t.gone[svc] == nil {
		t.gone[svc] = map[types.UID]bool{}
	}
	t.gone[svc][s.UID] = true
	st, ok := t.byService[svc][s.UID]
	t.drop(svc, s.UID)
	return ok, ok && st.generation == deletionExpected
}

// StartSync is called when a sync of a Service is about to read the informer's slices. It
// marks the Service as waiting: if Stale then finds the slices behind, the event that brings
// the informer up to date (CaughtUp) says so, and the Service can be synced at once rather
// than after a retry delay (marking before the read means no such event can slip between the
// read and the mark). And it clears the Service's deleted slices (gone): every earlier sync has
// recorded its writes by now.
func (t *sliceTracker) StartSync(svc types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.behind[svc] = true
	delete(t.gone, svc)
}

// CaughtUp is told of each informer event that shows one of this controller's own writes (a
// slice it created or updated, in the state it wrote, or one it deleted, gone); it reports
// whether the slice's Service waits for such an event, and stops it waiting.
func (t *sliceTracker) CaughtUp(s *discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	svc := serviceOf(s)
	waiting := t.behind[svc]
	delete(t.behind, svc)
	return waiting
}

// Stale reports whether the informer's slices of a Service (those not being deleted) lag behind
// this controller's writes: a slice older than the one written, a slice deleted still there, or a
// slice written not there yet. When they do not, the Service stops waiting (StartSync).
func (t *sliceTracker) Stale(svc types.NamespacedName, cached []*discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	stale := t.stale(svc, cached)
	if !stale {
		delete(t.behind, svc)
	}
	return stale
}

// stale is Stale's test. The caller holds mu.
func (t *sliceTracker) stale(svc types.NamespacedName, cached []*discoveryv1.EndpointSlice) bool {
	m := t.byService[svc]
	if len(m) == 0 {
		return false
	}
	seen := make(map[types.UID]bool, len(cached))
	for _, s := range cached {
		seen[s.UID] = true
		if st, ok := m[s.UID]; ok && (st.generation == deletionExpected || st.generation > s.Generation) {
			return true
		}
	}
	for uid, st := range m {
		if st.generation != deletionExpected && !seen[uid] {
			return true
		}
	}
	return false
}

// DeleteService forgets everything about a Service's slices.
func (t *sliceTracker) DeleteService(svc types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byService, svc)
	delete(t.behind, svc)
	delete(t.gone, svc)
}
