package nftables

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proxy"
)

// TestEndToEnd sends real traffic from a client host through a node programmed by the
// proxier to backend hosts, each a network namespace.
func TestEndToEnd(t *testing.T) {
	l := newLab(t, 3)
	reg := prometheus.NewRegistry()
	p, err := New(Options{NetNS: l.nodeNS, Registerer: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Cleanup(context.Background()); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
	})
	backendEP := func(i, port int) proxy.Endpoint {
		return ready(netip.AddrPortFrom(l.backends[i].ip, uint16(port)).String())
	}
	all := func(port int) []proxy.Endpoint {
		return []proxy.Endpoint{backendEP(0, port), backendEP(1, port), backendEP(2, port)}
	}
	w := newWorld()
	web := spn("e2e", "web", "http", corev1.ProtocolTCP)
	webIP := netip.MustParseAddrPort("10.96.0.10:80")
	w.set(svcPort(web, "10.96.0.10", 80, nodePort(30080)), all(whoPort)...)
	dns := spn("e2e", "dns", "", corev1.ProtocolUDP)
	dnsIP := netip.MustParseAddrPort("10.96.0.53:53")
	w.set(svcPort(dns, "10.96.0.53", 53), all(udpPort)...)
	plain := spn("e2e", "plain", "", corev1.ProtocolTCP)
	plainIP := netip.MustParseAddrPort("10.96.0.13:80")
	w.set(svcPort(plain, "10.96.0.13", 80), all(whoPort)...)
	sticky := spn("e2e", "sticky", "", corev1.ProtocolTCP)
	w.set(svcPort(sticky, "10.96.0.11", 80, affinity(time.Hour)), all(whoPort)...)
	empty := spn("e2e", "empty", "", corev1.ProtocolTCP)
	w.set(svcPort(empty, "10.96.0.20", 80, nodePort(30020)))
	emptyUDP := spn("e2e", "empty", "dns", corev1.ProtocolUDP)
	w.set(svcPort(emptyUDP, "10.96.0.20", 53))
	// No SCTP client here: its rules must be accepted by the kernel (or SCTP left out).
	w.set(svcPort(spn("e2e", "sctp", "", corev1.ProtocolSCTP), "10.96.0.12", 9), all(9)...)
	if err := p.Apply(context.Background(), w.state(true)); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "exec", nsName("node"), "nft", "list", "chain", "ip", TableName, "pick-sctp-3").CombinedOutput()
	if p.planner.noSCTP {
		t.Log("this kernel cannot NAT SCTP; SCTP service ports are left out")
	} else if err != nil {
		t.Errorf("SCTP service: %v: %s", err, out)
	}

	// spread opens n connections to addr and counts them per backend; the connections stay
	// open until the test ends.
	spread := func(t *testing.T, addr netip.AddrPort, n int) (map[string]int, map[string][]net.Conn) {
		t.Helper()
		counts, conns := map[string]int{}, map[string][]net.Conn{}
		for range n {
			c, b, _, err := l.who(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			counts[b]++
			conns[b] = append(conns[b], c)
		}
		return counts, conns
	}

	t.Run("ClusterIP spreads connections over all backends, keeping the client address", func(t *testing.T) {
		counts, _ := spread(t, webIP, 60)
		if len(counts) != 3 {
			t.Errorf("connections per backend: %v, want all three", counts)
		}
		_, _, seen, err := l.who(webIP)
		if err != nil {
			t.Fatal(err)
		}
		if seen != l.clientIP.String() {
			t.Errorf("backend saw %s, want the client's %s (no masquerade for ClusterIP)", seen, l.clientIP)
		}
	})

	t.Run("NodePort from another host reaches the backends, masqueraded", func(t *testing.T) {
		for range 10 {
			c, b, seen, err := l.who(netip.AddrPortFrom(l.nodeIP, 30080))
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			var want string
			for _, be := range l.backends {
				if be.name == b {
					// The node's own address on that backend's link.
					want = strings.TrimSuffix(be.ip.String(), ".2") + ".1"
				}
			}
			if seen != want {
				t.Errorf("backend %s saw %s, want the node's %s", b, seen, want)
			}
		}
	})

	t.Run("ClientIP affinity sends one client to one backend", func(t *testing.T) {
		counts, _ := spread(t, netip.MustParseAddrPort("10.96.0.11:80"), 20)
		if len(counts) != 1 {
			t.Errorf("connections per backend: %v, want one backend", counts)
		}
	})

	t.Run("no endpoints: refused at once", func(t *testing.T) {
		for _, addr := range []netip.AddrPort{
			netip.MustParseAddrPort("10.96.0.20:80"), // ClusterIP without endpoints
			netip.AddrPortFrom(l.nodeIP, 30020),      // its NodePort
			netip.MustParseAddrPort("10.96.0.10:81"), // a port the ClusterIP does not have
			netip.MustParseAddrPort("10.96.0.53:53"), // TCP to a UDP-only service
		} {
			start := time.Now()
			c, err := l.dial(addr)
			if err == nil {
				c.Close()
				t.Errorf("%s: connected", addr)
				continue
			}
			if !isRefused(err) || time.Since(start) > time.Second {
				t.Errorf("%s: %v after %v, want connection refused at once", addr, err, time.Since(start))
			}
		}
		c, err := l.udpConn(netip.MustParseAddrPort("10.96.0.20:53"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := ask(c); !isRefused(err) {
			t.Errorf("UDP to a service without endpoints: %v, want refused (ICMP port unreachable)", err)
		}
	})

	t.Run("UDP through the ClusterIP", func(t *testing.T) {
		seen := map[string]bool{}
		for range 30 {
			c, err := l.udpConn(dnsIP)
			if err != nil {
				t.Fatal(err)
			}
			b, err := ask(c)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			seen[b] = true
		}
		if len(seen) != 3 {
			t.Errorf("UDP answered by %v, want all three backends", seen)
		}
	})

	t.Run("endpoint removed mid-traffic: open connections live on, new ones avoid it", func(t *testing.T) {
		_, conns := spread(t, webIP, 30)
		if len(conns["b1"]) == 0 {
			t.Fatal("no connection to b1 to begin with")
		}
		w.set(svcPort(web, "10.96.0.10", 80, nodePort(30080)), backendEP(1, whoPort), backendEP(2, whoPort))
		if err := p.Apply(context.Background(), w.state(false)); err != nil {
			t.Fatal(err)
		}
		for _, c := range conns["b1"] {
			if err := echo(c); err != nil {
				t.Errorf("open connection to the removed endpoint broke: %v", err)
			}
		}
		counts, _ := spread(t, webIP, 30)
		if counts["b1"] > 0 || len(counts) != 2 {
			t.Errorf("new connections per backend: %v, want b2 and b3 only", counts)
		}
	})

	t.Run("endpoint turns not ready: an override rule at once, the maps after", func(t *testing.T) {
		notReady := backendEP(0, whoPort)
		notReady.Ready, notReady.Serving = false, false
		w.set(svcPort(plain, "10.96.0.13", 80), notReady, backendEP(1, whoPort), backendEP(2, whoPort))
		if err := p.Apply(context.Background(), w.state(false)); err != nil {
			t.Fatal(err)
		}
		// Hold the catch-up back (it runs 100 ms after the change) to look at the override
		// alone; when its timer has fired already, that part cannot be seen.
		p.mu.Lock()
		overrides, held := p.overrides, p.catchUp != nil && p.catchUp.Stop()
		p.mu.Unlock()
		if overrides != 1 {
			t.Fatalf("overrides %d: the change did not take the add-only path", overrides)
		}
		if !held {
			t.Log("the catch-up ran before it could be held: the override alone is not checked")
		} else if counts, _ := spread(t, plainIP, 30); counts["b1"] > 0 || len(counts) != 2 {
			t.Errorf("before the catch-up, new connections per backend: %v, want b2 and b3 only", counts)
		}
		p.catchUpMaps()
		if counts, _ := spread(t, plainIP, 30); counts["b1"] > 0 || len(counts) != 2 {
			t.Errorf("after the catch-up, new connections per backend: %v, want b2 and b3 only", counts)
		}
		w.set(svcPort(plain, "10.96.0.13", 80), all(whoPort)...)
		if err := p.Apply(context.Background(), w.state(false)); err != nil {
			t.Fatal(err)
		}
		if counts, _ := spread(t, plainIP, 30); len(counts) != 3 {
			t.Errorf("ready again, new connections per backend: %v, want all three", counts)
		}
	})

	t.Run("UDP conntrack entries to a removed endpoint are flushed", func(t *testing.T) {
		w.set(svcPort(dns, "10.96.0.53", 53), backendEP(0, udpPort))
		if err := p.Apply(context.Background(), w.state(false)); err != nil {
			t.Fatal(err)
		}
		c, err := l.udpConn(dnsIP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if b, err := ask(c); err != nil || b != "b1" {
			t.Fatalf("before the change: %q, %v; want b1", b, err)
		}
		before := testutil.ToFloat64(p.m.conntrackDeleted)
		// b1 still answers: without the flush, this client's flow would stick to it.
		w.set(svcPort(dns, "10.96.0.53", 53), backendEP(1, udpPort))
		if err := p.Apply(context.Background(), w.state(false)); err != nil {
			t.Fatal(err)
		}
		if b, err := ask(c); err != nil || b != "b2" {
			t.Errorf("same socket after the change: %q, %v; want b2", b, err)
		}
		if d := testutil.ToFloat64(p.m.conntrackDeleted) - before; d < 1 {
			t.Errorf("conntrack entries deleted: %v, want at least 1", d)
		}
	})

	t.Run("a new proxier takes over the table", func(t *testing.T) {
		p2, err := New(Options{NetNS: l.nodeNS, Registerer: reg, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		w.remove(sticky)
		if err := p2.Apply(context.Background(), w.state(true)); err != nil {
			t.Fatal(err)
		}
		counts, _ := spread(t, webIP, 20)
		if counts["b1"] > 0 || len(counts) != 2 {
			t.Errorf("connections per backend: %v, want b2 and b3", counts)
		}
		out, err := exec.Command("ip", "netns", "exec", nsName("node"), "nft", "list", "table", "ip", TableName).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list: %v: %s", err, out)
		}
		if strings.Contains(string(out), "sticky") {
			t.Errorf("removed service's objects remain:\n%s", out)
		}
	})
}

// echo checks that a who connection still echoes.
func echo(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return fmt.Errorf("echo %q", buf)
	}
	return nil
}

// New fails clearly where nft cannot be run, so that the caller can fall back.
func TestNewUnavailable(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	reg := prometheus.NewRegistry()
	_, err := New(Options{Registerer: reg})
	if err == nil || !strings.Contains(err.Error(), "nft") {
		t.Fatalf("New without nft: %v", err)
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("error %v does not wrap ErrUnavailable", err)
	}
	// The caller falls back to userspace with the same registry: nothing registered.
	if mfs, _ := reg.Gather(); len(mfs) > 0 {
		t.Errorf("a failed New registered %d metrics", len(mfs))
	}
}
