package endpointslice

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	v4 = discoveryv1.AddressTypeIPv4
	v6 = discoveryv1.AddressTypeIPv6
)

func TestAddressTypesFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		families []corev1.IPFamily
		ip       string
		want     []discoveryv1.AddressType
	}{
		{"ipv4", []corev1.IPFamily{corev1.IPv4Protocol}, "10.0.0.1", []discoveryv1.AddressType{v4}},
		{"ipv6", []corev1.IPFamily{corev1.IPv6Protocol}, "fd00::1", []discoveryv1.AddressType{v6}},
		{"dual stack, v6 first", []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, "fd00::1", []discoveryv1.AddressType{v4, v6}},
		{"no families: ClusterIP's (v4)", nil, "10.0.0.1", []discoveryv1.AddressType{v4}},
		{"no families: ClusterIP's (v6)", nil, "fd00::1", []discoveryv1.AddressType{v6}},
		{"no families: unparsable ClusterIP counts as v4", nil, "bogus", []discoveryv1.AddressType{v4}},
		{"no families, headless: both", nil, corev1.ClusterIPNone, []discoveryv1.AddressType{v4, v6}},
		{"no families, no ClusterIP: both", nil, "", []discoveryv1.AddressType{v4, v6}},
		{"unknown family only: as if none", []corev1.IPFamily{"IPv5"}, "10.0.0.1", []discoveryv1.AddressType{v4}},
		{"headless with families: the families", []corev1.IPFamily{corev1.IPv6Protocol}, corev1.ClusterIPNone, []discoveryv1.AddressType{v6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := service(func(s *corev1.Service) { s.Spec.IPFamilies, s.Spec.ClusterIP = tc.families, tc.ip })
			if got := addressTypesFor(svc); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodEndpoint(t *testing.T) {
	zoneA := nodes(map[string]string{"node-a": "zone-a"})
	nodeA, _ := zoneA("node-a")
	noZone, _ := nodes(map[string]string{"node-a": ""})("node-a")
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		pod  *corev1.Pod
		node *corev1.Node
		at   discoveryv1.AddressType
		want discoveryv1.Endpoint
	}{
		{name: "ready", svc: service(), pod: pod("p", true, "10.1.0.1"), node: nodeA, at: v4, want: ep("p", "10.1.0.1", true)},
		{name: "not ready", svc: service(), pod: pod("p", false, "10.1.0.1"), node: nodeA, at: v4, want: ep("p", "10.1.0.1", false)},
		{
			name: "ready and terminating: serving, not ready", svc: service(), pod: withPod(pod("p", true, "10.1.0.1"), terminating), node: nodeA, at: v4,
			want: func() discoveryv1.Endpoint {
				e := ep("p", "10.1.0.1", true)
				e.Conditions.Ready, e.Conditions.Terminating = new(false), new(true)
				return e
			}(),
		},
		{
			name: "publishNotReadyAddresses: always ready", svc: service(publishNotReady), pod: withPod(pod("p", false, "10.1.0.1"), terminating), node: nodeA, at: v4,
			want: func() discoveryv1.Endpoint {
				e := ep("p", "10.1.0.1", false)
				e.Conditions.Ready, e.Conditions.Terminating = new(true), new(true)
				return e
			}(),
		},
		{
			name: "no ready condition: not serving", svc: service(), pod: withPod(pod("p", true, "10.1.0.1"), func(p *corev1.Pod) { p.Status.Conditions = nil }), node: nodeA, at: v4,
			want: ep("p", "10.1.0.1", false),
		},
		{
			name: "pending pod that is ready counts as ready", svc: service(), pod: withPod(pod("p", true, "10.1.0.1"), phase(corev1.PodPending)), node: nodeA, at: v4,
			want: ep("p", "10.1.0.1", true),
		},
		{
			name: "node without zone label", svc: service(), pod: pod("p", true, "10.1.0.1"), node: noZone, at: v4,
			want: func() discoveryv1.Endpoint { e := ep("p", "10.1.0.1", true); e.Zone = nil; return e }(),
		},
		{
			name: "unknown node: no zone", svc: service(), pod: pod("p", true, "10.1.0.1"), node: nil, at: v4,
			want: func() discoveryv1.Endpoint { e := ep("p", "10.1.0.1", true); e.Zone = nil; return e }(),
		},
		{
			name: "no node name", svc: service(), pod: withPod(pod("p", true, "10.1.0.1"), onNode("")), node: nil, at: v4,
			want: func() discoveryv1.Endpoint { e := ep("p", "10.1.0.1", true); e.Zone, e.NodeName = nil, nil; return e }(),
		},
		{
			name: "hostname with subdomain = service name", svc: service(),
			pod: withPod(pod("p", true, "10.1.0.1"), func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "h", "web" }), node: nodeA, at: v4,
			want: func() discoveryv1.Endpoint { e := ep("p", "10.1.0.1", true); e.Hostname = new("h"); return e }(),
		},
		{
			name: "hostname with another subdomain: none", svc: service(),
			pod: withPod(pod("p", true, "10.1.0.1"), func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "h", "other" }), node: nodeA, at: v4,
			want: ep("p", "10.1.0.1", true),
		},
		{
			name: "dual-stack pod, v4 slice: only v4", svc: service(), pod: pod("p", true, "10.1.0.1", "fd00::1"), node: nodeA, at: v4,
			want: ep("p", "10.1.0.1", true),
		},
		{
			name: "dual-stack pod, v6 slice: only v6, canonical", svc: service(), pod: pod("p", true, "10.1.0.1", "fd00:0::0:1"), node: nodeA, at: v6,
			want: ep("p", "fd00::1", true),
		},
		{
			name: "leading zeros are read as decimal", svc: service(), pod: pod("p", true, "010.001.0.9"), node: nodeA, at: v4,
			want: ep("p", "10.1.0.9", true),
		},
		{
			name: "invalid IP left out", svc: service(), pod: pod("p", true, "bogus", "10.1.0.1"), node: nodeA, at: v4,
			want: ep("p", "10.1.0.1", true),
		},
		{
			name: "IPv4-mapped IPv6 is IPv4", svc: service(), pod: pod("p", true, "::ffff:10.1.0.1"), node: nodeA, at: v4,
			want: ep("p", "10.1.0.1", true),
		},
		{
			name: "no IP of the family: no addresses", svc: service(), pod: pod("p", true, "10.1.0.1"), node: nodeA, at: v6,
			want: func() discoveryv1.Endpoint { e := ep("p", "x", true); e.Addresses = nil; return e }(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := podEndpoint(tc.pod, tc.node, tc.svc, tc.at, nil)
			if !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", dump(got), dump(tc.want))
			}
		})
	}
}

func TestIncludePod(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"running", pod("p", true, "10.1.0.1"), true},
		{"not ready", pod("p", false, "10.1.0.1"), true},
		{"terminating", withPod(pod("p", true, "10.1.0.1"), terminating), true},
		{"failed", withPod(pod("p", true, "10.1.0.1"), phase(corev1.PodFailed)), false},
		{"succeeded", withPod(pod("p", true, "10.1.0.1"), phase(corev1.PodSucceeded)), false},
		{"no IP", pod("p", true), false},
		{"podIP only", withPod(pod("p", true), func(p *corev1.Pod) { p.Status.PodIP = "10.1.0.1" }), true},
	} {
		if got := includePod(tc.pod); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEndpointPorts(t *testing.T) {
	sidecar := func(name string, port int32, always bool) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			c := corev1.Container{Name: "init", Ports: []corev1.ContainerPort{{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP}}}
			if always {
				c.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
			}
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		}
	}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		pod  *corev1.Pod
		want []discoveryv1.EndpointPort
	}{
		{"numeric target", service(), pod("p", true), httpPort(8080)},
		{"named target", service(namedTarget("web")), withPod(pod("p", true), containerPort("web", 9000)), httpPort(9000)},
		{"named target, first container port wins", service(namedTarget("web")),
			withPod(pod("p", true), containerPort("web", 9000), containerPort("web", 9001)), httpPort(9000)},
		{"named target, other protocol does not match", service(namedTarget("web")),
			withPod(pod("p", true), func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "web", ContainerPort: 9000, Protocol: corev1.ProtocolUDP}}
			}), []discoveryv1.EndpointPort{}},
		{"named target not declared: port left out", service(namedTarget("web")), pod("p", true), []discoveryv1.EndpointPort{}},
		{"named target in a sidecar", service(namedTarget("web")), withPod(pod("p", true), sidecar("web", 7000, true)), httpPort(7000)},
		{"named target in a plain init container: not found", service(namedTarget("web")), withPod(pod("p", true), sidecar("web", 7000, false)), []discoveryv1.EndpointPort{}},
		{"regular containers before sidecars", service(namedTarget("web")),
			withPod(pod("p", true), sidecar("web", 7000, true), containerPort("web", 9000)), httpPort(9000)},
		{"headless without ports", service(headless, func(s *corev1.Service) { s.Spec.Ports = nil }), pod("p", true), []discoveryv1.EndpointPort{}},
		{"appProtocol copied", service(func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = new("h2c") }), pod("p", true),
			[]discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP), AppProtocol: new("h2c")}}},
		{"one of two ports unresolved", service(func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP})
		}), pod("p", true), httpPort(8080)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probs := problems{}
			got := endpointPorts(tc.svc, tc.pod, probs)
			if !apiequality.Semantic.DeepEqual(got, tc.want) || got == nil {
				t.Errorf("got %v, want %v", dump(got), dump(tc.want))
			}
		})
	}
}

func TestDesiredGroups(t *testing.T) {
	for _, tc := range []struct {
		name        string
		svc         *corev1.Service
		pods        []*corev1.Pod
		at          discoveryv1.AddressType
		wantGroups  map[string][]string // port key → endpoint pod names
		wantMissing []missingNode
	}{
		{
			name: "finished pods and pods without IPs are out, terminating ones in",
			svc:  service(),
			pods: []*corev1.Pod{
				pod("a", true, "10.1.0.1"), pod("b", false, "10.1.0.2"), withPod(pod("c", true, "10.1.0.3"), terminating),
				withPod(pod("d", true, "10.1.0.4"), phase(corev1.PodFailed)), withPod(pod("e", true, "10.1.0.5"), phase(corev1.PodSucceeded)),
				pod("f", true),
			},
			at:         v4,
			wantGroups: map[string][]string{portKey(httpPort(8080)): {"a", "b", "c"}},
		},
		{
			name: "a named port resolving differently makes two groups; not resolving, a third",
			svc:  service(namedTarget("web")),
			pods: []*corev1.Pod{
				withPod(pod("a", true, "10.1.0.1"), containerPort("web", 9000)),
				withPod(pod("b", true, "10.1.0.2"), containerPort("web", 9001)),
				withPod(pod("c", true, "10.1.0.3"), containerPort("web", 9000)),
				pod("d", true, "10.1.0.4"),
			},
			at: v4,
			wantGroups: map[string][]string{
				portKey(httpPort(9000)): {"a", "c"}, portKey(httpPort(9001)): {"b"}, portKey(nil): {"d"},
			},
		},
		{
			name:       "pods with no IP of the family still make their group",
			svc:        service(),
			pods:       []*corev1.Pod{pod("a", true, "fd00::1")},
			at:         v4,
			wantGroups: map[string][]string{portKey(httpPort(8080)): {}},
		},
		{
			name:        "missing node: left out and reported",
			svc:         service(),
			pods:        []*corev1.Pod{pod("a", true, "10.1.0.1"), withPod(pod("b", true, "10.1.0.2"), onNode("gone")), withPod(pod("c", true, "10.1.0.3"), onNode(""))},
			at:          v4,
			wantGroups:  map[string][]string{portKey(httpPort(8080)): {"a"}},
			wantMissing: []missingNode{{"b", "gone"}, {"c", ""}},
		},
		{
			name:       "missing node with publishNotReadyAddresses: in, without zone",
			svc:        service(publishNotReady),
			pods:       []*corev1.Pod{pod("a", true, "10.1.0.1"), withPod(pod("b", true, "10.1.0.2"), onNode("gone"))},
			at:         v4,
			wantGroups: map[string][]string{portKey(httpPort(8080)): {"a", "b"}},
		},
		{
			name: "duplicate IPs in two pods are two endpoints",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", true, "10.1.0.1"), pod("b", true, "10.1.0.1")},
			at:   v4, wantGroups: map[string][]string{portKey(httpPort(8080)): {"a", "b"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			groups, missing := desiredGroups(tc.svc, tc.pods, defaultNodes, tc.at, problems{})
			got := map[string][]string{}
			for k, g := range groups {
				got[k] = []string{}
				for _, e := range g.endpoints {
					got[k] = append(got[k], e.TargetRef.Name)
				}
				slices.Sort(got[k])
			}
			if !apiequality.Semantic.DeepEqual(got, tc.wantGroups) {
				t.Errorf("groups: got %v, want %v", got, tc.wantGroups)
			}
			if !slices.Equal(missing, tc.wantMissing) {
				t.Errorf("missing: got %v, want %v", missing, tc.wantMissing)
			}
		})
	}
}

// Bad input is collected by cause: three pods missing the same named port are one problem.
func TestProblemsByCause(t *testing.T) {
	svc := service(namedTarget("web"), func(s *corev1.Service) { s.Labels[discoveryv1.LabelManagedBy] = "me" })
	pods := []*corev1.Pod{pod("a", true, "10.1.0.1"), pod("b", true, "10.1.0.2"), pod("c", true, "10.1.0.3"), pod("d", true, "not-an-ip")}
	p := reconcile(reconcileInput{service: svc, pods: pods, nodes: defaultNodes, maxEndpointsPerSlice: 100})
	var causes []string
	for c := range p.problems {
		causes = append(causes, c)
	}
	slices.Sort(causes)
	want := []string{"ip/ns/d/not-an-ip", "label/ns/web/" + discoveryv1.LabelManagedBy, "port/ns/web/http"}
	if !slices.Equal(causes, want) {
		t.Errorf("causes: got %v, want %v", causes, want)
	}
}

func TestOnceLog(t *testing.T) {
	l := newOnceLog()
	if !l.first("a") || l.first("a") || !l.first("b") {
		t.Error("a cause is new exactly once")
	}
	for i := range onceLogSize {
		l.first(string(rune(i + 1000)))
	}
	if len(l.seen) > onceLogSize {
		t.Errorf("onceLog grew to %d", len(l.seen))
	}
}

func TestEndpointKey(t *testing.T) {
	a := ep("p", "10.1.0.1", true)
	a.Addresses = []string{"10.1.0.2", "10.1.0.1"}
	b := ep("p", "10.1.0.1", false) // other state, same identity
	b.Addresses = []string{"10.1.0.1", "10.1.0.2"}
	b.NodeName = new("elsewhere")
	if endpointKey(&a) != endpointKey(&b) {
		t.Error("address order or state changed the identity")
	}
	if a.Addresses[0] != "10.1.0.2" {
		t.Error("endpointKey sorted the endpoint's own addresses")
	}
	c := a
	c.Hostname = new("h")
	d := a
	d.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "other"}
	for _, x := range []discoveryv1.Endpoint{c, d} {
		if endpointKey(&a) == endpointKey(&x) {
			t.Errorf("hostname or target did not change the identity: %s", endpointKey(&x))
		}
	}
}

func TestPortKey(t *testing.T) {
	p1 := discoveryv1.EndpointPort{Name: new("a"), Port: new(int32(1)), Protocol: new(corev1.ProtocolTCP)}
	p2 := discoveryv1.EndpointPort{Name: new("b"), Port: new(int32(2)), Protocol: new(corev1.ProtocolUDP)}
	if portKey([]discoveryv1.EndpointPort{p1, p2}) != portKey([]discoveryv1.EndpointPort{p2, p1}) {
		t.Error("order changed the key")
	}
	if portKey(nil) != portKey([]discoveryv1.EndpointPort{}) {
		t.Error("nil and empty differ")
	}
	withApp := p1
	withApp.AppProtocol = new("http")
	unnamed := p1
	unnamed.Name = new("")
	nilName := p1
	nilName.Name = nil
	keys := map[string]bool{}
	for _, p := range []discoveryv1.EndpointPort{p1, withApp, unnamed, nilName} {
		keys[portKey([]discoveryv1.EndpointPort{p})] = true
	}
	if len(keys) != 4 {
		t.Errorf("distinct ports share keys: %v", keys)
	}
}

// Orders kube-controller-manager v1.36 wrote in the differential test (test/reference).
func TestInKubernetesOrder(t *testing.T) {
	port := func(name string, n int32, proto corev1.Protocol, app ...string) discoveryv1.EndpointPort {
		p := discoveryv1.EndpointPort{Name: new(name), Port: new(n), Protocol: new(proto)}
		if len(app) > 0 {
			p.AppProtocol = new(app[0])
		}
		return p
	}
	web, dns, dnsTCP := port("web", 8080, corev1.ProtocolTCP, "http"), port("dns", 5353, corev1.ProtocolUDP), port("dns-tcp", 5354, corev1.ProtocolTCP)
	http, metrics := port("http", 8082, corev1.ProtocolTCP), port("metrics", 9100, corev1.ProtocolTCP)
	for _, tc := range []struct {
		name     string
		in, want []discoveryv1.EndpointPort
	}{
		{"none", []discoveryv1.EndpointPort{}, []discoveryv1.EndpointPort{}},
		{"one", []discoveryv1.EndpointPort{web}, []discoveryv1.EndpointPort{web}},
		{"three, in the Service's order", []discoveryv1.EndpointPort{web, dns, dnsTCP}, []discoveryv1.EndpointPort{dns, web, dnsTCP}},
		{"three, already sorted", []discoveryv1.EndpointPort{dns, web, dnsTCP}, []discoveryv1.EndpointPort{dns, web, dnsTCP}},
		{"two", []discoveryv1.EndpointPort{dns, web}, []discoveryv1.EndpointPort{dns, web}},
		{"two, the other way", []discoveryv1.EndpointPort{web, dns}, []discoveryv1.EndpointPort{dns, web}},
		{"named and numeric", []discoveryv1.EndpointPort{http, metrics}, []discoveryv1.EndpointPort{metrics, http}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := inKubernetesOrder(slices.Clone(tc.in)); !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got %s, want %s", dump(got), dump(tc.want))
			}
		})
	}
}
