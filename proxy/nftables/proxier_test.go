package nftables

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/kplane/kplane/proxy"
)

var quiet = slog.New(slog.DiscardHandler)

// --- builders -------------------------------------------------------------------------

func spn(ns, name, port string, proto corev1.Protocol) proxy.ServicePortName {
	n := proxy.ServicePortName{Port: port, Protocol: proto}
	n.Namespace, n.Name = ns, name
	return n
}

type svcOpt func(*proxy.ServicePort)

func nodePort(p int) svcOpt { return func(s *proxy.ServicePort) { s.NodePort = p } }
func externalIPs(ips ...string) svcOpt {
	return func(s *proxy.ServicePort) {
		for _, ip := range ips {
			s.ExternalIPs = append(s.ExternalIPs, netip.MustParseAddr(ip))
		}
	}
}
func affinity(d time.Duration) svcOpt { return func(s *proxy.ServicePort) { s.AffinityTimeout = d } }
func internalLocal() svcOpt           { return func(s *proxy.ServicePort) { s.InternalLocal = true } }
func externalLocal() svcOpt           { return func(s *proxy.ServicePort) { s.ExternalLocal = true } }
func loadBalancerIP(ip string) svcOpt {
	return func(s *proxy.ServicePort) { s.LoadBalancerIPs = append(s.LoadBalancerIPs, netip.MustParseAddr(ip)) }
}

func svcPort(n proxy.ServicePortName, ip string, port int, opts ...svcOpt) *proxy.ServicePort {
	s := &proxy.ServicePort{Name: n, ClusterIP: netip.MustParseAddr(ip), Port: port, Protocol: n.Protocol}
	for _, o := range opts {
		o(s)
	}
	return s
}

func ready(addr string) proxy.Endpoint {
	return proxy.Endpoint{Addr: netip.MustParseAddrPort(addr), Ready: true, Serving: true}
}

func localEP(addr string) proxy.Endpoint {
	ep := ready(addr)
	ep.IsLocal = true
	return ep
}

func terminating(addr string) proxy.Endpoint {
	return proxy.Endpoint{Addr: netip.MustParseAddrPort(addr), Serving: true, Terminating: true}
}

// world is a desired state being edited by a test.
type world struct {
	services  map[proxy.ServicePortName]*proxy.ServicePort
	endpoints map[proxy.ServicePortName][]proxy.Endpoint
	changed   map[proxy.ServicePortName]bool
}

func newWorld() *world {
	return &world{services: map[proxy.ServicePortName]*proxy.ServicePort{},
		endpoints: map[proxy.ServicePortName][]proxy.Endpoint{}, changed: map[proxy.ServicePortName]bool{}}
}

func (w *world) set(s *proxy.ServicePort, eps ...proxy.Endpoint) {
	w.services[s.Name] = s
	w.endpoints[s.Name] = eps
	w.changed[s.Name] = true
}

func (w *world) remove(n proxy.ServicePortName) {
	delete(w.services, n)
	delete(w.endpoints, n)
	w.changed[n] = true
}

// state returns the State for a full sync (full) or for the changes since the last call.
func (w *world) state(full bool) proxy.State {
	s := proxy.State{Services: w.services, Endpoints: w.endpoints, NodeName: "node-a", Zone: "z1"}
	if !full {
		s.Changed = w.changed
	}
	w.changed = map[proxy.ServicePortName]bool{}
	return s
}

type recordingConntrack struct{ filters []*staleFlows }

func (r *recordingConntrack) deleteFlows(f *staleFlows) (int, error) {
	r.filters = append(r.filters, f)
	return 0, nil
}

func newFakeProxier(t *testing.T, opts Options) (*Proxier, *knftables.Fake, *recordingConntrack) {
	t.Helper()
	fake := knftables.NewFake(knftables.IPv4Family, TableName)
	ct := &recordingConntrack{}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	p, err := newProxier(opts, fake, ct)
	if err != nil {
		t.Fatal(err)
	}
	return p, fake, ct
}

func mustApply(t *testing.T, p *Proxier, s proxy.State) {
	t.Helper()
	if err := p.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// canonical is a dump with the elements of each map or set sorted (the fake keeps them in
// insertion order, which differs between a full sync and a series of partial ones).
func canonical(dump string) string {
	lines := strings.Split(strings.TrimSpace(dump), "\n")
	var elems, rest []string
	for _, l := range lines {
		if strings.HasPrefix(l, "add element ") {
			elems = append(elems, l)
		} else {
			rest = append(rest, l)
		}
	}
	slices.Sort(elems)
	return strings.Join(append(rest, elems...), "\n")
}

// serviceLines are the lines of the dump beyond the fixed layout.
func serviceLines(t *testing.T, opts Options, dump string) []string {
	t.Helper()
	p, fake, _ := newFakeProxier(t, opts)
	mustApply(t, p, newWorld().state(true))
	fixed := map[string]bool{}
	for _, l := range strings.Split(fake.Dump(), "\n") {
		fixed[l] = true
	}
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if !fixed[l] {
			out = append(out, l)
		}
	}
	return out
}

// recordingNFT records the transactions run.
type recordingNFT struct {
	*knftables.Fake
	txs []string
}

// newRecordingProxier is a proxier on a fake nft that records its transactions.
func newRecordingProxier(t *testing.T) (*Proxier, *recordingNFT) {
	t.Helper()
	rec := &recordingNFT{Fake: knftables.NewFake(knftables.IPv4Family, TableName)}
	p, err := newProxier(Options{Logger: quiet}, rec, &recordingConntrack{})
	if err != nil {
		t.Fatal(err)
	}
	return p, rec
}

func (r *recordingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	r.txs = append(r.txs, tx.String())
	return r.Fake.Run(ctx, tx)
}

// --- tests ----------------------------------------------------------------------------

func TestLayout(t *testing.T) {
	p, fake, _ := newFakeProxier(t, Options{NodePortAddresses: []netip.Addr{netip.MustParseAddr("192.168.1.10")}, MasqueradeAll: true})
	mustApply(t, p, newWorld().state(true))
	want := `
add table ip kplane { comment "kplane service proxy" ; }
add chain ip kplane cluster-ips-check
add chain ip kplane filter-forward { type filter hook forward priority 0 ; }
add chain ip kplane filter-input { type filter hook input priority 0 ; }
add chain ip kplane filter-output { type filter hook output priority 0 ; }
add chain ip kplane masquerading
add chain ip kplane nat-output { type nat hook output priority -100 ; }
add chain ip kplane nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kplane nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kplane nodeport-endpoints-check
add chain ip kplane reject-chain
add chain ip kplane service-endpoints-check
add chain ip kplane service-overrides
add chain ip kplane services
add set ip kplane cluster-ips { type ipv4_addr ; comment "ClusterIPs in use" ; }
add set ip kplane hairpin-connections { type ipv4_addr . ipv4_addr . inet_proto . inet_service ; comment "endpoints on this node, reaching themselves through a service" ; }
add set ip kplane nodeport-ips { type ipv4_addr ; comment "IPs accepting NodePort traffic" ; }
add map ip kplane endpoints-sctp { typeof ip daddr . sctp dport . numgen random mod 1 : ip daddr . sctp dport ; comment "sctp service IP, port and random index: endpoint" ; }
add map ip kplane endpoints-tcp { typeof ip daddr . tcp dport . numgen random mod 1 : ip daddr . tcp dport ; comment "tcp service IP, port and random index: endpoint" ; }
add map ip kplane endpoints-udp { typeof ip daddr . udp dport . numgen random mod 1 : ip daddr . udp dport ; comment "udp service IP, port and random index: endpoint" ; }
add map ip kplane no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "NodePorts without usable endpoints" ; }
add map ip kplane no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "service IPs without usable endpoints" ; }
add map ip kplane nodeport-endpoints-sctp { typeof sctp dport . numgen random mod 1 : ip daddr . sctp dport ; comment "sctp NodePort and random index: endpoint" ; }
add map ip kplane nodeport-endpoints-tcp { typeof tcp dport . numgen random mod 1 : ip daddr . tcp dport ; comment "tcp NodePort and random index: endpoint" ; }
add map ip kplane nodeport-endpoints-udp { typeof udp dport . numgen random mod 1 : ip daddr . udp dport ; comment "udp NodePort and random index: endpoint" ; }
add map ip kplane service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, external and load-balancer IP traffic" ; }
add map ip kplane service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }
add rule ip kplane cluster-ips-check ip daddr @cluster-ips reject
add rule ip kplane filter-forward ct state new jump service-endpoints-check
add rule ip kplane filter-forward ct state new jump cluster-ips-check
add rule ip kplane filter-input ct state new jump nodeport-endpoints-check
add rule ip kplane filter-input ct state new jump service-endpoints-check
add rule ip kplane filter-output ct state new jump service-endpoints-check
add rule ip kplane filter-output ct state new jump cluster-ips-check
add rule ip kplane masquerading mark and 0x00004000 != 0 mark set mark xor 0x00004000 masquerade fully-random
add rule ip kplane masquerading ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
add rule ip kplane nat-output jump services
add rule ip kplane nat-postrouting jump masquerading
add rule ip kplane nat-prerouting jump services
add rule ip kplane nodeport-endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ip kplane reject-chain meta l4proto tcp reject with tcp reset
add rule ip kplane reject-chain reject
add rule ip kplane service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule ip kplane services ip daddr @cluster-ips mark set mark or 0x00004000
add rule ip kplane services jump service-overrides
add rule ip kplane services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kplane services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
add element ip kplane nodeport-ips { 192.168.1.10 }`
	if got := canonical(fake.Dump()); got != strings.TrimSpace(want) {
		t.Errorf("layout:\n%s\nwant:\n%s", got, want)
	}
}

func TestServiceRules(t *testing.T) {
	web := spn("ns", "web", "http", corev1.ProtocolTCP)
	dns := spn("ns", "dns", "", corev1.ProtocolUDP)
	opts := Options{ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")}
	tests := []struct {
		name  string
		svc   *proxy.ServicePort
		eps   []proxy.Endpoint
		want  string
		gauge map[string]float64 // metric name{labels} → value, checked when set
	}{{
		name: "ClusterIP, random choice among the ready endpoints",
		svc:  svcPort(web, "10.96.0.10", 80),
		eps:  []proxy.Endpoint{ready("10.244.1.2:8080"), ready("10.244.2.2:8080"), {Addr: netip.MustParseAddrPort("10.244.3.2:8080")}},
		want: `
add chain ip kplane pick-tcp-2
add rule ip kplane pick-tcp-2 meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . numgen random mod 2 map @endpoints-tcp
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane endpoints-tcp { 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080 }
add element ip kplane endpoints-tcp { 10.96.0.10 . 80 . 1 : 10.244.2.2 . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto pick-tcp-2 }`,
	}, {
		name: "UDP without a port name",
		svc:  svcPort(dns, "10.96.0.53", 53),
		eps:  []proxy.Endpoint{ready("10.244.1.3:53")},
		want: `
add chain ip kplane pick-udp-1
add rule ip kplane pick-udp-1 meta l4proto udp dnat ip addr . port to ip daddr . udp dport . numgen random mod 1 map @endpoints-udp
add element ip kplane cluster-ips { 10.96.0.53 }
add element ip kplane endpoints-udp { 10.96.0.53 . 53 . 0 : 10.244.1.3 . 53 }
add element ip kplane service-ips { 10.96.0.53 . udp . 53 : goto pick-udp-1 }`,
	}, {
		name: "SCTP",
		svc:  svcPort(spn("ns", "s", "p", corev1.ProtocolSCTP), "10.96.0.11", 9),
		eps:  []proxy.Endpoint{ready("10.244.1.3:9")},
		want: `
add chain ip kplane pick-sctp-1
add rule ip kplane pick-sctp-1 meta l4proto sctp dnat ip addr . port to ip daddr . sctp dport . numgen random mod 1 map @endpoints-sctp
add element ip kplane cluster-ips { 10.96.0.11 }
add element ip kplane endpoints-sctp { 10.96.0.11 . 9 . 0 : 10.244.1.3 . 9 }
add element ip kplane service-ips { 10.96.0.11 . sctp . 9 : goto pick-sctp-1 }`,
	}, {
		name: "NodePort, external and load-balancer IPs under the Cluster policy are masqueraded",
		svc:  svcPort(web, "10.96.0.10", 80, nodePort(30080), externalIPs("192.0.2.1"), loadBalancerIP("192.0.2.2")),
		eps:  []proxy.Endpoint{ready("10.244.1.2:8080")},
		want: `
add chain ip kplane external-nodeport-tcp-1
add chain ip kplane external-tcp-1
add chain ip kplane pick-nodeport-tcp-1
add chain ip kplane pick-tcp-1
add rule ip kplane external-nodeport-tcp-1 mark set mark or 0x00004000
add rule ip kplane external-nodeport-tcp-1 goto pick-nodeport-tcp-1
add rule ip kplane external-tcp-1 mark set mark or 0x00004000
add rule ip kplane external-tcp-1 goto pick-tcp-1
add rule ip kplane pick-nodeport-tcp-1 meta l4proto tcp dnat ip addr . port to tcp dport . numgen random mod 1 map @nodeport-endpoints-tcp
add rule ip kplane pick-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . numgen random mod 1 map @endpoints-tcp
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane endpoints-tcp { 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080 }
add element ip kplane endpoints-tcp { 192.0.2.1 . 80 . 0 : 10.244.1.2 . 8080 }
add element ip kplane endpoints-tcp { 192.0.2.2 . 80 . 0 : 10.244.1.2 . 8080 }
add element ip kplane nodeport-endpoints-tcp { 30080 . 0 : 10.244.1.2 . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto pick-tcp-1 }
add element ip kplane service-ips { 192.0.2.1 . tcp . 80 : goto external-tcp-1 }
add element ip kplane service-ips { 192.0.2.2 . tcp . 80 : goto external-tcp-1 }
add element ip kplane service-nodeports { tcp . 30080 : goto external-nodeport-tcp-1 }`,
	}, {
		name: "no endpoints: ClusterIP, external IP and NodePort rejected",
		svc:  svcPort(web, "10.96.0.10", 80, nodePort(30080), externalIPs("192.0.2.1")),
		eps:  []proxy.Endpoint{{Addr: netip.MustParseAddrPort("10.244.1.2:8080")}},
		want: `
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane no-endpoint-nodeports { tcp . 30080 : goto reject-chain }
add element ip kplane no-endpoint-services { 10.96.0.10 . tcp . 80 : goto reject-chain }
add element ip kplane no-endpoint-services { 192.0.2.1 . tcp . 80 : goto reject-chain }`,
		gauge: map[string]float64{"kubeproxy_kplane_nftables_no_endpoints_service_ports": 1},
	}, {
		name: "only terminating endpoints: still served, by them",
		svc:  svcPort(web, "10.96.0.10", 80),
		eps:  []proxy.Endpoint{terminating("10.244.1.2:8080")},
		want: `
add chain ip kplane pick-tcp-1
add rule ip kplane pick-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . numgen random mod 1 map @endpoints-tcp
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane endpoints-tcp { 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto pick-tcp-1 }`,
	}, {
		name: "internalTrafficPolicy Local without local endpoints: dropped",
		svc:  svcPort(web, "10.96.0.10", 80, internalLocal()),
		eps:  []proxy.Endpoint{ready("10.244.2.2:8080")},
		want: `
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane no-endpoint-services { 10.96.0.10 . tcp . 80 : drop }`,
		gauge: map[string]float64{`kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"}`: 1},
	}, {
		name: "internalTrafficPolicy Local: only the local endpoints, hairpin for them",
		svc:  svcPort(web, "10.96.0.10", 80, internalLocal()),
		eps:  []proxy.Endpoint{localEP("10.244.1.2:8080"), ready("10.244.2.2:8080")},
		want: `
add chain ip kplane pick-tcp-1
add rule ip kplane pick-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . numgen random mod 1 map @endpoints-tcp
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane endpoints-tcp { 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080 }
add element ip kplane hairpin-connections { 10.244.1.2 . 10.244.1.2 . tcp . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto pick-tcp-1 }`,
	}, {
		name: "externalTrafficPolicy Local: client address kept, pods and the node short-circuited",
		svc:  svcPort(web, "10.96.0.10", 80, nodePort(30080), externalLocal()),
		eps:  []proxy.Endpoint{localEP("10.244.1.2:8080"), ready("10.244.2.2:8080")},
		want: `
add chain ip kplane ext-ns/web/tcp/http
add chain ip kplane local-ns/web/tcp/http
add chain ip kplane svc-ns/web/tcp/http
add rule ip kplane ext-ns/web/tcp/http ip saddr 10.244.0.0/16 goto svc-ns/web/tcp/http
add rule ip kplane ext-ns/web/tcp/http fib saddr type local mark set mark or 0x00004000
add rule ip kplane ext-ns/web/tcp/http fib saddr type local goto svc-ns/web/tcp/http
add rule ip kplane ext-ns/web/tcp/http goto local-ns/web/tcp/http
add rule ip kplane local-ns/web/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.244.1.2 . 8080 }
add rule ip kplane svc-ns/web/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.244.1.2 . 8080 , 1 : 10.244.2.2 . 8080 }
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane hairpin-connections { 10.244.1.2 . 10.244.1.2 . tcp . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto svc-ns/web/tcp/http }
add element ip kplane service-nodeports { tcp . 30080 : goto ext-ns/web/tcp/http }`,
	}, {
		name: "externalTrafficPolicy Local without local endpoints: external traffic dropped",
		svc:  svcPort(web, "10.96.0.10", 80, nodePort(30080), externalLocal()),
		eps:  []proxy.Endpoint{ready("10.244.2.2:8080")},
		want: `
add chain ip kplane ext-ns/web/tcp/http
add chain ip kplane svc-ns/web/tcp/http
add rule ip kplane ext-ns/web/tcp/http ip saddr 10.244.0.0/16 goto svc-ns/web/tcp/http
add rule ip kplane ext-ns/web/tcp/http fib saddr type local mark set mark or 0x00004000
add rule ip kplane ext-ns/web/tcp/http fib saddr type local goto svc-ns/web/tcp/http
add rule ip kplane svc-ns/web/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.244.2.2 . 8080 }
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane no-endpoint-nodeports { tcp . 30080 : drop }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto svc-ns/web/tcp/http }
add element ip kplane service-nodeports { tcp . 30080 : goto ext-ns/web/tcp/http }`,
		gauge: map[string]float64{`kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"}`: 1},
	}, {
		name: "ClientIP affinity: a timeout set and a chain per endpoint",
		svc:  svcPort(web, "10.96.0.10", 80, affinity(3*time.Hour)),
		eps:  []proxy.Endpoint{ready("10.244.1.2:8080"), ready("10.244.2.2:8080")},
		want: `
add chain ip kplane ep-ns/web/tcp/http__10.244.1.2/8080
add chain ip kplane ep-ns/web/tcp/http__10.244.2.2/8080
add chain ip kplane svc-ns/web/tcp/http
add set ip kplane aff-ns/web/tcp/http__10.244.1.2/8080 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add set ip kplane aff-ns/web/tcp/http__10.244.2.2/8080 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add rule ip kplane ep-ns/web/tcp/http__10.244.1.2/8080 update @aff-ns/web/tcp/http__10.244.1.2/8080 { ip saddr }
add rule ip kplane ep-ns/web/tcp/http__10.244.1.2/8080 meta l4proto tcp dnat to 10.244.1.2:8080
add rule ip kplane ep-ns/web/tcp/http__10.244.2.2/8080 update @aff-ns/web/tcp/http__10.244.2.2/8080 { ip saddr }
add rule ip kplane ep-ns/web/tcp/http__10.244.2.2/8080 meta l4proto tcp dnat to 10.244.2.2:8080
add rule ip kplane svc-ns/web/tcp/http ip saddr @aff-ns/web/tcp/http__10.244.1.2/8080 goto ep-ns/web/tcp/http__10.244.1.2/8080
add rule ip kplane svc-ns/web/tcp/http ip saddr @aff-ns/web/tcp/http__10.244.2.2/8080 goto ep-ns/web/tcp/http__10.244.2.2/8080
add rule ip kplane svc-ns/web/tcp/http numgen random mod 2 vmap { 0 : goto ep-ns/web/tcp/http__10.244.1.2/8080 , 1 : goto ep-ns/web/tcp/http__10.244.2.2/8080 }
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto svc-ns/web/tcp/http }`,
	}, {
		name: "internalTrafficPolicy Local with affinity: only the local endpoints get chains",
		svc:  svcPort(web, "10.96.0.10", 80, internalLocal(), affinity(time.Minute)),
		eps:  []proxy.Endpoint{localEP("10.244.1.2:8080"), ready("10.244.2.2:8080")},
		want: `
add chain ip kplane ep-ns/web/tcp/http__10.244.1.2/8080
add chain ip kplane local-ns/web/tcp/http
add set ip kplane aff-ns/web/tcp/http__10.244.1.2/8080 { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }
add rule ip kplane ep-ns/web/tcp/http__10.244.1.2/8080 update @aff-ns/web/tcp/http__10.244.1.2/8080 { ip saddr }
add rule ip kplane ep-ns/web/tcp/http__10.244.1.2/8080 meta l4proto tcp dnat to 10.244.1.2:8080
add rule ip kplane local-ns/web/tcp/http ip saddr @aff-ns/web/tcp/http__10.244.1.2/8080 goto ep-ns/web/tcp/http__10.244.1.2/8080
add rule ip kplane local-ns/web/tcp/http numgen random mod 1 vmap { 0 : goto ep-ns/web/tcp/http__10.244.1.2/8080 }
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane hairpin-connections { 10.244.1.2 . 10.244.1.2 . tcp . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto local-ns/web/tcp/http }`,
	}, {
		name: "externalTrafficPolicy Local without external access: nothing of its own",
		svc:  svcPort(web, "10.96.0.10", 80, externalLocal()),
		eps:  []proxy.Endpoint{localEP("10.244.1.2:8080")},
		want: `
add chain ip kplane pick-tcp-1
add rule ip kplane pick-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . numgen random mod 1 map @endpoints-tcp
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane endpoints-tcp { 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080 }
add element ip kplane hairpin-connections { 10.244.1.2 . 10.244.1.2 . tcp . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto pick-tcp-1 }`,
	}, {
		name: "both policies Local with a NodePort: pods and the node reach all endpoints through it",
		svc:  svcPort(web, "10.96.0.10", 80, nodePort(30080), internalLocal(), externalLocal()),
		eps:  []proxy.Endpoint{localEP("10.244.1.2:8080"), ready("10.244.2.2:8080")},
		want: `
add chain ip kplane ext-ns/web/tcp/http
add chain ip kplane local-ns/web/tcp/http
add chain ip kplane svc-ns/web/tcp/http
add rule ip kplane ext-ns/web/tcp/http ip saddr 10.244.0.0/16 goto svc-ns/web/tcp/http
add rule ip kplane ext-ns/web/tcp/http fib saddr type local mark set mark or 0x00004000
add rule ip kplane ext-ns/web/tcp/http fib saddr type local goto svc-ns/web/tcp/http
add rule ip kplane ext-ns/web/tcp/http goto local-ns/web/tcp/http
add rule ip kplane local-ns/web/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 1 map { 0 : 10.244.1.2 . 8080 }
add rule ip kplane svc-ns/web/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.244.1.2 . 8080 , 1 : 10.244.2.2 . 8080 }
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane hairpin-connections { 10.244.1.2 . 10.244.1.2 . tcp . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto local-ns/web/tcp/http }
add element ip kplane service-nodeports { tcp . 30080 : goto ext-ns/web/tcp/http }`,
	}, {
		name:  "IPv6 ClusterIP on an IPv4-only proxier: skipped",
		svc:   svcPort(web, "fd00::10", 80),
		eps:   []proxy.Endpoint{ready("[fd00::1:2]:8080")},
		want:  ``,
		gauge: map[string]float64{`kubeproxy_kplane_nftables_skipped_service_ports{reason="ipv6"}`: 1},
	}, {
		name: "IPv6 endpoints and IPv6 external IPs of an IPv4 service: left out",
		svc:  svcPort(web, "10.96.0.10", 80, externalIPs("fd00::1")),
		eps:  []proxy.Endpoint{ready("[fd00::1:2]:8080"), ready("10.244.1.2:8080")},
		want: `
add chain ip kplane pick-tcp-1
add rule ip kplane pick-tcp-1 meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . numgen random mod 1 map @endpoints-tcp
add element ip kplane cluster-ips { 10.96.0.10 }
add element ip kplane endpoints-tcp { 10.96.0.10 . 80 . 0 : 10.244.1.2 . 8080 }
add element ip kplane service-ips { 10.96.0.10 . tcp . 80 : goto pick-tcp-1 }`,
		gauge: map[string]float64{"kubeproxy_kplane_nftables_skipped_endpoints": 1},
	}, {
		name:  "unsupported protocol: skipped",
		svc:   svcPort(spn("ns", "x", "p", "ICMP"), "10.96.0.12", 1),
		eps:   []proxy.Endpoint{ready("10.244.1.2:1")},
		gauge: map[string]float64{`kubeproxy_kplane_nftables_skipped_service_ports{reason="protocol"}`: 1},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			o := opts
			o.Registerer = reg
			p, fake, _ := newFakeProxier(t, o)
			w := newWorld()
			w.set(tc.svc, tc.eps...)
			// A healthy service next to it keeps working whatever is wrong with this one.
			other := svcPort(spn("ns", "other", "", corev1.ProtocolSCTP), "10.96.0.99", 80)
			w.set(other, ready("10.244.9.1:80"), ready("10.244.9.2:80"), ready("10.244.9.3:80"))
			mustApply(t, p, w.state(true))
			otherLines := []string{
				"add chain ip kplane pick-sctp-3",
				"add rule ip kplane pick-sctp-3 meta l4proto sctp dnat ip addr . port to ip daddr . sctp dport . numgen random mod 3 map @endpoints-sctp",
				"add element ip kplane cluster-ips { 10.96.0.99 }",
				"add element ip kplane endpoints-sctp { 10.96.0.99 . 80 . 0 : 10.244.9.1 . 80 }",
				"add element ip kplane endpoints-sctp { 10.96.0.99 . 80 . 1 : 10.244.9.2 . 80 }",
				"add element ip kplane endpoints-sctp { 10.96.0.99 . 80 . 2 : 10.244.9.3 . 80 }",
				"add element ip kplane service-ips { 10.96.0.99 . sctp . 80 : goto pick-sctp-3 }",
			}
			var got []string
			for _, l := range serviceLines(t, opts, canonical(fake.Dump())) {
				if !slices.Contains(otherLines, l) {
					got = append(got, l)
				}
			}
			want := strings.Split(strings.TrimSpace(tc.want), "\n")
			if tc.want == "" {
				want = nil
			}
			if !slices.Equal(got, want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for metric, v := range tc.gauge {
				if got := gaugeValue(t, reg, metric); got != v {
					t.Errorf("%s = %v, want %v", metric, got, v)
				}
			}
		})
	}
}

// gaugeValue reads one series, written name or name{label="value"}.
func gaugeValue(t *testing.T, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			if strings.Join(ls, ",") == labels {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}

// A partial sync sends only the changed service's chains and elements, and leaves the
// table as a full sync of the same state would.
func TestPartialSyncTouchesOnlyChanged(t *testing.T) {
	p, rec := newRecordingProxier(t)
	fake := rec.Fake
	w := newWorld()
	names := make([]proxy.ServicePortName, 3)
	for i := range names {
		names[i] = spn("ns", fmt.Sprintf("svc%d", i), "", corev1.ProtocolTCP)
		w.set(svcPort(names[i], fmt.Sprintf("10.96.0.%d", i+1), 80, nodePort(30000+i)), ready(fmt.Sprintf("10.244.0.%d:80", i+1)))
	}
	mustApply(t, p, w.state(true))

	steps := []struct {
		name   string
		change func()
	}{
		{"an endpoint added", func() {
			w.set(svcPort(names[1], "10.96.0.2", 80, nodePort(30001)), ready("10.244.0.2:80"), ready("10.244.0.22:80"))
		}},
		{"all endpoints gone", func() { w.set(svcPort(names[1], "10.96.0.2", 80, nodePort(30001))) }},
		{"endpoints back, with affinity", func() {
			w.set(svcPort(names[1], "10.96.0.2", 80, nodePort(30001), affinity(time.Minute)), ready("10.244.0.2:80"))
		}},
		{"affinity timeout changed", func() {
			w.set(svcPort(names[1], "10.96.0.2", 80, nodePort(30001), affinity(time.Hour)), ready("10.244.0.2:80"))
		}},
		{"service removed", func() { w.remove(names[1]) }},
	}
	for _, step := range steps {
		step.change()
		rec.txs = nil
		mustApply(t, p, w.state(false))
		tx := strings.Join(rec.txs, "\n")
		for i, n := range names {
			if i == 1 {
				continue
			}
			for _, mark := range []string{n.Name + "/", fmt.Sprintf("10.96.0.%d ", i+1), fmt.Sprint(30000 + i)} {
				if strings.Contains(tx, mark) {
					t.Errorf("%s: transaction touches %s (%q):\n%s", step.name, n, mark, tx)
				}
			}
		}
		for _, fixed := range []string{"add chain ip kplane services", "flush map", "flush set", "add table"} {
			if strings.Contains(tx, fixed) {
				t.Errorf("%s: partial transaction has %q:\n%s", step.name, fixed, tx)
			}
		}
		p2, fake2, _ := newFakeProxier(t, Options{})
		mustApply(t, p2, proxy.State{Services: w.services, Endpoints: w.endpoints, NodeName: "node-a", Zone: "z1"})
		if got, want := canonical(fake.Dump()), canonical(fake2.Dump()); got != want {
			t.Errorf("%s: table after partial sync differs from a full sync:\n%s\nwant:\n%s", step.name, got, want)
		}
	}
	if d := fake.Dump(); strings.Contains(d, "svc1") || strings.Contains(d, "10.96.0.2 ") || strings.Contains(d, "30001") {
		t.Errorf("removed service's objects remain:\n%s", fake.Dump())
	}
}

// Random edits applied as partial syncs always leave the table a full sync would write.
func TestPartialSyncsMatchFullSync(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p, fake, _ := newFakeProxier(t, Options{ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")})
	w := newWorld()
	mustApply(t, p, w.state(true))
	names := make([]proxy.ServicePortName, 6)
	overridden := 0
	for i := range names {
		proto := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}[i%2]
		names[i] = spn("ns", fmt.Sprintf("s%d", i/2), fmt.Sprintf("p%d", i%2), proto)
	}
	for step := range 600 {
		for range 1 + rng.IntN(2) {
			i := rng.IntN(len(names))
			n := names[i]
			if rng.IntN(5) == 0 {
				w.remove(n)
				continue
			}
			// Ports of one service share the ClusterIP; external IPs are shared by all.
			// Half of the edits keep a port plain (ClusterIP only, no endpoint on this
			// node), where a change of endpoints takes the add-only path.
			var opts []svcOpt
			plain := rng.IntN(2) == 0
			if !plain && rng.IntN(2) == 0 {
				opts = append(opts, nodePort(30000+i))
			}
			if !plain && rng.IntN(3) == 0 {
				opts = append(opts, externalIPs("192.0.2.1"))
			}
			if !plain && rng.IntN(3) == 0 {
				opts = append(opts, affinity(time.Duration(1+rng.IntN(2))*time.Minute))
			}
			if !plain && rng.IntN(3) == 0 {
				opts = append(opts, internalLocal())
			}
			if !plain && rng.IntN(3) == 0 {
				opts = append(opts, externalLocal())
			}
			var eps []proxy.Endpoint
			port := 80 + rng.IntN(2) // a change of port alone takes the add-only path
			for e := range 4 {
				if plain && e%2 == 0 || !plain && rng.IntN(2) == 0 {
					continue
				}
				ep := ready(fmt.Sprintf("10.244.%d.%d:%d", e%2, e, port))
				ep.IsLocal = e%2 == 0
				ep.Ready = plain || rng.IntN(4) != 0
				eps = append(eps, ep)
			}
			w.set(svcPort(n, fmt.Sprintf("10.96.0.%d", 1+i/2), 80, opts...), eps...)
		}
		before := p.overrides
		mustApply(t, p, w.state(false))
		overridden += max(p.overrides-before, 0)
		// The maps catch up after some syncs; only then must they hold what a full sync writes.
		if rng.IntN(2) == 0 {
			p.catchUpMaps()
		}
		if p.overrides > 0 {
			continue
		}
		p2, fake2, _ := newFakeProxier(t, Options{ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")})
		mustApply(t, p2, proxy.State{Services: w.services, Endpoints: w.endpoints, NodeName: "node-a", Zone: "z1"})
		if got, want := canonical(fake.Dump()), canonical(fake2.Dump()); got != want {
			t.Fatalf("step %d: table after partial syncs differs from a full sync:\n%s\nwant:\n%s", step, got, want)
		}
	}
	if overridden == 0 {
		t.Errorf("no partial sync took the add-only path")
	}
	t.Logf("%d service ports changed through the add-only path", overridden)
}

// A change of which endpoints a ClusterIP port picks, or of how many, is applied by adding
// one rule at the head of service-overrides (a transaction without deletions); the maps
// catch up later in a transaction of their own, which also removes the rule and the shared
// chains no longer used. Anything else (here: a port left without endpoints) is applied to
// the maps at once.
func TestEndpointChangeAddsOnly(t *testing.T) {
	p, rec := newRecordingProxier(t)
	fake := rec.Fake
	w := newWorld()
	web, db := spn("ns", "web", "", corev1.ProtocolTCP), spn("ns", "db", "", corev1.ProtocolUDP)
	w.set(svcPort(web, "10.96.0.1", 80), ready("10.244.0.1:8080"), ready("10.244.0.2:8080"))
	w.set(svcPort(db, "10.96.0.2", 53), ready("10.244.0.3:53"))
	mustApply(t, p, w.state(true))
	full := func() string {
		p2, fake2, _ := newFakeProxier(t, Options{})
		mustApply(t, p2, proxy.State{Services: w.services, Endpoints: w.endpoints, NodeName: "node-a", Zone: "z1"})
		return canonical(fake2.Dump())
	}

	w.set(svcPort(web, "10.96.0.1", 80), ready("10.244.0.1:8080"), ready("10.244.0.9:8080"))
	w.set(svcPort(db, "10.96.0.2", 53), ready("10.244.0.4:53"))
	rec.txs = nil
	mustApply(t, p, w.state(false))
	tx := strings.Join(rec.txs, "\n")
	for _, want := range []string{
		"insert rule ip kplane service-overrides ip daddr 10.96.0.1 tcp dport 80 dnat ip addr . port to numgen random mod 2 map { 0 : 10.244.0.1 . 8080, 1 : 10.244.0.9 . 8080 }",
		"insert rule ip kplane service-overrides ip daddr 10.96.0.2 udp dport 53 dnat ip addr . port to numgen random mod 1 map { 0 : 10.244.0.4 . 53 }",
	} {
		if !strings.Contains(tx, want) {
			t.Errorf("transaction lacks %q:\n%s", want, tx)
		}
	}
	if strings.Contains(tx, "delete") || strings.Contains(tx, "flush") || len(strings.Fields(strings.ReplaceAll(tx, " ", ""))) != 2 {
		t.Errorf("the add-only sync sent more than the two rules:\n%s", tx)
	}
	if p.overrides != 2 || p.catchUp == nil {
		t.Fatalf("overrides %d, catch-up scheduled %v", p.overrides, p.catchUp != nil)
	}

	// Another change of web while the first is pending: a second rule, in front of the first.
	w.set(svcPort(web, "10.96.0.1", 80), ready("10.244.0.7:8080"), ready("10.244.0.9:8080"))
	mustApply(t, p, w.state(false))
	if p.overrides != 3 {
		t.Errorf("overrides %d, want 3", p.overrides)
	}
	if rules := fake.Dump(); !strings.Contains(rules, "0 : 10.244.0.7 . 8080") {
		t.Errorf("the newest override is missing:\n%s", rules)
	}

	rec.txs = nil
	p.catchUpMaps()
	if got, want := canonical(fake.Dump()), full(); got != want {
		t.Errorf("after the catch-up the table differs from a full sync:\n%s\nwant:\n%s", got, want)
	}
	if p.overrides != 0 || len(rec.txs) != 1 || !strings.Contains(rec.txs[0], "flush chain ip kplane service-overrides") {
		t.Errorf("catch-up: overrides %d, transactions %q", p.overrides, rec.txs)
	}

	// One more endpoint: service-ips must jump to another shared chain, which is added; the
	// maps and the chain no longer used (pick-tcp-2) stay until the catch-up.
	w.set(svcPort(web, "10.96.0.1", 80), ready("10.244.0.7:8080"), ready("10.244.0.9:8080"), ready("10.244.0.10:8080"))
	rec.txs = nil
	mustApply(t, p, w.state(false))
	tx = strings.Join(rec.txs, "\n")
	for _, want := range []string{
		"add chain ip kplane pick-tcp-3",
		"add rule ip kplane pick-tcp-3 meta l4proto tcp dnat ip addr . port to ip daddr . tcp dport . numgen random mod 3 map @endpoints-tcp",
		"insert rule ip kplane service-overrides ip daddr 10.96.0.1 tcp dport 80 dnat ip addr . port to numgen random mod 3 map { 0 : 10.244.0.7 . 8080, 1 : 10.244.0.9 . 8080, 2 : 10.244.0.10 . 8080 }",
	} {
		if !strings.Contains(tx, want) {
			t.Errorf("transaction lacks %q:\n%s", want, tx)
		}
	}
	if strings.Contains(tx, "delete") || strings.Contains(tx, "pick-tcp-2") || strings.Contains(tx, "element") || p.overrides != 1 {
		t.Errorf("a change of the endpoint count was not add-only (overrides %d):\n%s", p.overrides, tx)
	}
	p.catchUpMaps()
	if got, want := canonical(fake.Dump()), full(); got != want {
		t.Errorf("after the catch-up the table differs from a full sync:\n%s\nwant:\n%s", got, want)
	}

	// No endpoints left: rejected through no-endpoint-services, which the maps say at once.
	w.set(svcPort(web, "10.96.0.1", 80))
	rec.txs = nil
	mustApply(t, p, w.state(false))
	if tx := strings.Join(rec.txs, "\n"); strings.Contains(tx, "service-overrides") || p.overrides != 0 {
		t.Errorf("a service port left without endpoints went through service-overrides:\n%s", tx)
	}
	if got, want := canonical(fake.Dump()), full(); got != want {
		t.Errorf("table differs from a full sync:\n%s\nwant:\n%s", got, want)
	}
}

// A full sync removes what no service wants any more: what the proxier made for services
// now gone, and, on its first sync, whatever an earlier process left.
func TestFullSyncRemovesStaleObjects(t *testing.T) {
	p, fake, _ := newFakeProxier(t, Options{})
	w := newWorld()
	web := spn("ns", "web", "", corev1.ProtocolTCP)
	w.set(svcPort(web, "10.96.0.1", 80), ready("10.244.0.1:80"))
	mustApply(t, p, w.state(true))
	want := canonical(fake.Dump())

	sticky, local := spn("ns", "sticky", "", corev1.ProtocolTCP), spn("ns", "local", "", corev1.ProtocolUDP)
	w.set(svcPort(sticky, "10.96.0.2", 80, affinity(time.Minute)), ready("10.244.0.2:80"), ready("10.244.0.3:80"))
	w.set(svcPort(local, "10.96.0.3", 53, nodePort(30053), externalLocal()), localEP("10.244.0.4:53"), ready("10.244.0.5:53"))
	mustApply(t, p, w.state(true))
	w.remove(sticky)
	w.remove(local)
	mustApply(t, p, w.state(true))
	if got := canonical(fake.Dump()); got != want {
		t.Errorf("after removing services in a full sync:\n%s\nwant:\n%s", got, want)
	}

	// Leftovers of an earlier process: a service's chains, an affinity set, a map element
	// pointing at one of them, an unknown map.
	tx := fake.NewTransaction()
	tx.Add(&knftables.Chain{Name: "svc-ns/gone/tcp/"})
	tx.Add(&knftables.Chain{Name: "ep-ns/gone/tcp/__10.244.0.9/80"})
	tx.Add(&knftables.Set{Name: "aff-ns/gone/tcp/__10.244.0.9/80", Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.TimeoutFlag}})
	tx.Add(&knftables.Rule{Chain: "svc-ns/gone/tcp/", Rule: "goto ep-ns/gone/tcp/__10.244.0.9/80"})
	tx.Add(&knftables.Element{Map: serviceIPsMap, Key: []string{"10.96.0.9", "tcp", "80"}, Value: []string{"goto svc-ns/gone/tcp/"}})
	tx.Add(&knftables.Map{Name: "old-map", Type: "inet_service : verdict"})
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	p2, err := newProxier(Options{Logger: quiet}, fake, &recordingConntrack{})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, p2, w.state(true))
	if got := canonical(fake.Dump()); got != want {
		t.Errorf("after a new proxier's first sync:\n%s\nwant:\n%s", got, want)
	}
}

// After a failed sync (the table was deleted behind the proxier's back), the next Apply is
// a full one even when given changes, and repairs everything.
func TestRecoversAfterFailure(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, fake, _ := newFakeProxier(t, Options{Registerer: reg})
	w := newWorld()
	a, b := spn("ns", "a", "", corev1.ProtocolTCP), spn("ns", "b", "", corev1.ProtocolTCP)
	w.set(svcPort(a, "10.96.0.1", 80), ready("10.244.0.1:80"))
	w.set(svcPort(b, "10.96.0.2", 80), ready("10.244.0.2:80"))
	mustApply(t, p, w.state(true))
	want := canonical(fake.Dump())

	tx := fake.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	w.set(svcPort(a, "10.96.0.1", 80), ready("10.244.0.1:80"), ready("10.244.0.11:80"))
	if err := p.Apply(context.Background(), w.state(false)); err == nil {
		t.Fatal("partial sync on a deleted table succeeded")
	}
	if got := testutil.ToFloat64(p.m.syncFailures); got != 1 {
		t.Errorf("sync failures = %v, want 1", got)
	}
	w.set(svcPort(a, "10.96.0.1", 80), ready("10.244.0.1:80"))
	mustApply(t, p, w.state(false))
	if got := canonical(fake.Dump()); got != want {
		t.Errorf("after recovery:\n%s\nwant:\n%s", got, want)
	}
}

func TestCleanup(t *testing.T) {
	p, fake, _ := newFakeProxier(t, Options{})
	w := newWorld()
	w.set(svcPort(spn("ns", "a", "", corev1.ProtocolTCP), "10.96.0.1", 80), ready("10.244.0.1:80"))
	mustApply(t, p, w.state(true))
	for range 2 { // a second Cleanup finds no table, which is fine
		if err := p.Cleanup(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d := fake.Dump(); d != "" {
			t.Fatalf("after Cleanup:\n%s", d)
		}
	}
	// The next Apply rebuilds from scratch, even when given changes only.
	mustApply(t, p, w.state(false))
	if !strings.Contains(fake.Dump(), "10.96.0.1 . tcp . 80") {
		t.Errorf("after Cleanup and Apply:\n%s", fake.Dump())
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{
		{MasqueradeMark: 0x3},
		{ClusterCIDR: netip.MustParsePrefix("fd00::/64")},
		{NodePortAddresses: []netip.Addr{netip.MustParseAddr("fd00::1")}},
		{NodePortAddresses: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
	} {
		if _, err := newProxier(o, knftables.NewFake(knftables.IPv4Family, TableName), nil); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// Which UDP conntrack entries a sync deletes.
func TestConntrackCleanup(t *testing.T) {
	p, _, ct := newFakeProxier(t, Options{})
	w := newWorld()
	dns := spn("ns", "dns", "", corev1.ProtocolUDP)
	web := spn("ns", "web", "", corev1.ProtocolTCP)
	w.set(svcPort(dns, "10.96.0.53", 53, nodePort(30053), externalIPs("192.0.2.1")), ready("10.244.0.1:53"), ready("10.244.0.2:53"))
	w.set(svcPort(web, "10.96.0.80", 80), ready("10.244.0.1:80"))
	mustApply(t, p, w.state(true))

	w.set(svcPort(dns, "10.96.0.53", 53, nodePort(30053), externalIPs("192.0.2.1")), ready("10.244.0.2:53"),
		proxy.Endpoint{Addr: netip.MustParseAddrPort("10.244.0.3:53")}) // not serving
	mustApply(t, p, w.state(false))
	if len(ct.filters) != 2 {
		t.Fatalf("%d conntrack cleanups, want one per sync", len(ct.filters))
	}
	f := ct.filters[1]
	flow := func(proto uint8, dst, backend string) *netlink.ConntrackFlow {
		d, b := netip.MustParseAddrPort(dst), netip.MustParseAddrPort(backend)
		fl := &netlink.ConntrackFlow{FamilyType: unix.AF_INET}
		fl.Forward = netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP("10.0.0.7"), SrcPort: 40000, DstIP: d.Addr().AsSlice(), DstPort: d.Port()}
		fl.Reverse = netlink.IPTuple{Protocol: proto, SrcIP: b.Addr().AsSlice(), SrcPort: b.Port(), DstIP: net.ParseIP("10.0.0.7"), DstPort: 40000}
		return fl
	}
	for _, tc := range []struct {
		flow *netlink.ConntrackFlow
		want bool
	}{
		{flow(unix.IPPROTO_UDP, "10.96.0.53:53", "10.244.0.1:53"), true},     // removed endpoint
		{flow(unix.IPPROTO_UDP, "10.96.0.53:53", "10.244.0.2:53"), false},    // still serving
		{flow(unix.IPPROTO_UDP, "10.96.0.53:53", "10.244.0.3:53"), true},     // not serving
		{flow(unix.IPPROTO_UDP, "192.0.2.1:53", "10.244.0.1:53"), true},      // external IP
		{flow(unix.IPPROTO_UDP, "192.168.1.5:30053", "10.244.0.1:53"), true}, // NodePort
		{flow(unix.IPPROTO_UDP, "192.168.1.5:30053", "10.244.0.2:53"), false},
		{flow(unix.IPPROTO_UDP, "192.168.1.5:30053", "192.168.1.5:30053"), false}, // not DNATed
		{flow(unix.IPPROTO_TCP, "10.96.0.53:53", "10.244.0.1:53"), false},         // TCP
		{flow(unix.IPPROTO_UDP, "10.96.0.80:80", "10.244.0.9:80"), false},         // not a UDP service
	} {
		if got := f.MatchConntrackFlow(tc.flow); got != tc.want {
			t.Errorf("%s → %s:%d: match %v, want %v", tc.flow.Forward.DstIP, tc.flow.Reverse.SrcIP, tc.flow.Reverse.SrcPort, got, tc.want)
		}
	}

	// A deleted UDP service: every DNATed flow to it is stale.
	w.remove(dns)
	mustApply(t, p, w.state(false))
	f = ct.filters[len(ct.filters)-1]
	if !f.MatchConntrackFlow(flow(unix.IPPROTO_UDP, "10.96.0.53:53", "10.244.0.2:53")) {
		t.Error("flow to a deleted service kept")
	}
	// A partial sync of TCP services only has nothing to clean.
	n := len(ct.filters)
	w.set(svcPort(web, "10.96.0.80", 80), ready("10.244.0.2:80"))
	mustApply(t, p, w.state(false))
	if len(ct.filters) != n {
		t.Error("conntrack cleanup after a TCP-only change")
	}
}

func TestServiceBase(t *testing.T) {
	if got := serviceBase(spn("ns", "web", "http", corev1.ProtocolTCP)); got != "ns/web/tcp/http" {
		t.Errorf("serviceBase = %q", got)
	}
	// Characters nft names cannot hold (no valid Kubernetes name has them) give a hash.
	a, b := serviceBase(spn("NS", "web", "http", corev1.ProtocolTCP)), serviceBase(spn("ns", "w eb", "http", corev1.ProtocolTCP))
	for _, got := range []string{a, b} {
		if !strings.HasPrefix(got, "x") || !strings.HasSuffix(got, "/") || len(got) != 18 {
			t.Errorf("serviceBase = %q, want x<hash>/", got)
		}
	}
	if a == b {
		t.Error("two names, one hash")
	}
}
