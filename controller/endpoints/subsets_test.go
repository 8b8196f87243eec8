package endpoints

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestComputeSubsets(t *testing.T) {
	http := eports(eport("http", 8080))
	sidecar := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name     string
		svc      *corev1.Service
		pods     []*corev1.Pod
		want     []corev1.EndpointSubset
		problems int // how many problems are reported
	}{
		{
			name: "no pods: empty, not nil",
			svc:  service(),
			want: []corev1.EndpointSubset{},
		},
		{
			name: "one ready pod",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", "10.1.0.1")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "not ready pod goes to notReadyAddresses",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), notReady)},
			want: []corev1.EndpointSubset{{NotReadyAddresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "pod without a Ready condition is not ready",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), func(p *corev1.Pod) { p.Status.Conditions = nil })},
			want: []corev1.EndpointSubset{{NotReadyAddresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "ready and not ready pods share a subset",
			svc:  service(),
			pods: []*corev1.Pod{pod("b", "10.1.0.2"), with(pod("a", "10.1.0.1"), notReady), pod("c", "10.1.0.3")},
			want: []corev1.EndpointSubset{{
				Addresses:         addrs(addr("10.1.0.2", "b"), addr("10.1.0.3", "c")),
				NotReadyAddresses: addrs(addr("10.1.0.1", "a")),
				Ports:             http,
			}},
		},
		{
			name: "publishNotReadyAddresses lists every pod as ready",
			svc:  service(publishNotReady),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), notReady), pod("b", "10.1.0.2")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a"), addr("10.1.0.2", "b")), Ports: http}},
		},
		{
			name: "succeeded and failed pods never count, even with publishNotReadyAddresses",
			svc:  service(publishNotReady),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), phase(corev1.PodSucceeded)), with(pod("b", "10.1.0.2"), phase(corev1.PodFailed))},
			want: []corev1.EndpointSubset{},
		},
		{
			name: "pending and unknown pods that are ready count as ready",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), phase(corev1.PodPending)), with(pod("b", "10.1.0.2"), phase(corev1.PodUnknown))},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a"), addr("10.1.0.2", "b")), Ports: http}},
		},
		{
			name: "pod without any IP is left out quietly",
			svc:  service(),
			pods: []*corev1.Pod{pod("a")},
			want: []corev1.EndpointSubset{},
		},
		{
			name: "terminating pod is left out",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), terminating), pod("b", "10.1.0.2")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.2", "b")), Ports: http}},
		},
		{
			name: "terminating pod stays with publishNotReadyAddresses",
			svc:  service(publishNotReady),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), terminating, notReady)},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name:     "pod with podIP but no podIPs is skipped",
			svc:      service(),
			pods:     []*corev1.Pod{with(pod("a"), func(p *corev1.Pod) { p.Status.PodIP = "10.1.0.1" }), pod("b", "10.1.0.2")},
			want:     []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.2", "b")), Ports: http}},
			problems: 1,
		},
		{
			name: "dual-stack pod, IPv4 service",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", "fd00::1", "10.1.0.1")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "dual-stack pod, IPv6 service (the family is ipFamilies[0])",
			svc:  service(withClusterIP("fd00:10::10"), withFamilies(corev1.IPv6Protocol, corev1.IPv4Protocol)),
			pods: []*corev1.Pod{pod("a", "10.1.0.1", "fd00::1")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("fd00::1", "a")), Ports: http}},
		},
		{
			name:     "IPv4-only pod and IPv6 service: skipped",
			svc:      service(withFamilies(corev1.IPv6Protocol)),
			pods:     []*corev1.Pod{pod("a", "10.1.0.1")},
			want:     []corev1.EndpointSubset{},
			problems: 1,
		},
		{
			name: "IPs are printed canonically",
			svc:  service(withFamilies(corev1.IPv6Protocol)),
			pods: []*corev1.Pod{pod("a", "FD00:0:0:0::0001"), pod("b", "2001:0db8:0000:0000:0000:0000:0000:00ff")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("2001:db8::ff", "b"), addr("fd00::1", "a")), Ports: http}},
		},
		{
			name: "IPv4 with leading zeros is read as decimal",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", "010.001.000.09")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.9", "a")), Ports: http}},
		},
		{
			name: "IPv4-mapped IPv6 is IPv4",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", "::ffff:10.1.0.1")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "unparseable podIPs entries are passed over",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", "not-an-ip", "10.1.0.1")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "no ipFamilies: IPv6 ClusterIP picks IPv6",
			svc:  service(withFamilies(), withClusterIP("fd00:10::10")),
			pods: []*corev1.Pod{pod("a", "10.1.0.1", "fd00::1")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("fd00::1", "a")), Ports: http}},
		},
		{
			name: "no ipFamilies: IPv4 ClusterIP picks IPv4 whatever the pod's primary IP",
			svc:  service(withFamilies()),
			pods: []*corev1.Pod{pod("a", "fd00::1", "10.1.0.1")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "no ipFamilies, headless: each pod's primary IP decides",
			svc:  service(withFamilies(), headless),
			pods: []*corev1.Pod{pod("a", "fd00::1", "10.1.0.1"), pod("b", "10.1.0.2", "fd00::2")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.2", "b"), addr("fd00::1", "a")), Ports: http}},
		},
		{
			name: "no ipFamilies, no ClusterIP, pod with podIPs only: IPv4",
			svc:  service(withFamilies(), withClusterIP("")),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), func(p *corev1.Pod) { p.Status.PodIP = "" })},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "hostname when the subdomain names the service",
			svc:  service(headless),
			pods: []*corev1.Pod{
				with(pod("a", "10.1.0.1"), func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "host-a", "web" }),
				with(pod("b", "10.1.0.2"), func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "host-b", "other" }),
				with(pod("c", "10.1.0.3"), func(p *corev1.Pod) { p.Spec.Subdomain = "web" }),
			},
			want: []corev1.EndpointSubset{{
				Addresses: addrs(
					func() corev1.EndpointAddress { a := addr("10.1.0.1", "a"); a.Hostname = "host-a"; return a }(),
					addr("10.1.0.2", "b"), addr("10.1.0.3", "c")),
				Ports: http,
			}},
		},
		{
			name: "hostname applies to services with a ClusterIP too",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "host-a", "web" })},
			want: []corev1.EndpointSubset{{
				Addresses: addrs(func() corev1.EndpointAddress { a := addr("10.1.0.1", "a"); a.Hostname = "host-a"; return a }()),
				Ports:     http,
			}},
		},
		{
			name: "unbound pod: no nodeName",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), func(p *corev1.Pod) { p.Spec.NodeName = "" })},
			want: []corev1.EndpointSubset{{
				Addresses: addrs(func() corev1.EndpointAddress { a := addr("10.1.0.1", "a"); a.NodeName = nil; return a }()),
				Ports:     http,
			}},
		},
		{
			name: "named targetPort resolves per pod",
			svc:  service(withPorts(tcpPort("http", 80, intstr.FromString("web")))),
			pods: []*corev1.Pod{
				with(pod("a", "10.1.0.1"), containerPorts(corev1.ContainerPort{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP})),
				with(pod("b", "10.1.0.2"), containerPorts(corev1.ContainerPort{Name: "web", ContainerPort: 9090, Protocol: corev1.ProtocolTCP})),
			},
			want: []corev1.EndpointSubset{
				{Addresses: addrs(addr("10.1.0.1", "a")), Ports: eports(eport("http", 8080))},
				{Addresses: addrs(addr("10.1.0.2", "b")), Ports: eports(eport("http", 9090))},
			},
		},
		{
			name: "named targetPort needs the same protocol",
			svc: service(withPorts(
				corev1.ServicePort{Name: "dns", Port: 53, TargetPort: intstr.FromString("dns"), Protocol: corev1.ProtocolUDP},
				tcpPort("dns-tcp", 53, intstr.FromString("dns")))),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), containerPorts(corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolTCP}))},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: eports(eport("dns-tcp", 5353))}},
			// The UDP port does not resolve.
			problems: 1,
		},
		{
			name: "an unresolved named port skips only that port of that pod",
			svc:  service(withPorts(tcpPort("http", 80, intstr.FromString("http")), tcpPort("metrics", 9100, intstr.FromString("metrics")))),
			pods: []*corev1.Pod{
				with(pod("a", "10.1.0.1"), containerPorts(
					corev1.ContainerPort{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
					corev1.ContainerPort{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP})),
				pod("b", "10.1.0.2"), // has "http" only
			},
			want: []corev1.EndpointSubset{
				{Addresses: addrs(addr("10.1.0.1", "a")), Ports: eports(eport("metrics", 9100))},
				{Addresses: addrs(addr("10.1.0.1", "a"), addr("10.1.0.2", "b")), Ports: eports(eport("http", 8080))},
			},
			problems: 1,
		},
		{
			name: "regular containers before sidecars; plain init containers never",
			svc:  service(withPorts(tcpPort("http", 80, intstr.FromString("http")), tcpPort("admin", 81, intstr.FromString("admin")), tcpPort("setup", 82, intstr.FromString("setup")))),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{
					{Name: "init", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 7000, Protocol: corev1.ProtocolTCP}}},
					{Name: "proxy", RestartPolicy: &sidecar, Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: 15001, Protocol: corev1.ProtocolTCP},
						{Name: "admin", ContainerPort: 15000, Protocol: corev1.ProtocolTCP},
					}},
				}
			})},
			want: []corev1.EndpointSubset{{
				Addresses: addrs(addr("10.1.0.1", "a")),
				Ports:     eports(eport("admin", 15000), eport("http", 8080)),
			}},
			problems: 1,
		},
		{
			name: "numeric targetPort needs no container port",
			svc:  service(withPorts(tcpPort("http", 80, intstr.FromInt32(3000)))),
			pods: []*corev1.Pod{with(pod("a", "10.1.0.1"), containerPorts())},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: eports(eport("http", 3000))}},
		},
		{
			name: "ports with the same pods share a subset; appProtocol is copied",
			svc: service(withPorts(
				tcpPort("http", 80, intstr.FromInt32(8080)),
				corev1.ServicePort{Name: "grpc", Port: 90, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP, AppProtocol: ptr("kubernetes.io/h2c")},
				corev1.ServicePort{Name: "quic", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolUDP},
			)),
			pods: []*corev1.Pod{pod("b", "10.1.0.2"), pod("a", "10.1.0.1")},
			want: []corev1.EndpointSubset{{
				Addresses: addrs(addr("10.1.0.1", "a"), addr("10.1.0.2", "b")),
				Ports: eports(
					corev1.EndpointPort{Name: "grpc", Port: 9090, Protocol: corev1.ProtocolTCP, AppProtocol: ptr("kubernetes.io/h2c")},
					eport("http", 8080),
					corev1.EndpointPort{Name: "quic", Port: 8080, Protocol: corev1.ProtocolUDP}),
			}},
		},
		{
			name: "headless without ports: addresses only",
			svc:  service(headless, withPorts()),
			pods: []*corev1.Pod{pod("a", "10.1.0.1"), with(pod("b", "10.1.0.2"), notReady)},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), NotReadyAddresses: addrs(addr("10.1.0.2", "b"))}},
		},
		{
			name: "virtual IP without ports: nothing",
			svc:  service(withPorts()),
			pods: []*corev1.Pod{pod("a", "10.1.0.1")},
			want: []corev1.EndpointSubset{},
		},
		{
			name: "no ClusterIP at all (not headless) without ports: nothing",
			svc:  service(withClusterIP(""), withPorts()),
			pods: []*corev1.Pod{pod("a", "10.1.0.1")},
			want: []corev1.EndpointSubset{},
		},
		{
			name: "two pods with one IP (host network) are two addresses",
			svc:  service(),
			pods: []*corev1.Pod{pod("b", "192.168.0.5"), pod("a", "192.168.0.5")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("192.168.0.5", "a"), addr("192.168.0.5", "b")), Ports: http}},
		},
		{
			name: "the same pod listed twice is one address",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", "10.1.0.1"), pod("a", "10.1.0.1")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.1", "a")), Ports: http}},
		},
		{
			name: "addresses sort by IP as text",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", "10.1.0.9"), pod("b", "10.1.0.10"), pod("c", "10.1.0.100")},
			want: []corev1.EndpointSubset{{Addresses: addrs(addr("10.1.0.10", "b"), addr("10.1.0.100", "c"), addr("10.1.0.9", "a")), Ports: http}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := make([]*corev1.Pod, len(tt.pods))
			for i, p := range tt.pods {
				in[i] = p.DeepCopy()
			}
			got := computeSubsets(tt.svc, tt.pods)
			if got.Subsets == nil {
				t.Error("subsets are nil, want a non-nil list")
			}
			sameSubsets(t, got.Subsets, tt.want)
			if len(got.Problems) != tt.problems {
				t.Errorf("problems = %q, want %d of them", got.Problems, tt.problems)
			}
			for i := range in {
				if !podsEqual(in[i], tt.pods[i]) {
					t.Errorf("pod %s was modified", in[i].Name)
				}
			}
		})
	}
}

func podsEqual(a, b *corev1.Pod) bool { return dump(a) == dump(b) }

func TestProblemsNameTheCause(t *testing.T) {
	svc := service(withFamilies(corev1.IPv6Protocol), withPorts(tcpPort("http", 80, intstr.FromString("nope"))))
	got := computeSubsets(svc, []*corev1.Pod{pod("v4only", "10.1.0.1"), pod("dual", "10.1.0.2", "fd00::2")})
	if len(got.Problems) != 2 {
		t.Fatalf("problems = %q", got.Problems)
	}
	if !strings.Contains(got.Problems[0], "v4only") || !strings.Contains(got.Problems[0], "IPv6") {
		t.Errorf("family problem = %q", got.Problems[0])
	}
	if !strings.Contains(got.Problems[1], "dual") || !strings.Contains(got.Problems[1], `"nope"`) {
		t.Errorf("port problem = %q", got.Problems[1])
	}
}

func TestParseIPSloppy(t *testing.T) {
	tests := []struct{ in, want string }{
		{"1.2.3.4", "1.2.3.4"},
		{"01.2.3.4", "1.2.3.4"},
		{"001.002.003.004", "1.2.3.4"},
		{"010.0.0.0", "10.0.0.0"},
		{"0.0.0.0", "0.0.0.0"},
		{"2001:DB8::1", "2001:db8::1"},
		{"2001:0db8:0:0:0:0:0:1", "2001:db8::1"},
		{"2001:00db8::1", "2001:db8::1"},
		{"::ffff:001.2.3.4", "1.2.3.4"},
		{"::", "::"},
		{"256.1.1.1", ""},
		{"0256.1.1.1", ""},
		{"1.2.3", ""},
		{"1.2.3.x", ""},
		{"0x1.2.3.4", ""},
		{"fe80::1%eth0", ""},
		{"10.0.0.0/8", ""},
		{"", ""},
		{"hello", ""},
	}
	for _, tt := range tests {
		ip := parseIPSloppy(tt.in)
		got := ""
		if ip != nil {
			got = ip.String()
		}
		if got != tt.want {
			t.Errorf("parseIPSloppy(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
