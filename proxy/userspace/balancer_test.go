package userspace

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestBalancer(t *testing.T) {
	a := netip.MustParseAddrPort("10.0.0.1:80")
	b := netip.MustParseAddrPort("10.0.0.2:80")
	c := netip.MustParseAddrPort("10.0.0.3:80")
	client1 := netip.MustParseAddr("192.168.0.1")
	client2 := netip.MustParseAddr("192.168.0.2")
	t0 := time.Unix(1000, 0)

	// A step either sets endpoints, or asks for candidates (and, when connect is set, reports
	// that the connection went to it).
	type step struct {
		set     []netip.AddrPort
		client  netip.Addr
		at      time.Duration
		max     int
		want    []netip.AddrPort
		connect netip.AddrPort
	}
	tests := []struct {
		name     string
		affinity time.Duration
		steps    []step
	}{{
		name: "no endpoints, no candidates",
		steps: []step{
			{client: client1, max: 3, want: nil},
		},
	}, {
		name: "round robin, each choice followed by the rest of the ring",
		steps: []step{
			{set: []netip.AddrPort{a, b, c}},
			{client: client1, max: 3, want: []netip.AddrPort{a, b, c}},
			{client: client1, max: 3, want: []netip.AddrPort{b, c, a}},
			{client: client2, max: 3, want: []netip.AddrPort{c, a, b}},
			{client: client1, max: 3, want: []netip.AddrPort{a, b, c}},
		},
	}, {
		name: "candidates bounded by max",
		steps: []step{
			{set: []netip.AddrPort{a, b, c}},
			{client: client1, max: 2, want: []netip.AddrPort{a, b}},
			{client: client1, max: 1, want: []netip.AddrPort{b}},
		},
	}, {
		name: "shrinking the set keeps the round robin in range",
		steps: []step{
			{set: []netip.AddrPort{a, b, c}},
			{client: client1, max: 3, want: []netip.AddrPort{a, b, c}},
			{client: client1, max: 3, want: []netip.AddrPort{b, c, a}},
			{set: []netip.AddrPort{a, b}},
			{client: client1, max: 3, want: []netip.AddrPort{a, b}},
		},
	}, {
		name:     "affinity keeps a client on its endpoint until the timeout",
		affinity: 10 * time.Second,
		steps: []step{
			{set: []netip.AddrPort{a, b}},
			{client: client1, max: 2, want: []netip.AddrPort{a, b}, connect: a},
			{client: client1, at: 5 * time.Second, max: 2, want: []netip.AddrPort{a, b}, connect: a},
			// The other client goes round robin, which moved on only once.
			{client: client2, at: 6 * time.Second, max: 2, want: []netip.AddrPort{b, a}, connect: b},
			// Each connection restarts the timeout: 5 s + 9 s is still affine.
			{client: client1, at: 14 * time.Second, max: 2, want: []netip.AddrPort{a, b}, connect: a},
			// client2's affinity has expired (last use at 6 s): round robin.
			{client: client2, at: 20 * time.Second, max: 2, want: []netip.AddrPort{a, b}},
			// 10 s after its last use client1's has expired too: round robin again.
			{client: client1, at: 24 * time.Second, max: 2, want: []netip.AddrPort{b, a}},
		},
	}, {
		name:     "affinity follows the endpoint that accepted, not the first candidate",
		affinity: time.Minute,
		steps: []step{
			{set: []netip.AddrPort{a, b, c}},
			{client: client1, max: 3, want: []netip.AddrPort{a, b, c}, connect: b},
			{client: client1, max: 3, want: []netip.AddrPort{b, c, a}},
		},
	}, {
		name:     "affinity to a removed endpoint is dropped",
		affinity: time.Minute,
		steps: []step{
			{set: []netip.AddrPort{a, b}},
			{client: client1, max: 2, want: []netip.AddrPort{a, b}, connect: a},
			{set: []netip.AddrPort{b, c}},
			{client: client1, max: 2, want: []netip.AddrPort{c, b}},
		},
	}, {
		name: "no affinity without a timeout",
		steps: []step{
			{set: []netip.AddrPort{a, b}},
			{client: client1, max: 1, want: []netip.AddrPort{a}, connect: a},
			{client: client1, max: 1, want: []netip.AddrPort{b}, connect: b},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bal balancer
			bal.setAffinityTimeout(tt.affinity)
			for i, s := range tt.steps {
				if s.set != nil {
					bal.setEndpoints(s.set)
					continue
				}
				now := t0.Add(s.at)
				got := bal.candidates(s.client, now, s.max)
				if !slices.Equal(got, s.want) {
					t.Fatalf("step %d: candidates = %v, want %v", i, got, s.want)
				}
				if s.connect.IsValid() {
					bal.connected(s.client, s.connect, now)
				}
			}
		})
	}
}

func TestBalancerSweepsExpiredAffinity(t *testing.T) {
	var bal balancer
	bal.setAffinityTimeout(time.Second)
	ep := netip.MustParseAddrPort("10.0.0.1:80")
	bal.setEndpoints([]netip.AddrPort{ep})
	t0 := time.Unix(1000, 0)
	for i := range 100 {
		bal.connected(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), ep, t0)
	}
	bal.candidates(netip.MustParseAddr("10.2.0.1"), t0.Add(2*time.Second), 1)
	if len(bal.affinity) != 0 {
		t.Fatalf("%d expired affinity entries kept", len(bal.affinity))
	}
}

func TestBalancerSetEndpointsReportsChange(t *testing.T) {
	var bal balancer
	a := netip.MustParseAddrPort("10.0.0.1:80")
	if !bal.setEndpoints([]netip.AddrPort{a}) {
		t.Error("first set: no change reported")
	}
	if bal.setEndpoints([]netip.AddrPort{a}) {
		t.Error("same set: change reported")
	}
	if !bal.setEndpoints(nil) {
		t.Error("emptied: no change reported")
	}
}
