package endpoints

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// repackSubsets rewrites subsets into the one canonical layout that lists the same
// (address, port) pairs, so that two lists can be compared and a rewrite of an unchanged list
// is recognised as such:
//
//   - An address is identified by its IP and target UID (two pods may share an IP, with host
//     networking); of several copies the first one met is kept.
//   - Per distinct port the addresses offering it are collected; an address that is both
//     ready and not ready for one port is not ready, the cautious reading.
//   - Ports whose address sets (with readiness) are identical share one subset. Addresses
//     without any port (a headless service without ports) form subsets without ports.
//   - Subsets without addresses disappear; the result is never nil.
//   - Addresses are sorted by IP, then UID; ports by name, number, protocol and
//     appProtocol; subsets by their sorted address lists. Kubernetes orders ports and subsets by a
//     hash instead; the order does not change what the object means, and comparisons
//     (equalSubsets) ignore it.
//
// The input is not modified and shares nothing with the result.
func repackSubsets(subsets []corev1.EndpointSubset) []corev1.EndpointSubset {
	var addrs []*corev1.EndpointAddress // distinct addresses, the first copy of each (input's)
	addrIndex := map[addressID]int{}
	var ports []portKey // distinct ports, in the order first met
	readiness := map[portKey]map[int]bool{}

	record := func(a *corev1.EndpointAddress, port portKey, ready bool) {
		id := idOf(a)
		i, ok := addrIndex[id]
		if !ok {
			i = len(addrs)
			addrIndex[id] = i
			addrs = append(addrs, a)
		}
		set, ok := readiness[port]
		if !ok {
			set = map[int]bool{}
			readiness[port] = set
			ports = append(ports, port)
		}
		if was, seen := set[i]; !seen || was {
			set[i] = ready
		}
	}
	for si := range subsets {
		s := &subsets[si]
		keys := []portKey{{none: true}}
		if len(s.Ports) > 0 {
			keys = keys[:0]
			for _, p := range s.Ports {
				keys = append(keys, keyOf(p))
			}
		}
		for _, k := range keys {
			for ai := range s.Addresses {
				record(&s.Addresses[ai], k, true)
			}
			for ai := range s.NotReadyAddresses {
				record(&s.NotReadyAddresses[ai], k, false)
			}
		}
	}

	// Group the ports by their address set, keyed by a signature listing the set in order.
	type group struct {
		members []int // indexes into addrs, sorted
		ready   map[int]bool
		ports   []corev1.EndpointPort
	}
	bySignature := map[string]*group{}
	var groups []*group
	for _, port := range ports {
		set := readiness[port]
		members := make([]int, 0, len(set))
		for i := range set {
			members = append(members, i)
		}
		slices.SortFunc(members, func(a, b int) int { return compareAddresses(addrs[a], addrs[b]) })
		sig := signature(addrs, members, set)
		g, ok := bySignature[sig]
		if !ok {
			g = &group{members: members, ready: set}
			bySignature[sig] = g
			groups = append(groups, g)
		}
		if !port.none {
			g.ports = append(g.ports, port.endpointPort())
		}
	}
	// Distinct groups differ in some address or readiness, so this order is total.
	slices.SortFunc(groups, func(x, y *group) int {
		for k := range min(len(x.members), len(y.members)) {
			i, j := x.members[k], y.members[k]
			if c := cmp.Or(compareAddresses(addrs[i], addrs[j]), compareBool(x.ready[i], y.ready[j])); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(x.members), len(y.members))
	})

	out := make([]corev1.EndpointSubset, 0, len(groups))
	for _, g := range groups {
		var s corev1.EndpointSubset
		for _, i := range g.members {
			a := *addrs[i].DeepCopy()
			if g.ready[i] {
				s.Addresses = append(s.Addresses, a)
			} else {
				s.NotReadyAddresses = append(s.NotReadyAddresses, a)
			}
		}
		slices.SortFunc(g.ports, comparePorts)
		s.Ports = g.ports
		out = append(out, s)
	}
	return out
}

// addressID is what makes two addresses the same endpoint.
type addressID struct {
	ip  string
	uid types.UID
}

func idOf(a *corev1.EndpointAddress) addressID {
	id := addressID{ip: a.IP}
	if a.TargetRef != nil {
		id.uid = a.TargetRef.UID
	}
	return id
}

// portKey is an EndpointPort by value (its appProtocol is a pointer, which a map key would
// compare by identity); none stands for "no port", the addresses of a port-less subset.
type portKey struct {
	none        bool
	name        string
	port        int32
	protocol    corev1.Protocol
	hasApp      bool
	appProtocol string
}

func keyOf(p corev1.EndpointPort) portKey {
	k := portKey{name: p.Name, port: p.Port, protocol: p.Protocol}
	if p.AppProtocol != nil {
		k.hasApp, k.appProtocol = true, *p.AppProtocol
	}
	return k
}

func (k portKey) endpointPort() corev1.EndpointPort {
	p := corev1.EndpointPort{Name: k.name, Port: k.port, Protocol: k.protocol}
	if k.hasApp {
		app := k.appProtocol
		p.AppProtocol = &app
	}
	return p
}

// compareAddresses orders by IP (as a string), then target UID, an address without a target
// first.
func compareAddresses(a, b *corev1.EndpointAddress) int {
	if c := strings.Compare(a.IP, b.IP); c != 0 {
		return c
	}
	switch {
	case a.TargetRef == nil && b.TargetRef == nil:
		return 0
	case a.TargetRef == nil:
		return -1
	case b.TargetRef == nil:
		return 1
	}
	return strings.Compare(string(a.TargetRef.UID), string(b.TargetRef.UID))
}

func comparePorts(a, b corev1.EndpointPort) int {
	ka, kb := keyOf(a), keyOf(b)
	return cmp.Or(
		strings.Compare(ka.name, kb.name),
		cmp.Compare(ka.port, kb.port),
		strings.Compare(string(ka.protocol), string(kb.protocol)),
		compareBool(ka.hasApp, kb.hasApp),
		strings.Compare(ka.appProtocol, kb.appProtocol),
	)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// signature spells out an address set with readiness, members already sorted, as a map key.
// Each field is preceded by its length, so different sets always give different signatures
// whatever bytes a stored object's UIDs hold.
func signature(addrs []*corev1.EndpointAddress, members []int, ready map[int]bool) string {
	var b strings.Builder
	for _, i := range members {
		id := idOf(addrs[i])
		fmt.Fprintf(&b, "%d:%s|%d:%s|%t;", len(id.ip), id.ip, len(id.uid), id.uid, ready[i])
	}
	return b.String()
}

// equalSubsets reports whether two subset lists mean the same Endpoints: the same addresses
// with the same details (hostname, node, target) offering the same ports with the same
// readiness, whatever the order or packing, nil and empty lists alike. The target's
// resourceVersion does not count, since the controller never writes it.
func equalSubsets(a, b []corev1.EndpointSubset) bool {
	return equality.Semantic.DeepEqual(canonicalSubsets(a), canonicalSubsets(b))
}

func canonicalSubsets(subsets []corev1.EndpointSubset) []corev1.EndpointSubset {
	out := repackSubsets(subsets)
	for i := range out {
		for _, list := range [][]corev1.EndpointAddress{out[i].Addresses, out[i].NotReadyAddresses} {
			for j := range list {
				if list[j].TargetRef != nil {
					list[j].TargetRef.ResourceVersion = ""
				}
			}
		}
	}
	return out
}
