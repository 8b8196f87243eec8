package userspace

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proxy"
)

func TestTCPRoundRobin(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a, b, c := startTCPBackend(t, "a"), startTCPBackend(t, "b"), startTCPBackend(t, "c")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(a.addr, b.addr, c.addr)))

	vip := netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port))
	var got []string
	for range 6 {
		got = append(got, whoAnswers(t, vip, netip.Addr{}))
	}
	mustEqualCounts(t, countNames(got), map[string]int{"a": 2, "b": 2, "c": 2})
	if n := counter(p.metrics.connections.WithLabelValues(protoTCP, resultForwarded)); n != 6 {
		t.Errorf("forwarded connections = %v, want 6", n)
	}
}

func TestTCPNotReadyEndpointGetsNoNewConnections(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a, b := startTCPBackend(t, "a"), startTCPBackend(t, "b")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(a.addr, b.addr)))
	vip := netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port))

	// The first connection goes to a (round robin starts at the first endpoint) and stays open.
	held := dialTCP(t, vip, netip.Addr{})
	if got, err := ask(held); err != nil || got != "a" {
		t.Fatalf("first connection answered by %q (%v), want a", got, err)
	}

	// a turns not ready; only this service port changed.
	eps := ready(a.addr, b.addr)
	eps[0].Ready = false
	s := oneService(svc, eps)
	s.Changed = map[proxy.ServicePortName]bool{name: true}
	apply(t, p, s)

	var got []string
	for range 4 {
		got = append(got, whoAnswers(t, vip, netip.Addr{}))
	}
	mustEqualCounts(t, countNames(got), map[string]int{"b": 4})
	// The connection made before the change still reaches a.
	if got, err := ask(held); err != nil || got != "a" {
		t.Fatalf("held connection answered by %q (%v) after the change, want a", got, err)
	}
}

func TestTCPDeadEndpointIsSkipped(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a, b := startTCPBackend(t, "a"), startTCPBackend(t, "b")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(a.addr, b.addr)))
	vip := netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port))

	// a dies while still listed as ready: every connection must still succeed, through b.
	a.stop()
	var got []string
	for range 4 {
		got = append(got, whoAnswers(t, vip, netip.Addr{}))
	}
	mustEqualCounts(t, countNames(got), map[string]int{"b": 4})
	if n := counter(p.metrics.dialFailures); n == 0 {
		t.Error("no dial failure counted")
	}
}

func TestTCPAllEndpointsDeadResets(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a := startTCPBackend(t, "a")
	a.stop()
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(a.addr)))

	assertReset(t, netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)))
	if n := counter(p.metrics.connections.WithLabelValues(protoTCP, resultDialFailed)); n != 1 {
		t.Errorf("dial_failed connections = %v, want 1", n)
	}
}

func TestTCPAffinity(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a, b := startTCPBackend(t, "a"), startTCPBackend(t, "b")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	svc.AffinityTimeout = 500 * time.Millisecond
	apply(t, p, oneService(svc, ready(a.addr, b.addr)))
	vip := netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port))
	client1 := netip.MustParseAddr("127.0.30.1")
	client2 := netip.MustParseAddr("127.0.30.2")

	first := whoAnswers(t, vip, client1)
	for range 4 {
		if got := whoAnswers(t, vip, client1); got != first {
			t.Fatalf("client1 went to %s, then to %s, with affinity", first, got)
		}
	}
	// Another client is balanced independently: round robin moved on once, to the other one.
	other := whoAnswers(t, vip, client2)
	if other == first {
		t.Fatalf("client2 also went to %s; round robin should have given it the other backend", first)
	}

	// After the timeout without connections, client1's affinity is gone and round robin
	// (whose next choice is `first` again, after client2's) decides.
	time.Sleep(svc.AffinityTimeout + 100*time.Millisecond)
	whoAnswers(t, vip, client2) // advances round robin past `first`
	if got := whoAnswers(t, vip, client1); got != other {
		t.Fatalf("after the affinity timeout client1 went to %s, want the round-robin choice %s", got, other)
	}
}

func TestTCPNoEndpointsResetsAtOnce(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	none := servicePortSpec(portName("none", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	notReady := servicePortSpec(portName("not-ready", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	backend := startTCPBackend(t, "a")
	eps := ready(backend.addr)
	eps[0].Ready, eps[0].Serving = false, false
	apply(t, p, proxy.State{
		Services:  map[proxy.ServicePortName]*proxy.ServicePort{none.Name: none, notReady.Name: notReady},
		Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{notReady.Name: eps},
	})
	for _, svc := range []*proxy.ServicePort{none, notReady} {
		t.Run(svc.Name.Name, func(t *testing.T) {
			assertReset(t, netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)))
		})
	}
	if n := counter(p.metrics.connections.WithLabelValues(protoTCP, resultNoEndpoints)); n != 2 {
		t.Errorf("no_endpoints connections = %v, want 2", n)
	}
}

// assertReset checks that a connection to addr is refused or reset well before any timeout.
func assertReset(t *testing.T, addr netip.AddrPort) {
	t.Helper()
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr.String(), time.Second)
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	elapsed := time.Since(start)
	var ne net.Error
	switch {
	case err == nil:
		t.Fatalf("connection to %s was served", addr)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("connection to %s hung until the deadline: %v", addr, err)
	case !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNREFUSED):
		t.Fatalf("connection to %s: %v, want a reset or a refusal", addr, err)
	}
	t.Logf("connection to %s failed after %v: %v", addr, elapsed, err)
}

func TestTCPBulkTransferIntegrity(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	echo := startEchoBackend(t)
	name := portName("echo", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(echo)))

	const size = 64 << 20
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)

	c := dialTCP(t, netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)), netip.Addr{})
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, bytes.NewReader(data))
		if err == nil {
			// The echo backend ends its answer when it sees our end; the proxy must pass the
			// half-close on in both directions for the read below to finish.
			err = c.CloseWrite()
		}
		sent <- err
	}()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil {
		t.Fatalf("read after %d bytes: %v", n, err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("write: %v", err)
	}
	if n != size {
		t.Fatalf("got %d bytes back, want %d", n, size)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatal("data came back changed")
	}
}
