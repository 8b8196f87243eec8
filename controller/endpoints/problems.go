package endpoints

import (
	"log/slog"
	"sync"
)

// problemLog logs each problem of a service once, not on every sync: a pod whose named port
// does not resolve would otherwise be reported every time anything in the service changes.
// It keeps, per service, the problems of the latest sync; a problem that goes away and comes
// back is logged again. Memory stays bounded by what the current objects can cause.
//
// Safe for concurrent use.
type problemLog struct {
	mu   sync.Mutex
	seen map[string]map[string]struct{} // service key → problems of its latest sync
}

func newProblemLog() *problemLog {
	return &problemLog{seen: map[string]map[string]struct{}{}}
}

// report records the problems of a sync of service key and returns those not reported by the
// previous sync (which it also logs).
func (p *problemLog) report(key string, problems []string) []string {
	current := make(map[string]struct{}, len(problems))
	for _, pr := range problems {
		current[pr] = struct{}{}
	}
	p.mu.Lock()
	prev := p.seen[key]
	if len(current) == 0 {
		delete(p.seen, key)
	} else {
		p.seen[key] = current
	}
	p.mu.Unlock()

	var fresh []string
	for _, pr := range problems {
		if _, old := prev[pr]; old {
			continue
		}
		if prev == nil {
			prev = map[string]struct{}{}
		}
		prev[pr] = struct{}{} // the old set is ours alone now; this skips repeats within the sync
		fresh = append(fresh, pr)
		slog.Info("endpoints: leaving out part of a pod", "service", key, "problem", pr)
	}
	return fresh
}

// forget drops a deleted service's problems.
func (p *problemLog) forget(key string) {
	p.mu.Lock()
	delete(p.seen, key)
	p.mu.Unlock()
}
