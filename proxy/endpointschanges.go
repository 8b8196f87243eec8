package proxy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EndpointsMap is, per service port, every endpoint of the service merged across its
// EndpointSlices, sorted by address: State.Endpoints.
type EndpointsMap map[ServicePortName][]Endpoint

// EndpointsChangeTracker accumulates EndpointSlice changes between syncs. Per Service it keeps
// the slices last applied and the changes to apply next, both by slice name and already
// converted for the proxy's IP family, so an update that changes nothing the proxy uses
// (metadata, another family) is no change. It does no I/O; it is safe for concurrent use.
type EndpointsChangeTracker struct {
	family   corev1.IPFamily
	nodeName string
	start    time.Time
	// OnProblem, if set, is called (synchronously, from Update) when a changed slice has
	// endpoints or ports the proxy must skip.
	OnProblem func(Problem)

	mu           sync.Mutex
	services     map[types.NamespacedName]*serviceSlices
	triggerTimes map[types.NamespacedName][]time.Time
	dirty        map[types.NamespacedName]bool // services with pending changes
}

type serviceSlices struct {
	applied map[string]*sliceInfo
	pending map[string]*sliceInfo // nil value: the slice is gone; nil map: nothing pending
}

// sliceInfo is what the proxy uses of one EndpointSlice. It is never changed once made:
// the merged endpoints of a Service with one slice of one port are its endpoints slice.
type sliceInfo struct {
	ports []slicePort
	// endpoints, sorted by address; Addr's port is the slice's port when it has exactly
	// one, else 0.
	endpoints []Endpoint
}

type slicePort struct {
	name     string
	protocol corev1.Protocol
	port     uint16
}

// NewEndpointsChangeTracker makes a tracker for a proxy of one IP family on node nodeName;
// trigger times before start (usually: now) are not reported, as they predate this proxy.
func NewEndpointsChangeTracker(family corev1.IPFamily, nodeName string, start time.Time) *EndpointsChangeTracker {
	return &EndpointsChangeTracker{
		family: family, nodeName: nodeName, start: start,
		services:     map[types.NamespacedName]*serviceSlices{},
		triggerTimes: map[types.NamespacedName][]time.Time{},
		dirty:        map[types.NamespacedName]bool{},
	}
}

// Update records that slice was created or changed (removed false) or deleted (removed true)
// and reports whether that changes what the proxy should program. Slices of another address
// type and slices without the kubernetes.io/service-name label are ignored.
func (t *EndpointsChangeTracker) Update(slice *discoveryv1.EndpointSlice, removed bool) bool {
	if slice == nil || slice.AddressType != addressTypeOf(t.family) {
		return false
	}
	service := slice.Labels[discoveryv1.LabelServiceName]
	if service == "" {
		return false
	}
	nn := types.NamespacedName{Namespace: slice.Namespace, Name: service}
	var info *sliceInfo
	var problem *Problem
	if !removed {
		info, problem = t.convert(slice)
	}
	changed := t.update(nn, slice, info)
	if changed && problem != nil && t.OnProblem != nil {
		t.OnProblem(*problem)
	}
	return changed
}

// update records the new state of one slice of service nn (info nil: gone).
func (t *EndpointsChangeTracker) update(nn types.NamespacedName, slice *discoveryv1.EndpointSlice, info *sliceInfo) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ss := t.services[nn]
	if ss == nil {
		ss = &serviceSlices{applied: map[string]*sliceInfo{}}
		t.services[nn] = ss
	}
	defer func() {
		if len(ss.pending) > 0 {
			t.dirty[nn] = true
		} else {
			delete(t.dirty, nn)
		}
	}()
	applied, wasApplied := ss.applied[slice.Name]
	pending, wasPending := ss.pending[slice.Name]
	switch {
	case wasPending && pending.equal(info):
		return false
	case wasApplied && applied.equal(info), !wasApplied && info == nil:
		// Back to what is applied: nothing to do for this slice any more.
		delete(ss.pending, slice.Name)
		if len(ss.pending) == 0 {
			delete(t.triggerTimes, nn)
			if len(ss.applied) == 0 {
				delete(t.services, nn)
			}
		}
		return false
	}
	if ss.pending == nil {
		ss.pending = map[string]*sliceInfo{}
	}
	ss.pending[slice.Name] = info
	if info == nil {
		delete(t.triggerTimes, nn)
	} else if at := triggerTime(slice); at.After(t.start) {
		t.triggerTimes[nn] = append(t.triggerTimes[nn], at)
	}
	return true
}

// Pending is the number of Services with slice changes not applied yet.
func (t *EndpointsChangeTracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty)
}

// EndpointsUpdate is what an Apply changed.
type EndpointsUpdate struct {
	// Changed holds the service ports whose endpoints changed.
	Changed map[ServicePortName]bool
	// TriggerTimes holds, per Service, the last-change-trigger-time annotations of the slice
	// changes applied (those after the tracker's start), for network programming latency.
	TriggerTimes map[types.NamespacedName][]time.Time
}

// Apply brings m (the map earlier Applies have brought up to date; empty at first) to the
// current state and reports what changed.
func (t *EndpointsChangeTracker) Apply(m EndpointsMap) EndpointsUpdate {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := EndpointsUpdate{Changed: map[ServicePortName]bool{}, TriggerTimes: t.triggerTimes}
	t.triggerTimes = map[types.NamespacedName][]time.Time{}
	for nn := range t.dirty {
		ss := t.services[nn]
		before := mergeSlices(nn, ss.applied)
		for name, info := range ss.pending {
			if info == nil {
				delete(ss.applied, name)
			} else {
				ss.applied[name] = info
			}
		}
		ss.pending = nil // most services change seldom: no empty map kept for each
		after := mergeSlices(nn, ss.applied)
		for name := range before {
			if _, ok := after[name]; !ok {
				delete(m, name)
				u.Changed[name] = true
			}
		}
		for name, eps := range after {
			if !slices.EqualFunc(before[name], eps, Endpoint.Equal) {
				u.Changed[name] = true
			}
			m[name] = eps
		}
		if len(ss.applied) == 0 {
			delete(t.services, nn)
		}
	}
	clear(t.dirty)
	return u
}

// Equal reports whether e and o are the same endpoint in the same state.
func (e Endpoint) Equal(o Endpoint) bool {
	return e.Addr == o.Addr && e.Ready == o.Ready && e.Serving == o.Serving && e.Terminating == o.Terminating &&
		e.NodeName == o.NodeName && e.Zone == o.Zone && e.IsLocal == o.IsLocal &&
		slices.Equal(e.ZoneHints(), o.ZoneHints()) && slices.Equal(e.NodeHints(), o.NodeHints())
}

func (s *sliceInfo) equal(o *sliceInfo) bool {
	if s == nil || o == nil {
		return s == o
	}
	return slices.Equal(s.ports, o.ports) && slices.EqualFunc(s.endpoints, o.endpoints, Endpoint.Equal)
}

// mergeSlices merges one Service's slices into endpoints per service port: one endpoint per
// address and port, preferring a non-terminating one when slices disagree (during a slice
// handover), else the one of the first slice by name; sorted by address.
func mergeSlices(nn types.NamespacedName, bySlice map[string]*sliceInfo) EndpointsMap {
	if len(bySlice) == 0 {
		return nil
	}
	names := make([]string, 0, len(bySlice))
	for name := range bySlice {
		names = append(names, name)
	}
	slices.Sort(names)
	type portKey struct {
		name ServicePortName
		addr netip.AddrPort
	}
	if len(names) == 1 {
		if info := bySlice[names[0]]; len(info.ports) == 1 {
			// The common case, one slice of one port: its endpoints as they are, shared.
			if len(info.endpoints) == 0 {
				return nil
			}
			p := info.ports[0]
			return EndpointsMap{{NamespacedName: nn, Port: p.name, Protocol: p.protocol}: info.endpoints}
		}
	}
	index := map[portKey]int{}
	out := EndpointsMap{}
	for _, sliceName := range names {
		info := bySlice[sliceName]
		for _, p := range info.ports {
			name := ServicePortName{NamespacedName: nn, Port: p.name, Protocol: p.protocol}
			for _, ep := range info.endpoints {
				ep.Addr = netip.AddrPortFrom(ep.Addr.Addr(), p.port)
				k := portKey{name, ep.Addr}
				if i, ok := index[k]; ok {
					if out[name][i].Terminating && !ep.Terminating {
						out[name][i] = ep
					}
					continue
				}
				index[k] = len(out[name])
				if out[name] == nil {
					out[name] = make([]Endpoint, 0, len(info.endpoints))
				}
				out[name] = append(out[name], ep)
			}
		}
	}
	for _, eps := range out {
		slices.SortFunc(eps, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	}
	return out
}

// convert reads what the proxy uses of slice, skipping (and reporting) what it cannot use.
func (t *EndpointsChangeTracker) convert(slice *discoveryv1.EndpointSlice) (*sliceInfo, *Problem) {
	info := &sliceInfo{endpoints: make([]Endpoint, 0, len(slice.Endpoints))}
	var skipped []string
	for _, p := range slice.Ports {
		if p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
			skipped = append(skipped, fmt.Sprintf("port %s has no valid number", deref(p.Name)))
			continue
		}
		protocol := corev1.ProtocolTCP
		if p.Protocol != nil {
			protocol = *p.Protocol
		}
		info.ports = append(info.ports, slicePort{name: deref(p.Name), protocol: protocol, port: uint16(*p.Port)})
	}
	for i := range slice.Endpoints {
		e := &slice.Endpoints[i]
		if len(e.Addresses) == 0 {
			skipped = append(skipped, "an endpoint has no address")
			continue
		}
		ip, err := netip.ParseAddr(e.Addresses[0])
		if err != nil || familyOf(ip) != t.family {
			skipped = append(skipped, fmt.Sprintf("address %q is not an %s address", e.Addresses[0], t.family))
			continue
		}
		ep := Endpoint{
			Addr:        netip.AddrPortFrom(ip.Unmap(), 0),
			Ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
			Serving:     e.Conditions.Serving == nil || *e.Conditions.Serving,
			Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
			NodeName:    deref(e.NodeName),
			Zone:        deref(e.Zone),
		}
		ep.IsLocal = t.nodeName != "" && ep.NodeName == t.nodeName
		if e.Hints != nil && (len(e.Hints.ForZones) > 0 || len(e.Hints.ForNodes) > 0) {
			ep.Hints = &Hints{}
			for _, z := range e.Hints.ForZones {
				ep.Hints.Zones = append(ep.Hints.Zones, z.Name)
			}
			for _, n := range e.Hints.ForNodes {
				ep.Hints.Nodes = append(ep.Hints.Nodes, n.Name)
			}
		}
		info.endpoints = append(info.endpoints, ep)
	}
	if len(info.ports) == 1 {
		for i := range info.endpoints {
			info.endpoints[i].Addr = netip.AddrPortFrom(info.endpoints[i].Addr.Addr(), info.ports[0].port)
		}
	}
	// Slices list endpoints in any order; sorted, a reordering is no change. An address
	// listed twice counts once: the first not terminating, else the first.
	slices.SortStableFunc(info.endpoints, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	info.endpoints = dedupe(info.endpoints)
	slices.SortFunc(info.ports, func(a, b slicePort) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.protocol, b.protocol), cmp.Compare(a.port, b.port))
	})
	if len(skipped) == 0 {
		return info, nil
	}
	err := fmt.Errorf("%s", skipped[0])
	if len(skipped) > 1 {
		err = fmt.Errorf("%s (and %d more skipped)", skipped[0], len(skipped)-1)
	}
	return info, &Problem{Subject: slice.Namespace + "/" + slice.Name, Reason: "invalid-endpoint", Err: err}
}

// dedupe keeps one endpoint per address of endpoints sorted by address (stably): the first
// that is not terminating, else the first.
func dedupe(endpoints []Endpoint) []Endpoint {
	out := endpoints[:0]
	for _, ep := range endpoints {
		if n := len(out); n > 0 && out[n-1].Addr == ep.Addr {
			if out[n-1].Terminating && !ep.Terminating {
				out[n-1] = ep
			}
			continue
		}
		out = append(out, ep)
	}
	return out
}

// triggerTime reads the slice's last-change-trigger-time annotation (zero when absent or bad).
func triggerTime(slice *discoveryv1.EndpointSlice) time.Time {
	s, ok := slice.Annotations[corev1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return at
}

func addressTypeOf(family corev1.IPFamily) discoveryv1.AddressType {
	if family == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
