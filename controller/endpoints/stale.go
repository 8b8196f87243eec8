package endpoints

import "sync"

// staleVersions catches a cache that has not yet caught up with the controller's own write.
// After an update it remembers the resourceVersion the update replaced; while the cache still
// shows that version, a sync would compute its write from an outdated object (and fail with a
// conflict, or worse, skip a needed write because the outdated copy looks right), so the sync
// fails instead and is retried once the cache has moved on.
//
// Safe for concurrent use.
type staleVersions struct {
	mu       sync.Mutex
	replaced map[string]string // Endpoints key → resourceVersion our last update replaced
}

func newStaleVersions() *staleVersions {
	return &staleVersions{replaced: map[string]string{}}
}

// replacedBy records that an update of key replaced resourceVersion old.
func (s *staleVersions) replacedBy(key, old string) {
	s.mu.Lock()
	s.replaced[key] = old
	s.mu.Unlock()
}

// isStale reports whether the cache's copy of key, at resourceVersion rv, is one our own
// update already replaced.
func (s *staleVersions) isStale(key, rv string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.replaced[key]
	return ok && old == rv
}

// forget drops what is known about key (its service is gone).
func (s *staleVersions) forget(key string) {
	s.mu.Lock()
	delete(s.replaced, key)
	s.mu.Unlock()
}
