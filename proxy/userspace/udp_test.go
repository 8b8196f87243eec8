package userspace

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proxy"
)

func TestUDPSessionsSpreadAndStick(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a, b := startUDPBackend(t, "a"), startUDPBackend(t, "b")
	name := portName("dns", corev1.ProtocolUDP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(a.addr, b.addr)))
	vip := netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port))

	var got []string
	for range 4 {
		// Each socket is a new client address: a new session, chosen round robin; every
		// datagram of one session goes to the same backend.
		c := dialUDP(t, vip)
		first, err := askUDP(c)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if again, err := askUDP(c); err != nil || again != first {
				t.Fatalf("one client went to %s, then %q (%v)", first, again, err)
			}
		}
		// The answer must come from the service address, or a connected client socket
		// would not accept it; askUDP reading it at all shows that.
		got = append(got, first)
	}
	mustEqualCounts(t, countNames(got), map[string]int{"a": 2, "b": 2})
	if n := counter(p.metrics.active.WithLabelValues(protoUDP)); n != 4 {
		t.Errorf("active UDP sessions = %v, want 4", n)
	}
}

func TestUDPSessionMovesOffNotReadyEndpoint(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a, b := startUDPBackend(t, "a"), startUDPBackend(t, "b")
	name := portName("dns", corev1.ProtocolUDP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(a.addr, b.addr)))
	c := dialUDP(t, netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)))
	if got, err := askUDP(c); err != nil || got != "a" {
		t.Fatalf("first answer from %q (%v), want a", got, err)
	}

	eps := ready(a.addr, b.addr)
	eps[0].Ready = false
	s := oneService(svc, eps)
	s.Changed = map[proxy.ServicePortName]bool{name: true}
	apply(t, p, s)
	// UDP has no connection to keep: the session's endpoint is gone from the set, so its
	// next datagram goes to a current one.
	if got, err := askUDP(c); err != nil || got != "b" {
		t.Fatalf("answer after a turned not ready from %q (%v), want b", got, err)
	}
}

func TestUDPSessionExpiresWhenIdle(t *testing.T) {
	p, _ := newTestProxier(t, Options{UDPIdleTimeout: 200 * time.Millisecond})
	a, b := startUDPBackend(t, "a"), startUDPBackend(t, "b")
	name := portName("dns", corev1.ProtocolUDP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(a.addr, b.addr)))
	c := dialUDP(t, netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)))
	if got, err := askUDP(c); err != nil || got != "a" {
		t.Fatalf("first answer from %q (%v), want a", got, err)
	}
	eventually(t, "idle session ends", func() error {
		if n := counter(p.metrics.active.WithLabelValues(protoUDP)); n != 0 {
			return errors.New("session still open")
		}
		return nil
	})
	// The same client address now starts a new session, and round robin has moved on.
	if got, err := askUDP(c); err != nil || got != "b" {
		t.Fatalf("answer after the session expired from %q (%v), want b", got, err)
	}
}

func TestUDPNoEndpointsDrops(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	name := portName("dns", corev1.ProtocolUDP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, nil))
	c := dialUDP(t, netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)))
	if _, err := c.Write([]byte("who")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "datagram counted as dropped", func() error {
		if n := counter(p.metrics.udpDropped.WithLabelValues(dropNoEndpoints)); n != 1 {
			return errors.New("not counted yet")
		}
		return nil
	})
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var ne net.Error
	if _, err := c.Read(make([]byte, 10)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read after a dropped datagram: %v, want a timeout", err)
	}
}

func TestUDPNodePort(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a := startUDPBackend(t, "a")
	name := portName("dns", corev1.ProtocolUDP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	svc.NodePort = freePort(t)
	apply(t, p, oneService(svc, ready(a.addr)))
	// The NodePort socket listens on every address; the answer must still come from the
	// address the client sent to, or its connected socket would discard it.
	c := dialUDP(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(svc.NodePort)))
	if got, err := askUDP(c); err != nil || got != "a" {
		t.Fatalf("NodePort answer from %q (%v), want a", got, err)
	}
}
