package servicelb

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestParsePool(t *testing.T) {
	for _, tc := range []struct {
		in          string
		first, last string
		size        int
		err         string // part of the error; "" when valid
	}{
		{in: "127.0.100.0/24", first: "127.0.100.1", last: "127.0.100.254", size: 254},
		{in: " 192.0.2.0/30 ", first: "192.0.2.1", last: "192.0.2.2", size: 2},
		{in: "192.0.2.0/31", first: "192.0.2.0", last: "192.0.2.1", size: 2},
		{in: "192.0.2.7/32", first: "192.0.2.7", last: "192.0.2.7", size: 1},
		{in: "192.0.2.10-192.0.2.20", first: "192.0.2.10", last: "192.0.2.20", size: 11},
		{in: "192.0.2.10 - 192.0.2.10", first: "192.0.2.10", last: "192.0.2.10", size: 1},
		{in: "10.0.255.250-10.1.0.3", first: "10.0.255.250", last: "10.1.0.3", size: 10},
		{in: "", err: "not a CIDR"},
		{in: "192.0.2.1", err: "not a CIDR"},
		{in: "192.0.2.0/33", err: "not a CIDR"},
		{in: "banana-192.0.2.1", err: "not a CIDR"},
		{in: "192.0.2.5/24", err: "host bits set (did you mean 192.0.2.0/24?)"},
		{in: "2001:db8::/120", err: "not IPv4"},
		{in: "192.0.2.1-2001:db8::1", err: "not IPv4"},
		{in: "192.0.2.20-192.0.2.10", err: "ends before it starts"},
		{in: "0.0.0.0/0", err: "overlaps 0.0.0.0/8"},
		{in: "223.255.255.0-224.0.0.5", err: "overlaps 224.0.0.0/4"},
		{in: "255.255.255.255/32", err: "overlaps 255.255.255.255/32"},
	} {
		p, err := ParsePool(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if p.First().String() != tc.first || p.Last().String() != tc.last || p.Size() != tc.size {
			t.Errorf("%q: %s-%s (%d), want %s-%s (%d)", tc.in, p.First(), p.Last(), p.Size(), tc.first, tc.last, tc.size)
		}
		for _, a := range []struct {
			addr string
			in   bool
		}{{tc.first, true}, {tc.last, true}, {p.First().Prev().String(), false}, {p.Last().Next().String(), false}} {
			if got := p.Contains(netip.MustParseAddr(a.addr)); got != a.in {
				t.Errorf("%q contains %s: %v, want %v", tc.in, a.addr, got, a.in)
			}
		}
		if p.Contains(netip.MustParseAddr("::ffff:"+tc.first)) != true {
			t.Errorf("%q: the IPv4-mapped form of %s is not in it", tc.in, tc.first)
		}
	}
}

func mustPool(t *testing.T, s string) Pool {
	t.Helper()
	p, err := ParsePool(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAllocateAndRelease(t *testing.T) {
	a := NewAllocator(mustPool(t, "192.0.2.1-192.0.2.3"))
	want := func(key, addr string) {
		t.Helper()
		got, err := a.Allocate(key, types.UID(key))
		if err != nil || got.String() != addr {
			t.Fatalf("Allocate(%s) = %s, %v; want %s", key, got, err, addr)
		}
	}
	want("ns/a", "192.0.2.1")
	want("ns/b", "192.0.2.2")
	want("ns/a", "192.0.2.1") // again: the same
	if addr, ok := a.Release("ns/a"); !ok || addr.String() != "192.0.2.1" {
		t.Fatalf("Release(ns/a) = %s, %v", addr, ok)
	}
	if _, ok := a.Release("ns/a"); ok {
		t.Error("released twice")
	}
	want("ns/c", "192.0.2.1") // the lowest free one
	want("ns/d", "192.0.2.3")
	if a.Used() != 3 {
		t.Errorf("used %d, want 3", a.Used())
	}
	_, err := a.Allocate("ns/e", "e")
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "192.0.2.1-192.0.2.3") {
		t.Errorf("exhausted pool: %v, want ErrExhausted naming the pool", err)
	}
	if _, _, ok := a.Lookup("ns/e"); ok {
		t.Error("a failed allocation holds an address")
	}
	a.Release("ns/b")
	want("ns/e", "192.0.2.2")
	if key, ok := a.Holder(netip.MustParseAddr("192.0.2.2")); !ok || key != "ns/e" {
		t.Errorf("holder of 192.0.2.2: %s, %v", key, ok)
	}
	// A later Service of the same name keeps the address under its own UID.
	if _, err := a.Allocate("ns/e", "e2"); err != nil {
		t.Fatal(err)
	}
	if _, uid, _ := a.Lookup("ns/e"); uid != "e2" {
		t.Errorf("uid %s, want e2", uid)
	}
}

func TestAllocateAt(t *testing.T) {
	a := NewAllocator(mustPool(t, "192.0.2.0/29")) // .1 to .6
	ip := netip.MustParseAddr
	if err := a.AllocateAt("ns/a", "a", ip("192.0.2.5")); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Allocate("ns/b", "b"); got != ip("192.0.2.1") {
		t.Errorf("after a requested address, the next is %s, want the lowest", got)
	}
	err := a.AllocateAt("ns/c", "c", ip("192.0.2.5"))
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "ns/a") {
		t.Errorf("taken address: %v, want ErrInUse naming ns/a", err)
	}
	for _, out := range []string{"192.0.2.0", "192.0.2.7", "198.51.100.1"} {
		if err := a.AllocateAt("ns/c", "c", ip(out)); !errors.Is(err, ErrNotInPool) || !strings.Contains(err.Error(), "192.0.2.0/29") {
			t.Errorf("%s: %v, want ErrNotInPool naming the pool", out, err)
		}
	}
	if _, _, ok := a.Lookup("ns/c"); ok {
		t.Error("failed requests hold an address")
	}
	// Moving: the old address is free again, the holder keeps what it had on failure.
	if err := a.AllocateAt("ns/a", "a", ip("192.0.2.6")); err != nil {
		t.Fatal(err)
	}
	if _, held := a.Holder(ip("192.0.2.5")); held {
		t.Error("the address moved from is still held")
	}
	if err := a.AllocateAt("ns/a", "a", ip("192.0.2.1")); !errors.Is(err, ErrInUse) {
		t.Errorf("moving onto ns/b's address: %v", err)
	}
	if got, _, _ := a.Lookup("ns/a"); got != ip("192.0.2.6") {
		t.Errorf("after a failed move ns/a holds %s, want 192.0.2.6", got)
	}
	if err := a.AllocateAt("ns/a", "a", ip("::ffff:192.0.2.6")); err != nil {
		t.Errorf("the IPv4-mapped form of its own address: %v", err)
	}
	if a.Used() != 2 {
		t.Errorf("used %d, want 2", a.Used())
	}
}

func TestAllocateLargePool(t *testing.T) {
	a := NewAllocator(mustPool(t, "10.0.0.0/8"))
	for i := range 1000 {
		if _, err := a.Allocate("ns/s"+string(rune('a'+i%26))+strings.Repeat("x", i/26), "u"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := a.Allocate("ns/last", "u"); got != netip.MustParseAddr("10.0.3.233") {
		t.Errorf("1001st address %s, want 10.0.3.233", got)
	}
}

func lbService(ns, name string, created time.Time, change func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name),
			CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
	}
	if change != nil {
		change(s)
	}
	return s
}

func showing(ips ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}

func TestRestore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	class := "example.com/other"
	services := []*corev1.Service{
		// Listed newest first: the older of two showing one address keeps it.
		lbService("ns", "newer", t0.Add(time.Hour), showing("192.0.2.1")),
		lbService("ns", "older", t0, showing("192.0.2.1")),
		lbService("ns", "second", t0, showing("198.51.100.9", "192.0.2.2", "192.0.2.3")),
		lbService("ns", "outside", t0, showing("198.51.100.1")),
		lbService("ns", "pending", t0, nil),
		lbService("ns", "other-class", t0, func(s *corev1.Service) {
			s.Spec.LoadBalancerClass = &class
			showing("192.0.2.4")(s)
		}),
		lbService("ns", "cluster-ip", t0, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
			showing("192.0.2.5")(s)
		}),
		// Its type changed while the controller was down: it keeps its address until the
		// cleanup releases it.
		lbService("ns", "to-clean", t0, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
			s.Finalizers = []string{Finalizer}
			showing("192.0.2.6")(s)
		}),
		lbService("ns", "garbage", t0, showing("not-an-ip")),
	}
	a := NewAllocator(mustPool(t, "192.0.2.0/24"))
	lost := restore(a, services)
	if len(lost) != 1 || !strings.Contains(lost[0], "ns/newer") || !strings.Contains(lost[0], "ns/older") {
		t.Errorf("lost %v, want ns/newer's 192.0.2.1, held by ns/older", lost)
	}
	want := map[string]string{"ns/older": "192.0.2.1", "ns/second": "192.0.2.2", "ns/to-clean": "192.0.2.6"}
	for _, s := range services {
		key := s.Namespace + "/" + s.Name
		addr, uid, ok := a.Lookup(key)
		switch w, should := want[key]; {
		case should && (!ok || addr.String() != w || uid != s.UID):
			t.Errorf("%s holds %s (%v, uid %s), want %s", key, addr, ok, uid, w)
		case !should && ok:
			t.Errorf("%s holds %s, want nothing", key, addr)
		}
	}
	if a.Used() != len(want) {
		t.Errorf("used %d, want %d", a.Used(), len(want))
	}
	// What was restored is not handed out again.
	var got []string
	for i := range 3 {
		addr, err := a.Allocate("ns/new"+string(rune('a'+i)), "n")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, addr.String())
	}
	if !slices.Equal(got, []string{"192.0.2.3", "192.0.2.4", "192.0.2.5"}) {
		t.Errorf("new allocations %v", got)
	}
}

func TestRemainingAndShows(t *testing.T) {
	addr := netip.MustParseAddr("192.0.2.1")
	proxyMode := corev1.LoadBalancerIPModeProxy
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		held    bool
		want    []string
		changed bool
		shows   bool
	}{
		{"ours only", lbService("ns", "a", time.Time{}, showing("192.0.2.1")), true, nil, true, true},
		{"not held: left", lbService("ns", "a", time.Time{}, showing("192.0.2.1")), false, []string{"192.0.2.1"}, false, true},
		{"another's kept", lbService("ns", "a", time.Time{}, showing("198.51.100.1", "192.0.2.1")), true, []string{"198.51.100.1"}, true, false},
		{"type changed: all of it", lbService("ns", "a", time.Time{}, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			showing("198.51.100.1")(s)
		}), true, nil, true, false},
		{"nothing", lbService("ns", "a", time.Time{}, nil), true, nil, false, false},
		{"proxy mode is not ours", lbService("ns", "a", time.Time{}, func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: &proxyMode}}
		}), true, nil, true, false},
	} {
		got, changed := remaining(tc.svc, addr, tc.held)
		var ips []string
		for _, ing := range got {
			ips = append(ips, ing.IP)
		}
		if !slices.Equal(ips, tc.want) || changed != tc.changed {
			t.Errorf("%s: remaining %v (changed %v), want %v (%v)", tc.name, ips, changed, tc.want, tc.changed)
		}
		if s := shows(tc.svc, addr); s != tc.shows {
			t.Errorf("%s: shows %v, want %v", tc.name, s, tc.shows)
		}
	}
}
