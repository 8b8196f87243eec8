package userspace

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proxy"
)

func TestNodePortAndExternalIP(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a := startTCPBackend(t, "a")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	svc.NodePort = freePort(t)
	svc.ExternalIPs = []netip.Addr{serviceIP(t)}
	apply(t, p, oneService(svc, ready(a.addr)))

	for _, addr := range []netip.AddrPort{
		netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)),
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(svc.NodePort)),
		netip.AddrPortFrom(svc.ExternalIPs[0], uint16(svc.Port)),
	} {
		if got := whoAnswers(t, addr, netip.Addr{}); got != "a" {
			t.Errorf("%s answered by %s, want a", addr, got)
		}
	}
}

func TestNodePortOnGivenAddressesOnly(t *testing.T) {
	nodeIP := serviceIP(t) // any loopback address stands in for the node's address
	p, _ := newTestProxier(t, Options{NodeAddresses: []netip.Addr{nodeIP}})
	a := startTCPBackend(t, "a")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	svc.NodePort = freePort(t)
	apply(t, p, oneService(svc, ready(a.addr)))

	if got := whoAnswers(t, netip.AddrPortFrom(nodeIP, uint16(svc.NodePort)), netip.Addr{}); got != "a" {
		t.Errorf("NodePort on the node address answered by %s, want a", got)
	}
	assertRefused(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(svc.NodePort)))
}

func TestExternalTrafficPolicyLocal(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	remote := startTCPBackend(t, "remote")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	svc.NodePort = freePort(t)
	svc.ExternalLocal = true
	eps := ready(remote.addr)
	eps[0].NodeName = "other-node"
	apply(t, p, oneService(svc, eps))

	// ClusterIP traffic may go to any node's endpoint; NodePort traffic only to this node's,
	// and there are none, so it is refused at once.
	if got := whoAnswers(t, netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)), netip.Addr{}); got != "remote" {
		t.Errorf("ClusterIP answered by %s, want remote", got)
	}
	assertReset(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(svc.NodePort)))

	// A local endpoint appears: NodePort traffic goes to it alone.
	local := startTCPBackend(t, "local")
	eps = append(eps, ready(local.addr)...)
	eps[1].IsLocal = true
	apply(t, p, oneService(svc, eps))
	for range 3 {
		if got := whoAnswers(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(svc.NodePort)), netip.Addr{}); got != "local" {
			t.Fatalf("NodePort answered by %s, want local", got)
		}
	}
}

func TestServiceRemovedClosesListeners(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(map[bool]string{false: "changed", true: "full sync"}[full], func(t *testing.T) {
			p, _ := newTestProxier(t, Options{})
			a := startTCPBackend(t, "a")
			u := startUDPBackend(t, "u")
			ip := serviceIP(t)
			tcp := servicePortSpec(portName("web", corev1.ProtocolTCP), ip, servicePortNumber)
			tcp.NodePort = freePort(t)
			udp := servicePortSpec(portName("web", corev1.ProtocolUDP), ip, servicePortNumber)
			apply(t, p, proxy.State{
				Services:  map[proxy.ServicePortName]*proxy.ServicePort{tcp.Name: tcp, udp.Name: udp},
				Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{tcp.Name: ready(a.addr), udp.Name: ready(u.addr)},
			})
			vip := netip.AddrPortFrom(ip, servicePortNumber)
			held := dialTCP(t, vip, netip.Addr{})
			if got, err := ask(held); err != nil || got != "a" {
				t.Fatalf("answer %q (%v), want a", got, err)
			}

			removed := proxy.State{}
			if !full {
				removed.Changed = map[proxy.ServicePortName]bool{tcp.Name: true, udp.Name: true}
			}
			apply(t, p, removed)

			assertRefused(t, vip)
			assertRefused(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(tcp.NodePort)))
			// The UDP socket is gone too: we can bind its address ourselves.
			conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(vip))
			if err != nil {
				t.Fatalf("UDP service address still taken: %v", err)
			}
			_ = conn.Close()
			// Like a NAT entry, the connection made before the removal keeps working.
			if got, err := ask(held); err != nil || got != "a" {
				t.Fatalf("held connection: answer %q (%v), want a", got, err)
			}
			if n := counter(p.metrics.listeners); n != 0 {
				t.Errorf("listeners gauge = %v, want 0", n)
			}
		})
	}
}

func TestChangedPortRebinds(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a := startTCPBackend(t, "a")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(a.addr)))

	moved := *svc
	moved.Port = servicePortNumber + 1
	moved.ClusterIP = serviceIP(t)
	s := oneService(&moved, ready(a.addr))
	s.Changed = map[proxy.ServicePortName]bool{name: true}
	apply(t, p, s)

	assertRefused(t, netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port)))
	if got := whoAnswers(t, netip.AddrPortFrom(moved.ClusterIP, uint16(moved.Port)), netip.Addr{}); got != "a" {
		t.Errorf("new address answered by %s, want a", got)
	}
}

func TestUnsupportedProtocolIsSkipped(t *testing.T) {
	p, logs := newTestProxier(t, Options{})
	a := startTCPBackend(t, "a")
	ip := serviceIP(t)
	sctp := servicePortSpec(portName("mixed", corev1.ProtocolSCTP), ip, servicePortNumber)
	tcp := servicePortSpec(portName("mixed", corev1.ProtocolTCP), ip, servicePortNumber)
	state := proxy.State{
		Services:  map[proxy.ServicePortName]*proxy.ServicePort{sctp.Name: sctp, tcp.Name: tcp},
		Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{sctp.Name: ready(a.addr), tcp.Name: ready(a.addr)},
	}
	apply(t, p, state)
	apply(t, p, state) // a second full sync logs and counts nothing new

	if got := whoAnswers(t, netip.AddrPortFrom(ip, servicePortNumber), netip.Addr{}); got != "a" {
		t.Errorf("TCP port answered by %s, want a", got)
	}
	if n := counter(p.metrics.skipped.WithLabelValues(skipUnsupportedProtocol)); n != 1 {
		t.Errorf("skipped service ports = %v, want 1", n)
	}
	if n := logs.count("protocol not supported"); n != 1 {
		t.Errorf("%d log lines about the unsupported protocol, want 1", n)
	}
	if n := counter(p.metrics.listeners); n != 1 {
		t.Errorf("listeners = %v, want 1", n)
	}
}

func TestPortInUseDoesNotStopOthers(t *testing.T) {
	p, logs := newTestProxier(t, Options{})
	a := startTCPBackend(t, "a")
	taken := servicePortSpec(portName("taken", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	fine := servicePortSpec(portName("fine", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	squatter, err := net.Listen("tcp", netip.AddrPortFrom(taken.ClusterIP, uint16(taken.Port)).String())
	if err != nil {
		t.Fatal(err)
	}
	state := proxy.State{
		Services:  map[proxy.ServicePortName]*proxy.ServicePort{taken.Name: taken, fine.Name: fine},
		Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{taken.Name: ready(a.addr), fine.Name: ready(a.addr)},
	}
	apply(t, p, state)
	apply(t, p, state) // the retry fails again, quietly

	if got := whoAnswers(t, netip.AddrPortFrom(fine.ClusterIP, uint16(fine.Port)), netip.Addr{}); got != "a" {
		t.Errorf("other service answered by %s, want a", got)
	}
	if n := counter(p.metrics.listenFailure); n != 2 {
		t.Errorf("listen failures = %v, want 2 (one per sync)", n)
	}
	if n := logs.count("cannot listen"); n != 1 {
		t.Errorf("%d log lines about the taken port, want 1", n)
	}

	// A sync that concerns only the other service does not retry; the next full sync does.
	_ = squatter.Close()
	onlyFine := state
	onlyFine.Changed = map[proxy.ServicePortName]bool{fine.Name: true}
	apply(t, p, onlyFine)
	assertRefused(t, netip.AddrPortFrom(taken.ClusterIP, uint16(taken.Port)))
	apply(t, p, state)
	if got := whoAnswers(t, netip.AddrPortFrom(taken.ClusterIP, uint16(taken.Port)), netip.Addr{}); got != "a" {
		t.Errorf("service whose port was freed answered by %s, want a", got)
	}
	if n := logs.count("listening now"); n != 1 {
		t.Errorf("%d log lines about the recovered listener, want 1", n)
	}
}

func TestTwoServicesClaimingOneAddress(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a, b := startTCPBackend(t, "a"), startTCPBackend(t, "b")
	shared := serviceIP(t)
	first := servicePortSpec(portName("first", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	second := servicePortSpec(portName("second", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	first.ExternalIPs = []netip.Addr{shared}
	second.ExternalIPs = []netip.Addr{shared}
	state := proxy.State{
		Services:  map[proxy.ServicePortName]*proxy.ServicePort{first.Name: first, second.Name: second},
		Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{first.Name: ready(a.addr), second.Name: ready(b.addr)},
	}
	apply(t, p, state)
	// The first in name order keeps the address; both ClusterIPs work.
	for addr, want := range map[netip.AddrPort]string{
		netip.AddrPortFrom(shared, servicePortNumber):           "a",
		netip.AddrPortFrom(first.ClusterIP, servicePortNumber):  "a",
		netip.AddrPortFrom(second.ClusterIP, servicePortNumber): "b",
	} {
		if got := whoAnswers(t, addr, netip.Addr{}); got != want {
			t.Errorf("%s answered by %s, want %s", addr, got, want)
		}
	}

	// When the first lets go of it, a sync of the second takes it over.
	first.ExternalIPs = nil
	state.Changed = map[proxy.ServicePortName]bool{first.Name: true, second.Name: true}
	apply(t, p, state)
	if got := whoAnswers(t, netip.AddrPortFrom(shared, servicePortNumber), netip.Addr{}); got != "b" {
		t.Errorf("shared address answered by %s after the first let go, want b", got)
	}
}

func TestCloseEndsConnectionsAndGoroutines(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a := startTCPBackend(t, "a")
	u := startUDPBackend(t, "u")
	ip := serviceIP(t)
	tcp := servicePortSpec(portName("web", corev1.ProtocolTCP), ip, servicePortNumber)
	udp := servicePortSpec(portName("web", corev1.ProtocolUDP), ip, servicePortNumber)
	apply(t, p, proxy.State{
		Services:  map[proxy.ServicePortName]*proxy.ServicePort{tcp.Name: tcp, udp.Name: udp},
		Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{tcp.Name: ready(a.addr), udp.Name: ready(u.addr)},
	})
	vip := netip.AddrPortFrom(ip, servicePortNumber)
	held := dialTCP(t, vip, netip.Addr{})
	if _, err := ask(held); err != nil {
		t.Fatal(err)
	}
	if _, err := askUDP(dialUDP(t, vip)); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(ioTimeout):
		t.Fatal("Run did not return after its context ended")
	}
	noProxierGoroutines(t)

	if _, err := ask(held); err == nil {
		t.Error("connection through the proxy still works after Close")
	}
	assertRefused(t, vip)
	if err := p.Apply(context.Background(), proxy.State{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
}

// assertRefused checks that nothing listens on addr.
func assertRefused(t *testing.T, addr netip.AddrPort) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), time.Second)
	if err == nil {
		_ = c.Close()
		t.Fatalf("%s still accepts connections", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
}

func TestChangedSyncLeavesOtherServicesAlone(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a, b := startTCPBackend(t, "a"), startTCPBackend(t, "b")
	one := servicePortSpec(portName("one", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	two := servicePortSpec(portName("two", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	apply(t, p, proxy.State{
		Services:  map[proxy.ServicePortName]*proxy.ServicePort{one.Name: one, two.Name: two},
		Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{one.Name: ready(a.addr), two.Name: ready(a.addr)},
	})

	// Only two changed (its endpoint moved to b). Leaving one out of the State shows that a
	// partial sync does no work for it: it is neither removed nor touched.
	s := oneService(two, ready(b.addr))
	s.Changed = map[proxy.ServicePortName]bool{two.Name: true}
	apply(t, p, s)
	if got := whoAnswers(t, netip.AddrPortFrom(one.ClusterIP, servicePortNumber), netip.Addr{}); got != "a" {
		t.Errorf("unchanged service answered by %s, want a", got)
	}
	if got := whoAnswers(t, netip.AddrPortFrom(two.ClusterIP, servicePortNumber), netip.Addr{}); got != "b" {
		t.Errorf("changed service answered by %s, want b", got)
	}
}

func TestProblemsReportedOncePerServicePort(t *testing.T) {
	p, logs := newTestProxier(t, Options{})
	a := startTCPBackend(t, "a")
	sctp := servicePortSpec(portName("sctp", corev1.ProtocolSCTP), serviceIP(t), servicePortNumber)
	// Both addresses of this one are taken: its two failures must come as one report.
	taken := servicePortSpec(portName("taken", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	taken.ExternalIPs = []netip.Addr{serviceIP(t)}
	for _, ip := range []netip.Addr{taken.ClusterIP, taken.ExternalIPs[0]} {
		squatter, err := net.Listen("tcp", netip.AddrPortFrom(ip, servicePortNumber).String())
		if err != nil {
			t.Fatal(err)
		}
		defer squatter.Close()
	}
	fine := servicePortSpec(portName("fine", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)

	type report struct {
		name   proxy.ServicePortName
		reason string
		err    error
	}
	var reports []report
	state := proxy.State{
		Services: map[proxy.ServicePortName]*proxy.ServicePort{sctp.Name: sctp, taken.Name: taken, fine.Name: fine},
		Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{
			sctp.Name: ready(a.addr), taken.Name: ready(a.addr), fine.Name: ready(a.addr),
		},
		Problems: func(name proxy.ServicePortName, reason string, err error) {
			reports = append(reports, report{name, reason, err})
		},
	}
	apply(t, p, state)

	if len(reports) != 2 {
		t.Fatalf("reports = %v, want one for sctp and one for taken", reports)
	}
	// Reports come in name order: sctp, then taken.
	if r := reports[0]; r.name != sctp.Name || r.reason != "unsupported-protocol" {
		t.Errorf("first report = %v, want sctp's unsupported-protocol", r)
	}
	if r := reports[1]; r.name != taken.Name || r.reason != "port-in-use" || !errors.Is(r.err, syscall.EADDRINUSE) {
		t.Errorf("second report = %v, want taken's port-in-use", r)
	}
	// The proxy logs what it is given; the proxier's own lines are debug only, not warnings.
	if n := logs.count("level=WARN"); n != 0 {
		t.Errorf("%d warnings logged by the proxier itself, want 0:\n%s", n, logs.String())
	}
	if got := whoAnswers(t, netip.AddrPortFrom(fine.ClusterIP, servicePortNumber), netip.Addr{}); got != "a" {
		t.Errorf("fine service answered by %s, want a", got)
	}

	// The proxy deduplicates, so problems that persist are reported again at each sync that
	// covers their service port, and only then.
	reports = nil
	onlyFine := state
	onlyFine.Changed = map[proxy.ServicePortName]bool{fine.Name: true}
	apply(t, p, onlyFine)
	if len(reports) != 0 {
		t.Errorf("a sync of the fine service reported %v", reports)
	}
	apply(t, p, state)
	if len(reports) != 2 {
		t.Errorf("a full sync reported %v, want the same two again", reports)
	}
}
