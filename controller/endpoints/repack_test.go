package endpoints

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestRepackSubsets(t *testing.T) {
	a, b, c := addr("10.0.0.1", "a"), addr("10.0.0.2", "b"), addr("10.0.0.3", "c")
	p80, p443 := eport("http", 80), eport("https", 443)
	withHost := func(x corev1.EndpointAddress, h string) corev1.EndpointAddress { x.Hostname = h; return x }
	bare := corev1.EndpointAddress{IP: "10.0.0.1"} // no target
	tests := []struct {
		name string
		in   []corev1.EndpointSubset
		want []corev1.EndpointSubset
	}{
		{"nil", nil, []corev1.EndpointSubset{}},
		{"empty subsets vanish", []corev1.EndpointSubset{{}, {Ports: eports(p80)}}, []corev1.EndpointSubset{}},
		{
			"one address per subset, same port: merged and sorted",
			[]corev1.EndpointSubset{{Addresses: addrs(c), Ports: eports(p80)}, {Addresses: addrs(a), Ports: eports(p80)}, {NotReadyAddresses: addrs(b), Ports: eports(p80)}},
			[]corev1.EndpointSubset{{Addresses: addrs(a, c), NotReadyAddresses: addrs(b), Ports: eports(p80)}},
		},
		{
			"ports with the same address set share a subset",
			[]corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(p443)}, {Addresses: addrs(b, a), Ports: eports(p80)}},
			[]corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(p80, p443)}},
		},
		{
			"ports with different address sets do not",
			[]corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(p80, p443)}, {Addresses: addrs(c), Ports: eports(p80)}},
			[]corev1.EndpointSubset{
				{Addresses: addrs(a, b), Ports: eports(p443)},
				{Addresses: addrs(a, b, c), Ports: eports(p80)},
			},
		},
		{
			"readiness is part of the set: ready and not-ready copies split",
			[]corev1.EndpointSubset{{Addresses: addrs(a), Ports: eports(p80)}, {NotReadyAddresses: addrs(a), Ports: eports(p443)}},
			[]corev1.EndpointSubset{
				{NotReadyAddresses: addrs(a), Ports: eports(p443)},
				{Addresses: addrs(a), Ports: eports(p80)},
			},
		},
		{
			"not ready wins for one port, whichever comes first",
			[]corev1.EndpointSubset{{NotReadyAddresses: addrs(a), Ports: eports(p80)}, {Addresses: addrs(a, b), Ports: eports(p80)}},
			[]corev1.EndpointSubset{{Addresses: addrs(b), NotReadyAddresses: addrs(a), Ports: eports(p80)}},
		},
		{
			"not ready wins when it comes second",
			[]corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(p80)}, {NotReadyAddresses: addrs(a), Ports: eports(p80)}},
			[]corev1.EndpointSubset{{Addresses: addrs(b), NotReadyAddresses: addrs(a), Ports: eports(p80)}},
		},
		{
			"an address is its IP and UID; the first copy is kept",
			[]corev1.EndpointSubset{{Addresses: addrs(withHost(a, "first"), withHost(a, "second")), Ports: eports(p80)}, {Addresses: addrs(withHost(a, "third")), Ports: eports(p443)}},
			[]corev1.EndpointSubset{{Addresses: addrs(withHost(a, "first")), Ports: eports(p80, p443)}},
		},
		{
			"one IP, two UIDs: two addresses; no target sorts first",
			[]corev1.EndpointSubset{{Addresses: addrs(addr("10.0.0.1", "z"), a, bare), Ports: eports(p80)}},
			[]corev1.EndpointSubset{{Addresses: addrs(bare, a, addr("10.0.0.1", "z")), Ports: eports(p80)}},
		},
		{
			"subsets without ports stay without ports",
			[]corev1.EndpointSubset{{Addresses: addrs(b)}, {Addresses: addrs(a)}, {NotReadyAddresses: addrs(c)}},
			[]corev1.EndpointSubset{{Addresses: addrs(a, b), NotReadyAddresses: addrs(c)}},
		},
		{
			"port-less addresses join ports with the same address set",
			[]corev1.EndpointSubset{{Addresses: addrs(a)}, {Addresses: addrs(a), Ports: eports(p80)}, {Addresses: addrs(b)}},
			[]corev1.EndpointSubset{
				{Addresses: addrs(a), Ports: eports(p80)},
				{Addresses: addrs(a, b)},
			},
		},
		{
			"equal appProtocols behind different pointers are one port",
			[]corev1.EndpointSubset{
				{Addresses: addrs(a), Ports: eports(corev1.EndpointPort{Name: "g", Port: 90, Protocol: "TCP", AppProtocol: ptr("h2c")})},
				{Addresses: addrs(b), Ports: eports(corev1.EndpointPort{Name: "g", Port: 90, Protocol: "TCP", AppProtocol: ptr("h2c")})},
			},
			[]corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(corev1.EndpointPort{Name: "g", Port: 90, Protocol: "TCP", AppProtocol: ptr("h2c")})}},
		},
		{
			"appProtocol distinguishes ports; none sorts first",
			[]corev1.EndpointSubset{{Addresses: addrs(a), Ports: eports(
				corev1.EndpointPort{Name: "g", Port: 90, Protocol: "TCP", AppProtocol: ptr("h2c")},
				corev1.EndpointPort{Name: "g", Port: 90, Protocol: "TCP"})}},
			[]corev1.EndpointSubset{{Addresses: addrs(a), Ports: eports(
				corev1.EndpointPort{Name: "g", Port: 90, Protocol: "TCP"},
				corev1.EndpointPort{Name: "g", Port: 90, Protocol: "TCP", AppProtocol: ptr("h2c")})}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := dump(tt.in)
			got := repackSubsets(tt.in)
			if got == nil {
				t.Error("result is nil")
			}
			sameSubsets(t, got, tt.want)
			if dump(tt.in) != before {
				t.Error("input was modified")
			}
			sameSubsets(t, repackSubsets(got), got) // idempotent
		})
	}
}

// TestRepackIgnoresOrder shuffles random inputs, at every level, and expects one result.
func TestRepackIgnoresOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		in := randomSubsets(rng)
		want := repackSubsets(in)
		for range 5 {
			shuffled := shuffleSubsets(rng, in)
			got := repackSubsets(shuffled)
			if dump(got) != dump(want) {
				t.Fatalf("round %d: order changed the result\ninput %s\nshuffled %s\ngot %s\nwant %s", round, dump(in), dump(shuffled), dump(got), dump(want))
			}
			if !equalSubsets(in, shuffled) {
				t.Fatalf("round %d: equalSubsets says a shuffle differs", round)
			}
		}
		if !equalSubsets(in, want) {
			t.Fatalf("round %d: repacking changed the meaning", round)
		}
		sameSubsets(t, repackSubsets(want), want)
	}
}

// randomSubsets draws subsets over a small pool of addresses and ports, so that duplicates,
// overlaps and ready/not-ready conflicts are common. Each address has one fixed form, so that
// "first copy wins" cannot make the order visible.
func randomSubsets(rng *rand.Rand) []corev1.EndpointSubset {
	pool := make([]corev1.EndpointAddress, 6)
	for i := range pool {
		pool[i] = addr(fmt.Sprintf("10.0.0.%d", rng.IntN(4)), fmt.Sprintf("p%d", i))
	}
	ports := []corev1.EndpointPort{eport("a", 1), eport("b", 2), eport("c", 3), {Name: "c", Port: 3, Protocol: "UDP"}}
	var out []corev1.EndpointSubset
	for range rng.IntN(6) {
		var s corev1.EndpointSubset
		for range rng.IntN(4) {
			s.Addresses = append(s.Addresses, pool[rng.IntN(len(pool))])
		}
		for range rng.IntN(3) {
			s.NotReadyAddresses = append(s.NotReadyAddresses, pool[rng.IntN(len(pool))])
		}
		for range rng.IntN(3) {
			s.Ports = append(s.Ports, ports[rng.IntN(len(ports))])
		}
		out = append(out, s)
	}
	return out
}

func shuffleSubsets(rng *rand.Rand, in []corev1.EndpointSubset) []corev1.EndpointSubset {
	out := make([]corev1.EndpointSubset, len(in))
	for i, s := range in {
		out[i] = *s.DeepCopy()
		rng.Shuffle(len(out[i].Addresses), func(a, b int) { out[i].Addresses[a], out[i].Addresses[b] = out[i].Addresses[b], out[i].Addresses[a] })
		rng.Shuffle(len(out[i].NotReadyAddresses), func(a, b int) {
			out[i].NotReadyAddresses[a], out[i].NotReadyAddresses[b] = out[i].NotReadyAddresses[b], out[i].NotReadyAddresses[a]
		})
		rng.Shuffle(len(out[i].Ports), func(a, b int) { out[i].Ports[a], out[i].Ports[b] = out[i].Ports[b], out[i].Ports[a] })
	}
	rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

func TestEqualSubsets(t *testing.T) {
	a, b := addr("10.0.0.1", "a"), addr("10.0.0.2", "b")
	p80, p443 := eport("http", 80), eport("https", 443)
	withRV := func(x corev1.EndpointAddress) corev1.EndpointAddress {
		x = *x.DeepCopy()
		x.TargetRef.ResourceVersion = "42"
		return x
	}
	emptyNode := func(x corev1.EndpointAddress) corev1.EndpointAddress { x.NodeName = ptr(""); return x }
	noNode := func(x corev1.EndpointAddress) corev1.EndpointAddress { x.NodeName = nil; return x }
	host := func(x corev1.EndpointAddress) corev1.EndpointAddress { x.Hostname = "h"; return x }
	base := []corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(p80, p443)}}
	tests := []struct {
		name  string
		x, y  []corev1.EndpointSubset
		equal bool
	}{
		{"nil and empty", nil, []corev1.EndpointSubset{}, true},
		{"same", base, base, true},
		{"order of addresses and ports", base, []corev1.EndpointSubset{{Addresses: addrs(b, a), Ports: eports(p443, p80)}}, true},
		{"packed differently", base, []corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(p80)}, {Addresses: addrs(b), Ports: eports(p443)}, {Addresses: addrs(a), Ports: eports(p443)}}, true},
		{"target resourceVersion ignored", base, []corev1.EndpointSubset{{Addresses: addrs(withRV(a), b), Ports: eports(p80, p443)}}, true},
		{"empty lists inside a subset", []corev1.EndpointSubset{{Addresses: addrs(a), NotReadyAddresses: []corev1.EndpointAddress{}, Ports: eports(p80)}}, []corev1.EndpointSubset{{Addresses: addrs(a), Ports: eports(p80)}}, true},
		{"an address more", base, []corev1.EndpointSubset{{Addresses: addrs(a), Ports: eports(p80, p443)}}, false},
		{"a port more", base, []corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(p80)}}, false},
		{"readiness", base, []corev1.EndpointSubset{{Addresses: addrs(a), NotReadyAddresses: addrs(b), Ports: eports(p80, p443)}}, false},
		{"hostname", base, []corev1.EndpointSubset{{Addresses: addrs(host(a), b), Ports: eports(p80, p443)}}, false},
		{"nodeName", base, []corev1.EndpointSubset{{Addresses: addrs(noNode(a), b), Ports: eports(p80, p443)}}, false},
		{"nodeName nil and empty differ", []corev1.EndpointSubset{{Addresses: addrs(noNode(a))}}, []corev1.EndpointSubset{{Addresses: addrs(emptyNode(a))}}, false},
		{"port protocol", base, []corev1.EndpointSubset{{Addresses: addrs(a, b), Ports: eports(p80, corev1.EndpointPort{Name: "https", Port: 443, Protocol: "UDP"})}}, false},
		{"empty and something", nil, base, false},
		{"duplicates collapse", base, []corev1.EndpointSubset{{Addresses: addrs(a, b, a), Ports: eports(p80, p443, p80)}}, true},
	}
	for _, tt := range tests {
		if got := equalSubsets(tt.x, tt.y); got != tt.equal {
			t.Errorf("%s: equalSubsets = %v, want %v", tt.name, got, tt.equal)
		}
		if got := equalSubsets(tt.y, tt.x); got != tt.equal {
			t.Errorf("%s (swapped): equalSubsets = %v, want %v", tt.name, got, tt.equal)
		}
	}
}
