package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// service builds a Service "ns/<name>" of the given ClusterIPs with ports "80/TCP",
// "53/UDP/dns", "80/TCP/http/30080" (port/protocol[/name[/nodePort]]); mutate adjusts the rest.
func service(name string, clusterIPs []string, ports []string, mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: clusterIPs}}
	if len(clusterIPs) > 0 {
		s.Spec.ClusterIP = clusterIPs[0]
	}
	for _, p := range ports {
		f := strings.Split(p, "/")
		sp := corev1.ServicePort{Protocol: corev1.Protocol(f[1])}
		fmt.Sscan(f[0], &sp.Port)
		if len(f) > 2 {
			sp.Name = f[2]
		}
		if len(f) > 3 {
			fmt.Sscan(f[3], &sp.NodePort)
		}
		s.Spec.Ports = append(s.Spec.Ports, sp)
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func spName(svc, port string, protocol corev1.Protocol) ServicePortName {
	return ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: svc}, Port: port, Protocol: protocol}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func (s *ServicePort) describe() string {
	return fmt.Sprintf("%s %s:%d np=%d ext=%v lb=%v aff=%v il=%v el=%v hc=%d", s.Name, s.ClusterIP, s.Port, s.NodePort,
		s.ExternalIPs, s.LoadBalancerIPs, s.AffinityTimeout, s.InternalLocal, s.ExternalLocal, s.HealthCheckNodePort)
}

func describeMap(m ServicePortMap) []string {
	var out []string
	for _, sp := range m {
		out = append(out, sp.describe())
	}
	sort.Strings(out)
	return out
}

func TestServicePortsOf(t *testing.T) {
	local := corev1.ServiceInternalTrafficPolicyLocal
	proxyMode := corev1.LoadBalancerIPModeProxy
	vipMode := corev1.LoadBalancerIPModeVIP
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		family  corev1.IPFamily
		want    []*ServicePort
		problem string // the problem's reason, "" for none
	}{
		{name: "nil"},
		{name: "ExternalName", svc: service("a", nil, nil, func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.com"
		})},
		{name: "headless", svc: service("a", []string{"None"}, []string{"80/TCP"})},
		{name: "no ClusterIP yet", svc: service("a", nil, []string{"80/TCP"})},
		{name: "two ports", svc: service("a", []string{"10.0.0.1"}, []string{"80/TCP/http", "53/UDP/dns", "9/SCTP/disc"}),
			want: []*ServicePort{
				{Name: spName("a", "http", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP"},
				{Name: spName("a", "dns", "UDP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 53, Protocol: "UDP"},
				{Name: spName("a", "disc", "SCTP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 9, Protocol: "SCTP"},
			}},
		{name: "protocol defaults to TCP", svc: service("a", []string{"10.0.0.1"}, []string{"80/"}),
			want: []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP"}}},
		{name: "IPv6 only on IPv4", svc: service("a", []string{"fd00::1"}, []string{"80/TCP"}), problem: "ip-family"},
		{name: "IPv6 on IPv6", svc: service("a", []string{"fd00::1"}, []string{"80/TCP"}), family: corev1.IPv6Protocol,
			want: []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("fd00::1"), Port: 80, Protocol: "TCP"}}},
		{name: "dual-stack on IPv4: the IPv4 part", svc: service("a", []string{"fd00::1", "10.0.0.1"}, []string{"80/TCP"}),
			want:    []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP"}},
			problem: "ip-family"},
		{name: "invalid ClusterIP", svc: service("a", []string{"10.0.0.300"}, []string{"80/TCP"}), problem: "invalid-address"},
		{name: "NodePort, external IPs of our family, Local", svc: service("a", []string{"10.0.0.1"}, []string{"80/TCP//30080"}, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ExternalIPs = []string{"192.0.2.1", "2001:db8::1", "bad", "192.0.2.2"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), want: []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP",
			NodePort: 30080, ExternalIPs: addrs("192.0.2.1", "192.0.2.2"), ExternalLocal: true}}},
		{name: "ClusterIP only: external policy does not apply", svc: service("a", []string{"10.0.0.1"}, []string{"80/TCP"}, func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = &local
		}), want: []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP",
			InternalLocal: true}}},
		{name: "LoadBalancer: VIP ingress only, health check port", svc: service("a", []string{"10.0.0.1"}, []string{"80/TCP//30080"}, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 31000
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
				{IP: "198.51.100.1"}, {IP: "198.51.100.2", IPMode: &proxyMode}, {IP: "198.51.100.3", IPMode: &vipMode},
				{Hostname: "lb.example.com"}, {IP: "2001:db8::2"},
			}
		}), want: []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP",
			NodePort: 30080, LoadBalancerIPs: addrs("198.51.100.1", "198.51.100.3"), ExternalLocal: true, HealthCheckNodePort: 31000}}},
		{name: "LoadBalancer Cluster: no health check port", svc: service("a", []string{"10.0.0.1"}, []string{"80/TCP//30080"}, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.HealthCheckNodePort = 31000
		}), want: []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP", NodePort: 30080}}},
		{name: "ClientIP affinity, default timeout", svc: service("a", []string{"10.0.0.1"}, []string{"80/TCP"}, func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		}), want: []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP",
			AffinityTimeout: 10800 * time.Second}}},
		{name: "ClientIP affinity, own timeout", svc: service("a", []string{"10.0.0.1"}, []string{"80/TCP"}, func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(int32(60))}}
		}), want: []*ServicePort{{Name: spName("a", "", "TCP"), ClusterIP: netip.MustParseAddr("10.0.0.1"), Port: 80, Protocol: "TCP",
			AffinityTimeout: time.Minute}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			family := tc.family
			if family == "" {
				family = corev1.IPv4Protocol
			}
			got, problem := ServicePortsOf(tc.svc, family)
			want := ServicePortMap{}
			for _, sp := range tc.want {
				want[sp.Name] = sp
			}
			if g, w := describeMap(got), describeMap(want); !slices.Equal(g, w) {
				t.Errorf("ports\n  %s\nwant\n  %s", strings.Join(g, "\n  "), strings.Join(w, "\n  "))
			}
			switch {
			case problem == nil && tc.problem != "":
				t.Errorf("no problem, want %q", tc.problem)
			case problem != nil && problem.Reason != tc.problem:
				t.Errorf("problem %v, want reason %q", problem, tc.problem)
			}
		})
	}
}

func TestServiceChangeTracker(t *testing.T) {
	a1 := service("a", []string{"10.0.0.1"}, []string{"80/TCP/http", "53/UDP/dns"})
	a1relabelled := service("a", []string{"10.0.0.1"}, []string{"80/TCP/http", "53/UDP/dns"}, func(s *corev1.Service) {
		s.Labels = map[string]string{"x": "y"}
		s.ResourceVersion = "7"
	})
	a2 := service("a", []string{"10.0.0.1"}, []string{"8080/TCP/http", "53/UDP/dns"})
	a3 := service("a", []string{"10.0.0.1"}, []string{"8080/TCP/http"})
	b := service("b", []string{"10.0.0.2"}, []string{"80/TCP"})
	v6 := service("v6", []string{"fd00::2"}, []string{"80/TCP"})
	v6b := service("v6", []string{"fd00::2"}, []string{"81/TCP"})

	type update struct {
		old, cur    *corev1.Service
		wantPending bool // Update's answer
	}
	type sync struct {
		updates  []update
		want     []string // the map after Apply, as ports "ns/name:port/proto ip:port"
		changed  []string // ServicePortName strings
		problems int      // problems reported by the updates
	}
	for _, tc := range []struct {
		name  string
		syncs []sync
	}{
		{name: "add, change a port, drop a port, delete", syncs: []sync{
			{updates: []update{{nil, a1, true}, {nil, b, true}},
				want:    []string{"ns/a:dns/UDP 10.0.0.1:53", "ns/a:http/TCP 10.0.0.1:80", "ns/b:/TCP 10.0.0.2:80"},
				changed: []string{"ns/a:dns/UDP", "ns/a:http/TCP", "ns/b:/TCP"}},
			{updates: []update{{a1, a2, true}},
				want:    []string{"ns/a:dns/UDP 10.0.0.1:53", "ns/a:http/TCP 10.0.0.1:8080", "ns/b:/TCP 10.0.0.2:80"},
				changed: []string{"ns/a:http/TCP"}},
			{updates: []update{{a2, a3, true}},
				want:    []string{"ns/a:http/TCP 10.0.0.1:8080", "ns/b:/TCP 10.0.0.2:80"},
				changed: []string{"ns/a:dns/UDP"}},
			{updates: []update{{a3, nil, true}, {b, nil, true}},
				changed: []string{"ns/a:http/TCP", "ns/b:/TCP"}},
		}},
		{name: "added and deleted between syncs: nothing", syncs: []sync{
			{updates: []update{{nil, a1, true}, {a1, nil, false}}},
		}},
		{name: "a change that changes no port vanishes", syncs: []sync{
			{updates: []update{{nil, a1, true}},
				want:    []string{"ns/a:dns/UDP 10.0.0.1:53", "ns/a:http/TCP 10.0.0.1:80"},
				changed: []string{"ns/a:dns/UDP", "ns/a:http/TCP"}},
			{updates: []update{{a1, a1relabelled, false}},
				want: []string{"ns/a:dns/UDP 10.0.0.1:53", "ns/a:http/TCP 10.0.0.1:80"}},
		}},
		{name: "changed and changed back vanishes", syncs: []sync{
			{updates: []update{{nil, a1, true}},
				want:    []string{"ns/a:dns/UDP 10.0.0.1:53", "ns/a:http/TCP 10.0.0.1:80"},
				changed: []string{"ns/a:dns/UDP", "ns/a:http/TCP"}},
			{updates: []update{{a1, a2, true}, {a2, a1, false}},
				want: []string{"ns/a:dns/UDP 10.0.0.1:53", "ns/a:http/TCP 10.0.0.1:80"}},
		}},
		{name: "several changes: the first previous, the last current", syncs: []sync{
			{updates: []update{{nil, a1, true}, {a1, a2, true}, {a2, a3, true}},
				want:    []string{"ns/a:http/TCP 10.0.0.1:8080"},
				changed: []string{"ns/a:http/TCP"}},
		}},
		{name: "other family: a problem, once per change, no ports", syncs: []sync{
			{updates: []update{{nil, v6, false}, {v6, v6, false}, {v6, v6b, false}}, problems: 1},
			{updates: []update{{v6b, nil, false}, {nil, b, true}},
				want: []string{"ns/b:/TCP 10.0.0.2:80"}, changed: []string{"ns/b:/TCP"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewServiceChangeTracker(corev1.IPv4Protocol)
			problems := 0
			tr.OnProblem = func(Problem) { problems++ }
			m := ServicePortMap{}
			for i, s := range tc.syncs {
				problems = 0
				for j, u := range s.updates {
					if got := tr.Update(u.old, u.cur); got != u.wantPending {
						t.Errorf("sync %d update %d: pending %v, want %v", i, j, got, u.wantPending)
					}
				}
				if problems != s.problems {
					t.Errorf("sync %d: %d problems, want %d", i, problems, s.problems)
				}
				changed := tr.Apply(m)
				if tr.Pending() != 0 {
					t.Errorf("sync %d: %d pending after Apply", i, tr.Pending())
				}
				var got, gotChanged []string
				for name, sp := range m {
					if name != sp.Name {
						t.Errorf("sync %d: %v filed under %v", i, sp.Name, name)
					}
					got = append(got, fmt.Sprintf("%s %s", name, netip.AddrPortFrom(sp.ClusterIP, uint16(sp.Port))))
				}
				for name := range changed {
					gotChanged = append(gotChanged, name.String())
				}
				sort.Strings(got)
				sort.Strings(gotChanged)
				if !slices.Equal(got, s.want) {
					t.Errorf("sync %d: map %v, want %v", i, got, s.want)
				}
				if !slices.Equal(gotChanged, s.changed) {
					t.Errorf("sync %d: changed %v, want %v", i, gotChanged, s.changed)
				}
			}
		})
	}
}
