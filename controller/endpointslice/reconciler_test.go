package endpointslice

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ready pods a, b, c, … with IPs 10.1.0.1, 10.1.0.2, …, so that their order is their name's.
func readyPods(names ...string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, n := range names {
		out = append(out, pod(n, true, ipOf(n)))
	}
	return out
}

func ipOf(name string) string { return fmt.Sprintf("10.1.0.%d", name[0]-'a'+1) }

// epOf is the endpoint of readyPods(name).
func epOf(name string) discoveryv1.Endpoint { return ep(name, ipOf(name), true) }

func eps(names ...string) []discoveryv1.Endpoint {
	var out []discoveryv1.Endpoint
	for _, n := range names {
		out = append(out, epOf(n))
	}
	return out
}

func v4Slice(name string, names ...string) *discoveryv1.EndpointSlice {
	return slice(name, v4, httpPort(8080), eps(names...)...)
}

func placeholder(name string) *discoveryv1.EndpointSlice {
	return slice(name, v4, []discoveryv1.EndpointPort{})
}

func hinted(e discoveryv1.Endpoint, zone string) discoveryv1.Endpoint {
	e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}}
	return e
}

func TestReconcile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		svc      *corev1.Service
		pods     []*corev1.Pod
		existing []*discoveryv1.EndpointSlice
		limit    int // default 100

		wantCreate, wantUpdate []string // summaries
		wantDelete             []string // names
		wantMissing            []missingNode
		// notConverging: the plan is not expected to be the last one (creates are held back).
		notConverging bool
	}{
		{
			name:       "new Service: one slice",
			svc:        service(),
			pods:       readyPods("a", "b"),
			wantCreate: []string{"+new IPv4 [http:8080] a b"},
		},
		{
			name:  "more pods than the limit: split into full slices",
			svc:   service(),
			pods:  readyPods("a", "b", "c", "d", "e", "f", "g"),
			limit: 3,
			wantCreate: []string{
				"+new IPv4 [http:8080] a b c", "+new IPv4 [http:8080] d e f", "+new IPv4 [http:8080] g",
			},
		},
		{
			name:     "nothing changed: nothing written",
			svc:      service(),
			pods:     readyPods("a", "b"),
			existing: []*discoveryv1.EndpointSlice{v4Slice("s1", "a", "b")},
		},
		{
			name:       "a pod gone: its slice is updated",
			svc:        service(),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a", "b"), v4Slice("s2", "c")},
			wantUpdate: []string{"s1 IPv4 [http:8080] a"},
			wantDelete: []string{"s2"},
		},
		{
			name:       "every pod gone: the last slice becomes the placeholder",
			svc:        service(),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a")},
			wantUpdate: []string{"s1 IPv4 [] "},
		},
		{
			name:     "placeholder already there: kept",
			svc:      service(),
			existing: []*discoveryv1.EndpointSlice{placeholder("ph")},
		},
		{
			name: "placeholder with outdated labels: rewritten",
			svc:  service(),
			existing: []*discoveryv1.EndpointSlice{withSlice(placeholder("ph"), func(s *discoveryv1.EndpointSlice) {
				s.Labels["team"] = "b"
			})},
			wantUpdate: []string{"ph IPv4 [] "},
		},
		{
			name:       "two placeholders: one is reused, the other deleted",
			svc:        service(),
			existing:   []*discoveryv1.EndpointSlice{placeholder("ph1"), placeholder("ph2")},
			wantUpdate: []string{"ph1 IPv4 [] "},
			wantDelete: []string{"ph2"},
		},
		{
			name:       "first pods: the placeholder is reused",
			svc:        service(),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{placeholder("ph")},
			wantUpdate: []string{"ph IPv4 [http:8080] a"},
		},
		{
			name:       "readiness changed: slice updated",
			svc:        service(),
			pods:       []*corev1.Pod{pod("a", true, ipOf("a")), pod("b", false, ipOf("b"))},
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a", "b"), v4Slice("s2", "c")},
			wantUpdate: []string{"s1 IPv4 [http:8080] a b!"},
			wantDelete: []string{"s2"},
		},
		{
			name:       "node changed: slice updated",
			svc:        service(),
			pods:       []*corev1.Pod{withPod(pod("a", true, ipOf("a")), onNode("node-b"))},
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a")},
			wantUpdate: []string{"s1 IPv4 [http:8080] a"},
		},
		{
			name:  "new endpoints fill the slices written anyway, fullest first",
			svc:   service(),
			limit: 4,
			pods:  append(readyPods("a", "b", "e", "f", "g"), pod("d", false, ipOf("d"))),
			existing: []*discoveryv1.EndpointSlice{
				v4Slice("s1", "a", "b", "c"), // c is gone: 2 left
				v4Slice("s2", "d"),           // d is not ready any more: 1
			},
			wantUpdate: []string{"s1 IPv4 [http:8080] a b e f", "s2 IPv4 [http:8080] d! g"},
		},
		{
			name:  "leftovers go into the unchanged slice they fill best",
			svc:   service(),
			limit: 5,
			pods:  readyPods("a", "b", "c", "d", "e", "f", "g", "h", "i"),
			existing: []*discoveryv1.EndpointSlice{
				v4Slice("s1", "a", "b", "c"), v4Slice("s2", "d"), v4Slice("s3", "e", "f", "g", "h"),
			},
			wantUpdate: []string{"s3 IPv4 [http:8080] e f g h i"},
		},
		{
			name:       "leftovers that fit nowhere: a new slice",
			svc:        service(),
			limit:      3,
			pods:       readyPods("a", "b", "c", "d"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a", "b", "c")},
			wantCreate: []string{"+new IPv4 [http:8080] d"},
		},
		{
			name:       "as many leftovers as the limit: a new slice, even with room elsewhere",
			svc:        service(),
			limit:      3,
			pods:       readyPods("a", "b", "c", "d"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a")},
			wantCreate: []string{"+new IPv4 [http:8080] b c d"},
		},
		{
			name:       "an overfull slice (the limit was lowered) is left alone",
			svc:        service(),
			limit:      2,
			pods:       readyPods("a", "b", "c", "d"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a", "b", "c")},
			wantCreate: []string{"+new IPv4 [http:8080] d"},
		},
		{
			name:       "Service labels changed: slices updated for them alone",
			svc:        service(func(s *corev1.Service) { s.Labels["team"] = "b" }),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a")},
			wantUpdate: []string{"s1 IPv4 [http:8080] a"},
		},
		{
			name: "a user's change to a reserved label is not worth a write",
			svc:  service(),
			pods: readyPods("a"),
			existing: []*discoveryv1.EndpointSlice{withSlice(v4Slice("s1", "a"), func(s *discoveryv1.EndpointSlice) {
				s.Labels[corev1.IsHeadlessService] = ""
			})},
		},
		{
			name:       "target port changed: the old port group's slice is reused",
			svc:        service(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort.IntVal = 9090 }),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a")},
			wantUpdate: []string{"s1 IPv4 [http:9090] a"},
		},
		{
			name: "a named port resolving differently per pod: one slice per port set",
			svc:  service(namedTarget("web")),
			pods: []*corev1.Pod{
				withPod(pod("a", true, ipOf("a")), containerPort("web", 9000)),
				withPod(pod("b", true, ipOf("b")), containerPort("web", 9001)),
				withPod(pod("c", true, ipOf("c")), containerPort("web", 9000)),
			},
			wantCreate: []string{"+new IPv4 [http:9000] a c", "+new IPv4 [http:9001] b"},
		},
		{
			name:       "dual stack: slices per family",
			svc:        service(dualStack),
			pods:       []*corev1.Pod{pod("a", true, ipOf("a"), "fd00::1"), pod("b", true, ipOf("b"))},
			wantCreate: []string{"+new IPv4 [http:8080] a b", "+new IPv6 [http:8080] a"},
		},
		{
			name:       "dual-stack Service, single-stack pods: a placeholder for the other family",
			svc:        service(dualStack),
			pods:       readyPods("a"),
			wantCreate: []string{"+new IPv4 [http:8080] a", "+new IPv6 [] "},
		},
		{
			name:       "single-stack Service, IPv6-only pods: a placeholder",
			svc:        service(),
			pods:       []*corev1.Pod{pod("a", true, "fd00::1")},
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a")},
			wantUpdate: []string{"s1 IPv4 [] "},
		},
		{
			name: "family dropped from the Service: its slices deleted",
			svc:  service(),
			pods: []*corev1.Pod{pod("a", true, ipOf("a"), "fd00::1")},
			existing: []*discoveryv1.EndpointSlice{
				v4Slice("s4", "a"),
				slice("s6", v6, httpPort(8080), func() discoveryv1.Endpoint { e := epOf("a"); e.Addresses = []string{"fd00::1"}; return e }()),
			},
			wantDelete: []string{"s6"},
		},
		{
			name: "legacy FQDN and IP slices deleted",
			svc:  service(),
			pods: readyPods("a"),
			existing: []*discoveryv1.EndpointSlice{
				v4Slice("s4", "a"), slice("fqdn", discoveryv1.AddressTypeFQDN, httpPort(8080)), slice("ip", "IP", httpPort(8080)),
			},
			wantDelete: []string{"fqdn", "ip"},
		},
		{
			name: "slice of an older Service of the same name: deleted, never reused",
			svc:  service(),
			pods: readyPods("a"),
			existing: []*discoveryv1.EndpointSlice{withSlice(v4Slice("old", "a"), func(s *discoveryv1.EndpointSlice) {
				s.OwnerReferences[0].UID = "previous-uid"
			})},
			wantCreate: []string{"+new IPv4 [http:8080] a"},
			wantDelete: []string{"old"},
		},
		{
			name:          "Service being deleted: no creates, the rest goes on",
			svc:           service(func(s *corev1.Service) { s.DeletionTimestamp = &metav1.Time{Time: time.Now()} }),
			limit:         2,
			pods:          readyPods("a", "c", "d"),
			existing:      []*discoveryv1.EndpointSlice{v4Slice("s1", "a", "b")},
			wantUpdate:    []string{"s1 IPv4 [http:8080] a c"},
			notConverging: true,
		},
		{
			name:       "an endpoint found in two slices stays in the first",
			svc:        service(),
			pods:       readyPods("a", "b"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a"), v4Slice("s2", "a", "b")},
			wantUpdate: []string{"s2 IPv4 [http:8080] b"},
		},
		{
			name:       "an endpoint twice in one slice is kept once",
			svc:        service(),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a", "a")},
			wantUpdate: []string{"s1 IPv4 [http:8080] a"},
		},
		{
			name:        "pod on a missing Node: left out, reported",
			svc:         service(),
			pods:        append(readyPods("a"), withPod(pod("b", true, ipOf("b")), onNode("gone"))),
			wantCreate:  []string{"+new IPv4 [http:8080] a"},
			wantMissing: []missingNode{{"b", "gone"}},
		},
		{
			name:       "headless Service without ports: endpoints without ports",
			svc:        service(headless, func(s *corev1.Service) { s.Spec.Ports = nil }),
			pods:       readyPods("a"),
			wantCreate: []string{"+new IPv4 [] a"},
		},
		{
			name:       "headless Service without ports: the placeholder takes the first endpoints",
			svc:        service(headless, func(s *corev1.Service) { s.Spec.Ports = nil }),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{withSlice(placeholder("ph"), func(s *discoveryv1.EndpointSlice) { s.Labels[corev1.IsHeadlessService] = "" })},
			wantUpdate: []string{"ph IPv4 [] a"},
		},
		{
			name:       "terminating pod: in, not ready",
			svc:        service(),
			pods:       []*corev1.Pod{withPod(pod("a", true, ipOf("a")), terminating)},
			wantCreate: []string{"+new IPv4 [http:8080] a!"},
		},
		{
			name:       "PreferClose: zone hints on ready endpoints with a zone",
			svc:        service(trafficDistribution(corev1.ServiceTrafficDistributionPreferClose)),
			pods:       []*corev1.Pod{pod("a", true, ipOf("a")), pod("b", false, ipOf("b")), withPod(pod("c", true, ipOf("c")), onNode("node-b")), withPod(pod("d", true, ipOf("d")), onNode("node-c"))},
			wantCreate: []string{"+new IPv4 [http:8080] a[z=zone-a] b! c[z=zone-b] d"},
		},
		{
			name:       "PreferSameZone: zone hints",
			svc:        service(trafficDistribution(corev1.ServiceTrafficDistributionPreferSameZone)),
			pods:       readyPods("a"),
			wantCreate: []string{"+new IPv4 [http:8080] a[z=zone-a]"},
		},
		{
			name:       "PreferSameNode: zone and node hints",
			svc:        service(trafficDistribution(corev1.ServiceTrafficDistributionPreferSameNode)),
			pods:       []*corev1.Pod{pod("a", true, ipOf("a")), withPod(pod("d", true, ipOf("d")), onNode("node-c"))},
			wantCreate: []string{"+new IPv4 [http:8080] a[z=zone-a,n=node-a] d[n=node-c]"},
		},
		{
			name:       "hints missing on an unchanged slice: added",
			svc:        service(trafficDistribution(corev1.ServiceTrafficDistributionPreferClose)),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{v4Slice("s1", "a")},
			wantUpdate: []string{"s1 IPv4 [http:8080] a[z=zone-a]"},
		},
		{
			name:       "hints on an unchanged slice no longer asked for: removed",
			svc:        service(),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{slice("s1", v4, httpPort(8080), hinted(epOf("a"), "zone-a"))},
			wantUpdate: []string{"s1 IPv4 [http:8080] a"},
		},
		{
			name:     "right hints: nothing written",
			svc:      service(trafficDistribution(corev1.ServiceTrafficDistributionPreferClose)),
			pods:     readyPods("a"),
			existing: []*discoveryv1.EndpointSlice{slice("s1", v4, httpPort(8080), hinted(epOf("a"), "zone-a"))},
		},
		{
			name: "topology-mode Auto (not implemented): no hints, even with trafficDistribution",
			svc: service(trafficDistribution(corev1.ServiceTrafficDistributionPreferClose), func(s *corev1.Service) {
				s.Annotations = map[string]string{corev1.AnnotationTopologyMode: "Auto"}
			}),
			pods:       readyPods("a"),
			existing:   []*discoveryv1.EndpointSlice{slice("s1", v4, httpPort(8080), hinted(epOf("a"), "zone-a"))},
			wantUpdate: []string{"s1 IPv4 [http:8080] a"},
		},
		{
			name:       "unknown trafficDistribution: no hints",
			svc:        service(trafficDistribution("PreferMars")),
			pods:       readyPods("a"),
			wantCreate: []string{"+new IPv4 [http:8080] a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit := tc.limit
			if limit == 0 {
				limit = 100
			}
			in := reconcileInput{service: tc.svc, pods: tc.pods, slices: tc.existing, nodes: defaultNodes, maxEndpointsPerSlice: limit}
			before := dump(tc.existing)
			p := reconcile(in)
			if after := dump(tc.existing); after != before {
				t.Fatalf("reconcile modified its input:\nbefore %s\nafter  %s", before, after)
			}
			check := func(what string, got, want []string) {
				t.Helper()
				if want == nil {
					want = []string{}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s:\n got  %q\n want %q", what, got, want)
				}
			}
			check("create", summaries(p.create), tc.wantCreate)
			check("update", summaries(p.update), tc.wantUpdate)
			check("delete", names(p.delete), tc.wantDelete)
			if !slices.Equal(p.missingNodes, tc.wantMissing) {
				t.Errorf("missing nodes: got %v, want %v", p.missingNodes, tc.wantMissing)
			}
			for _, s := range append(slices.Clone(p.create), p.update...) {
				if len(s.Endpoints) > limit && !slices.ContainsFunc(tc.existing, func(e *discoveryv1.EndpointSlice) bool { return e.Name == s.Name }) {
					t.Errorf("slice %s has %d endpoints, limit %d", s.Name, len(s.Endpoints), limit)
				}
			}
			if tc.notConverging {
				return
			}
			// Written as planned, the slices are what the pods ask for: the next sync writes nothing.
			store := newFakeStore(t, tc.existing)
			store.apply(p)
			in.slices = store.list()
			if again := reconcile(in); !again.empty() {
				t.Errorf("second reconcile is not empty: create %q update %q delete %q",
					summaries(again.create), summaries(again.update), names(again.delete))
			}
		})
	}
}

// TestReconcileObjects checks whole objects, metadata included.
func TestReconcileObjects(t *testing.T) {
	trigger := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	wantTrigger := "2026-03-04T05:06:07.000000008Z"
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "svc-uid", Controller: new(true), BlockOwnerDeletion: new(true)}}
	for _, tc := range []struct {
		name       string
		svc        *corev1.Service
		pods       []*corev1.Pod
		existing   []*discoveryv1.EndpointSlice
		trigger    time.Time
		wantCreate []*discoveryv1.EndpointSlice
		wantUpdate []*discoveryv1.EndpointSlice
	}{
		{
			name: "new slice: name prefix, owner, labels from the Service minus reserved ones, trigger time",
			svc: service(func(s *corev1.Service) {
				s.Labels = map[string]string{"team": "a", discoveryv1.LabelServiceName: "evil", discoveryv1.LabelManagedBy: "evil", corev1.IsHeadlessService: "x"}
			}),
			pods:    readyPods("a"),
			trigger: trigger,
			wantCreate: []*discoveryv1.EndpointSlice{{
				ObjectMeta: metav1.ObjectMeta{
					GenerateName: "web-", Namespace: "ns", OwnerReferences: owner,
					Labels:      map[string]string{"team": "a", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ControllerName},
					Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: wantTrigger},
				},
				AddressType: v4, Ports: httpPort(8080), Endpoints: eps("a"),
			}},
		},
		{
			name:    "headless placeholder",
			svc:     service(headless, func(s *corev1.Service) { s.Labels = nil }),
			trigger: trigger,
			wantCreate: []*discoveryv1.EndpointSlice{{
				ObjectMeta: metav1.ObjectMeta{
					GenerateName: "web-", Namespace: "ns", OwnerReferences: owner,
					Labels:      map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ControllerName, corev1.IsHeadlessService: ""},
					Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: wantTrigger},
				},
				AddressType: v4, Ports: []discoveryv1.EndpointPort{}, Endpoints: []discoveryv1.Endpoint{},
			}},
		},
		{
			name: "update: other annotations kept, stale trigger time removed",
			svc:  service(),
			pods: readyPods("a"),
			existing: []*discoveryv1.EndpointSlice{withSlice(v4Slice("s1", "a", "b"), func(s *discoveryv1.EndpointSlice) {
				s.Annotations = map[string]string{"keep": "me", corev1.EndpointsLastChangeTriggerTime: wantTrigger}
			})},
			wantUpdate: []*discoveryv1.EndpointSlice{withSlice(v4Slice("s1", "a"), func(s *discoveryv1.EndpointSlice) {
				s.Annotations = map[string]string{"keep": "me"}
			})},
		},
		{
			// The order kube-controller-manager v1.36 wrote these very ports in, in the
			// differential test (test/reference): not the Service's.
			name: "several ports: listed in Kubernetes' order",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP, AppProtocol: new("http")},
					{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(5354), Protocol: corev1.ProtocolTCP},
				}
			}),
			pods: readyPods("a"),
			wantCreate: []*discoveryv1.EndpointSlice{{
				ObjectMeta: metav1.ObjectMeta{
					GenerateName: "web-", Namespace: "ns", OwnerReferences: owner,
					Labels: map[string]string{"team": "a", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ControllerName},
				},
				AddressType: v4,
				Ports: []discoveryv1.EndpointPort{
					{Name: new("dns"), Port: new(int32(5353)), Protocol: new(corev1.ProtocolUDP)},
					{Name: new("web"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP), AppProtocol: new("http")},
					{Name: new("dns-tcp"), Port: new(int32(5354)), Protocol: new(corev1.ProtocolTCP)},
				},
				Endpoints: eps("a"),
			}},
		},
		{
			name:    "a create turned into an update keeps the reused slice's name and resourceVersion",
			svc:     service(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort.IntVal = 9090 }),
			pods:    readyPods("a"),
			trigger: trigger,
			existing: []*discoveryv1.EndpointSlice{withSlice(v4Slice("s1", "a"), func(s *discoveryv1.EndpointSlice) {
				s.ResourceVersion = "42"
			})},
			wantUpdate: []*discoveryv1.EndpointSlice{{
				ObjectMeta: metav1.ObjectMeta{
					Name: "s1", ResourceVersion: "42", GenerateName: "web-", Namespace: "ns", OwnerReferences: owner,
					Labels:      map[string]string{"team": "a", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ControllerName},
					Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: wantTrigger},
				},
				AddressType: v4, Ports: httpPort(9090), Endpoints: eps("a"),
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := reconcile(reconcileInput{service: tc.svc, pods: tc.pods, slices: tc.existing, nodes: defaultNodes,
				maxEndpointsPerSlice: 100, triggerTime: tc.trigger})
			if !apiequality.Semantic.DeepEqual(p.create, tc.wantCreate) {
				t.Errorf("create:\n got  %s\n want %s", dump(p.create), dump(tc.wantCreate))
			}
			if !apiequality.Semantic.DeepEqual(p.update, tc.wantUpdate) {
				t.Errorf("update:\n got  %s\n want %s", dump(p.update), dump(tc.wantUpdate))
			}
		})
	}
}

// A big Service: every pod lands in exactly one slice, slices are full but the last, and a
// second pass writes nothing; then one pod changing rewrites one slice.
func TestReconcileLargeService(t *testing.T) {
	const n = 10000
	svc := service()
	var pods []*corev1.Pod
	for i := range n {
		pods = append(pods, pod(fmt.Sprintf("p%05d", i), true, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)))
	}
	in := reconcileInput{service: svc, pods: pods, nodes: defaultNodes, maxEndpointsPerSlice: 100}
	p := reconcile(in)
	if len(p.create) != n/100 || len(p.update)+len(p.delete) != 0 {
		t.Fatalf("got %d creates, %d updates, %d deletes", len(p.create), len(p.update), len(p.delete))
	}
	seen := map[string]int{}
	for _, s := range p.create {
		if len(s.Endpoints) != 100 {
			t.Errorf("a slice has %d endpoints", len(s.Endpoints))
		}
		for _, e := range s.Endpoints {
			seen[e.TargetRef.Name]++
		}
	}
	for _, pd := range pods {
		if seen[pd.Name] != 1 {
			t.Fatalf("pod %s is in %d slices", pd.Name, seen[pd.Name])
		}
	}
	if p.stats.endpoints != n || p.stats.slices != n/100 || p.stats.desiredSlices != n/100 || p.stats.added != n {
		t.Errorf("stats: %+v", p.stats)
	}

	store := newFakeStore(t, nil)
	store.apply(p)
	in.slices = store.list()
	if again := reconcile(in); !again.empty() {
		t.Fatalf("second pass writes %d/%d/%d", len(again.create), len(again.update), len(again.delete))
	}
	pods[1234] = pod(pods[1234].Name, false, pods[1234].Status.PodIPs[0].IP)
	p = reconcile(in)
	if len(p.create) != 0 || len(p.update) != 1 || len(p.delete) != 0 {
		t.Fatalf("one pod changed: %d creates, %d updates, %d deletes", len(p.create), len(p.update), len(p.delete))
	}
}
