package userspace

import (
	"net/netip"
	"slices"
	"time"
)

// balancer chooses endpoints for one endpoint set of one service port: round robin, with
// ClientIP affinity when the service asks for it. It is plain state with no locking and no I/O;
// servicePort guards it, and the tests drive it with explicit times.
type balancer struct {
	endpoints []netip.AddrPort
	// next is the index the next round-robin choice starts from.
	next int

	// affinityTimeout is zero when the service has no ClientIP affinity.
	affinityTimeout time.Duration
	affinity        map[netip.Addr]affinityEntry
	// lastSweep is when expired affinity entries were last removed, so that clients that never
	// come back do not pile up.
	lastSweep time.Time
}

type affinityEntry struct {
	endpoint netip.AddrPort
	lastUsed time.Time
}

// setEndpoints replaces the endpoint set and reports whether it changed. Affinity entries that
// point at endpoints no longer in the set are forgotten: those clients get a fresh choice.
func (b *balancer) setEndpoints(endpoints []netip.AddrPort) bool {
	if slices.Equal(b.endpoints, endpoints) {
		return false
	}
	b.endpoints = endpoints
	if len(endpoints) == 0 {
		b.next = 0
	} else {
		b.next %= len(endpoints)
	}
	for client, e := range b.affinity {
		if !slices.Contains(endpoints, e.endpoint) {
			delete(b.affinity, client)
		}
	}
	return true
}

// setAffinityTimeout turns ClientIP affinity on (timeout > 0) or off, keeping the entries
// that exist when only the timeout changes.
func (b *balancer) setAffinityTimeout(timeout time.Duration) {
	b.affinityTimeout = timeout
	if timeout <= 0 {
		b.affinity = nil
	}
}

// candidates returns, in the order to try them, at most max endpoints for a new connection
// from client: the client's affinity endpoint if it has a live one, else the round-robin
// choice; then the endpoints after it in the ring, for when dialling the first fails.
func (b *balancer) candidates(client netip.Addr, now time.Time, max int) []netip.AddrPort {
	n := len(b.endpoints)
	if n == 0 || max <= 0 {
		return nil
	}
	b.sweep(now)
	start := -1
	if e, ok := b.affinity[client]; ok && now.Sub(e.lastUsed) < b.affinityTimeout {
		start = slices.Index(b.endpoints, e.endpoint)
	}
	if start < 0 {
		start = b.next
		b.next = (b.next + 1) % n
	}
	out := make([]netip.AddrPort, 0, min(n, max))
	for i := range min(n, max) {
		out = append(out, b.endpoints[(start+i)%n])
	}
	return out
}

// connected records that client's connection went to endpoint, which (re)starts the client's
// affinity to it.
func (b *balancer) connected(client netip.Addr, endpoint netip.AddrPort, now time.Time) {
	if b.affinityTimeout <= 0 {
		return
	}
	if b.affinity == nil {
		b.affinity = make(map[netip.Addr]affinityEntry)
	}
	b.affinity[client] = affinityEntry{endpoint: endpoint, lastUsed: now}
}

// sweep drops expired affinity entries, at most once per timeout (and at least once a
// minute), so its cost spreads thinly over many choices.
func (b *balancer) sweep(now time.Time) {
	if len(b.affinity) == 0 {
		return
	}
	if now.Sub(b.lastSweep) < min(b.affinityTimeout, time.Minute) {
		return
	}
	b.lastSweep = now
	for client, e := range b.affinity {
		if now.Sub(e.lastUsed) >= b.affinityTimeout {
			delete(b.affinity, client)
		}
	}
}
