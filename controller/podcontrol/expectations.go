package podcontrol

import (
	"sync"
	"time"
)

// ExpectationsTTL is how long an owner's unfulfilled expectations hold back its syncs: after
// that the cache is assumed to have missed the events, and the owner syncs from what it sees.
const ExpectationsTTL = 5 * time.Minute

// Expectations remembers, per owner key, the pod creations and deletions a sync asked for and
// the informer has not yet shown. While they are outstanding the owner's pods in the cache
// are known to be stale, so the owner is not scaled again: that is what keeps a slow cache
// from causing extra pods (or extra deletions).
//
// Creations are counted (the pods' names are not known before the server answers); deletions
// are tracked by pod key, so that a pod seen first as terminating and then as deleted is
// counted once.
type Expectations struct {
	mu     sync.Mutex
	owners map[string]*expected
	now    func() time.Time
}

type expected struct {
	creates int
	deletes map[string]struct{}
	set     time.Time
}

func NewExpectations(now func() time.Time) *Expectations {
	if now == nil {
		now = time.Now
	}
	return &Expectations{owners: map[string]*expected{}, now: now}
}

// Satisfied reports whether the owner may be scaled: nothing is outstanding, or what is
// outstanding is older than the TTL, or nothing was ever expected.
func (e *Expectations) Satisfied(owner string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.owners[owner]
	if !ok {
		return true
	}
	if x.creates <= 0 && len(x.deletes) == 0 {
		return true
	}
	return e.now().Sub(x.set) > ExpectationsTTL
}

// ExpectCreations replaces the owner's expectations with n creations.
func (e *Expectations) ExpectCreations(owner string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.owners[owner] = &expected{creates: n, set: e.now()}
}

// ExpectDeletions replaces the owner's expectations with the deletion of the pods podKeys.
func (e *Expectations) ExpectDeletions(owner string, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := &expected{deletes: make(map[string]struct{}, len(podKeys)), set: e.now()}
	for _, k := range podKeys {
		x.deletes[k] = struct{}{}
	}
	e.owners[owner] = x
}

// CreationObserved lowers the owner's outstanding creations by one: a pod it owns appeared,
// or a creation it expected was not made.
func (e *Expectations) CreationObserved(owner string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.owners[owner]; ok && x.creates > 0 {
		x.creates--
	}
}

// DeletionObserved marks the deletion of pod podKey as seen (or as not going to happen).
// Pods not expected to go are ignored.
func (e *Expectations) DeletionObserved(owner, podKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.owners[owner]; ok {
		delete(x.deletes, podKey)
	}
}

// Forget drops the owner's expectations (the owner is gone).
func (e *Expectations) Forget(owner string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.owners, owner)
}
