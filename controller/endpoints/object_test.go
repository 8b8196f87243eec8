package endpoints

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEndpointsLabels(t *testing.T) {
	tests := []struct {
		name string
		svc  *corev1.Service
		want map[string]string
	}{
		{"plain", service(), map[string]string{LabelManagedBy: ControllerName}},
		{"service labels copied", service(withServiceLabels(map[string]string{"team": "a", "tier": "web"})),
			map[string]string{"team": "a", "tier": "web", LabelManagedBy: ControllerName}},
		{"headless", service(headless), map[string]string{corev1.IsHeadlessService: "", LabelManagedBy: ControllerName}},
		{"no ClusterIP counts as headless", service(withClusterIP("")), map[string]string{corev1.IsHeadlessService: "", LabelManagedBy: ControllerName}},
		{"reserved keys on the service are overridden", service(withServiceLabels(map[string]string{corev1.IsHeadlessService: "yes", LabelManagedBy: "me"})),
			map[string]string{LabelManagedBy: ControllerName}},
	}
	for _, tt := range tests {
		before := maps.Clone(tt.svc.Labels)
		if got := endpointsLabels(tt.svc); !maps.Equal(got, tt.want) {
			t.Errorf("%s: labels = %v, want %v", tt.name, got, tt.want)
		}
		if !maps.Equal(tt.svc.Labels, before) {
			t.Errorf("%s: service labels modified", tt.name)
		}
	}
}

func TestLabelsUpToDate(t *testing.T) {
	svc := service(withServiceLabels(map[string]string{"team": "a"}))
	tests := []struct {
		name   string
		stored map[string]string
		svc    *corev1.Service
		ok     bool
	}{
		{"exact", map[string]string{"team": "a", LabelManagedBy: ControllerName}, svc, true},
		{"headless marker is not compared", map[string]string{"team": "a", LabelManagedBy: ControllerName, corev1.IsHeadlessService: ""}, svc, true},
		{"managed-by missing", map[string]string{"team": "a"}, svc, false},
		{"managed by someone else", map[string]string{"team": "a", LabelManagedBy: "other"}, svc, false},
		{"label added on the Endpoints", map[string]string{"team": "a", "x": "y", LabelManagedBy: ControllerName}, svc, false},
		{"service label missing", map[string]string{LabelManagedBy: ControllerName}, svc, false},
		{"service label value changed", map[string]string{"team": "b", LabelManagedBy: ControllerName}, svc, false},
		{"service carrying reserved keys", map[string]string{LabelManagedBy: ControllerName},
			service(withServiceLabels(map[string]string{LabelManagedBy: "x", corev1.IsHeadlessService: ""})), true},
		{"nil and empty", map[string]string{LabelManagedBy: ControllerName}, service(withServiceLabels(map[string]string{})), true},
	}
	for _, tt := range tests {
		if got := labelsUpToDate(tt.stored, tt.svc); got != tt.ok {
			t.Errorf("%s: labelsUpToDate = %v, want %v", tt.name, got, tt.ok)
		}
	}
}

// stored turns a planned object into what the cache would hold after the write.
func stored(ep *corev1.Endpoints, rv string) *corev1.Endpoints {
	out := ep.DeepCopy()
	out.ResourceVersion = rv
	out.UID = "ep-uid"
	return out
}

func TestPlan(t *testing.T) {
	svc := service(withServiceLabels(map[string]string{"team": "a"}))
	ready := []corev1.EndpointSubset{{Addresses: addrs(addr("10.0.0.1", "a"), addr("10.0.0.2", "b")), Ports: eports(eport("http", 8080))}}
	goodLabels := map[string]string{"team": "a", LabelManagedBy: ControllerName}
	existing := func(mutate func(*corev1.Endpoints)) *corev1.Endpoints {
		ep := &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, ResourceVersion: "7", UID: "ep-uid", Labels: maps.Clone(goodLabels),
				Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: "2020-01-01T00:00:00Z", "note": "keep me"}},
			Subsets: ready,
		}
		ep = ep.DeepCopy()
		if mutate != nil {
			mutate(ep)
		}
		return ep
	}
	later := t0.Add(time.Minute)

	tests := []struct {
		name    string
		svc     *corev1.Service
		current *corev1.Endpoints
		subsets []corev1.EndpointSubset
		trigger time.Time
		want    *corev1.Endpoints // nil: no write
	}{
		{
			name: "create", svc: svc, subsets: ready, trigger: t0,
			want: &corev1.Endpoints{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, Labels: goodLabels,
					Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: "2025-01-02T03:04:05.0000006Z"}},
				Subsets: ready,
			},
		},
		{
			name: "create with nothing to list and no trigger", svc: service(headless), subsets: []corev1.EndpointSubset{},
			want: &corev1.Endpoints{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, Labels: map[string]string{corev1.IsHeadlessService: "", LabelManagedBy: ControllerName}},
				Subsets:    []corev1.EndpointSubset{},
			},
		},
		{name: "up to date", svc: svc, current: existing(nil), subsets: ready},
		{name: "a new trigger time alone writes nothing", svc: svc, current: existing(nil), subsets: ready, trigger: later},
		{name: "other order, other packing, target resourceVersions: still up to date", svc: svc, subsets: ready,
			current: existing(func(ep *corev1.Endpoints) {
				b, a := addr("10.0.0.2", "b"), addr("10.0.0.1", "a")
				b.TargetRef.ResourceVersion = "99"
				ep.Subsets = []corev1.EndpointSubset{{Addresses: addrs(b), Ports: eports(eport("http", 8080))}, {Addresses: addrs(a), Ports: eports(eport("http", 8080))}}
			})},
		{name: "nothing stored, nothing wanted: up to date", svc: svc, subsets: []corev1.EndpointSubset{},
			current: existing(func(ep *corev1.Endpoints) { ep.Subsets = nil })},
		{
			name: "subsets changed: update keeps unrelated annotations and refreshes the trigger", svc: svc, current: existing(nil), trigger: later,
			subsets: []corev1.EndpointSubset{{NotReadyAddresses: addrs(addr("10.0.0.1", "a")), Addresses: addrs(addr("10.0.0.2", "b")), Ports: eports(eport("http", 8080))}},
			want: existing(func(ep *corev1.Endpoints) {
				ep.Annotations[corev1.EndpointsLastChangeTriggerTime] = "2025-01-02T03:05:05.0000006Z"
				ep.Subsets = []corev1.EndpointSubset{{NotReadyAddresses: addrs(addr("10.0.0.1", "a")), Addresses: addrs(addr("10.0.0.2", "b")), Ports: eports(eport("http", 8080))}}
			}),
		},
		{
			name: "no trigger time removes the annotation", svc: svc, current: existing(nil), subsets: []corev1.EndpointSubset{},
			want: existing(func(ep *corev1.Endpoints) {
				delete(ep.Annotations, corev1.EndpointsLastChangeTriggerTime)
				ep.Subsets = []corev1.EndpointSubset{}
			}),
		},
		{
			name: "a label added on the Endpoints is dropped", svc: svc, subsets: ready,
			current: existing(func(ep *corev1.Endpoints) { ep.Labels["mine"] = "x" }),
			want: existing(func(ep *corev1.Endpoints) {
				delete(ep.Annotations, corev1.EndpointsLastChangeTriggerTime)
			}),
		},
		{
			name: "missing managed-by is added", svc: svc, subsets: ready,
			current: existing(func(ep *corev1.Endpoints) { delete(ep.Labels, LabelManagedBy) }),
			want:    existing(func(ep *corev1.Endpoints) { delete(ep.Annotations, corev1.EndpointsLastChangeTriggerTime) }),
		},
		{
			name: "service labels changed", svc: service(withServiceLabels(map[string]string{"team": "b"})), subsets: ready, current: existing(nil),
			want: existing(func(ep *corev1.Endpoints) {
				ep.Labels["team"] = "b"
				delete(ep.Annotations, corev1.EndpointsLastChangeTriggerTime)
			}),
		},
		{
			name: "a stale over-capacity annotation is removed", svc: svc, subsets: ready,
			current: existing(func(ep *corev1.Endpoints) { ep.Annotations[corev1.EndpointsOverCapacity] = "warning" }),
			want:    existing(func(ep *corev1.Endpoints) { delete(ep.Annotations, corev1.EndpointsLastChangeTriggerTime) }),
		},
		{
			name: "annotations emptied become nil", svc: svc, subsets: ready,
			current: existing(func(ep *corev1.Endpoints) {
				ep.Annotations = map[string]string{corev1.EndpointsOverCapacity: "truncated"}
			}),
			want: existing(func(ep *corev1.Endpoints) { ep.Annotations = nil }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before string
			if tt.current != nil {
				before = dump(tt.current)
			}
			got := plan(tt.svc, tt.current, tt.subsets, tt.trigger)
			if tt.want == nil {
				if got != nil {
					t.Fatalf("wrote %s, want no write", dump(got))
				}
			} else if dump(got) != dump(tt.want) {
				t.Fatalf("wrote\n%s\nwant\n%s", dump(got), dump(tt.want))
			}
			if tt.current != nil && dump(tt.current) != before {
				t.Error("current was modified")
			}
			// What was written is up to date on the next sync, whatever the trigger.
			if got != nil {
				if again := plan(tt.svc, stored(got, "8"), tt.subsets, later.Add(time.Hour)); again != nil {
					t.Errorf("second plan writes again:\n%s", dump(again))
				}
			}
		})
	}
}

// TestPlanOverCapacity runs the whole computation for 1000+ pods across subsets.
func TestPlanOverCapacity(t *testing.T) {
	// Two ports, one resolved by every pod, one only by the "big" ones: two subsets.
	svc := service(withPorts(tcpPort("http", 80, intstrName("http")), tcpPort("admin", 81, intstrName("admin"))))
	var pods []*corev1.Pod
	add := func(n int, big, ready bool) {
		for range n {
			i := len(pods)
			p := pod(fmt.Sprintf("p%04d", i), fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255))
			if big {
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "admin", ContainerPort: 9000, Protocol: corev1.ProtocolTCP})
			}
			if !ready {
				notReady(p)
			}
			pods = append(pods, p)
		}
	}
	add(200, true, true)
	add(300, false, true)
	add(200, true, false)
	// Addresses are counted per subset: admin lists 200 ready + 200 not ready, http 500 + 200,
	// 1100 in all. Ready ones fit (700), leaving room for 300 of the 400 not ready, shared
	// half and half.
	want := computeSubsets(svc, pods)
	got := plan(svc, nil, want.Subsets, time.Time{})
	if got.Annotations[corev1.EndpointsOverCapacity] != overCapacityTruncated {
		t.Fatalf("annotations = %v, want over-capacity=truncated", got.Annotations)
	}
	shapes := map[string]string{}
	for _, s := range got.Subsets {
		shapes[s.Ports[0].Name] = fmt.Sprintf("%d+%d", len(s.Addresses), len(s.NotReadyAddresses))
	}
	if want := map[string]string{"admin": "200+150", "http": "500+150"}; !maps.Equal(shapes, want) {
		t.Errorf("kept %v, want %v", shapes, want)
	}
	// Stable: the truncated object needs no rewrite on the next sync…
	if again := plan(svc, stored(got, "2"), want.Subsets, t0); again != nil {
		t.Error("a truncated object is rewritten although nothing changed")
	}
	// …unless the annotation is wrong,
	wrong := stored(got, "2")
	wrong.Annotations[corev1.EndpointsOverCapacity] = "warning"
	if again := plan(svc, wrong, want.Subsets, time.Time{}); again == nil || again.Annotations[corev1.EndpointsOverCapacity] != overCapacityTruncated {
		t.Error("a wrong over-capacity value is not corrected")
	}
	// …and once the pods fit again, the annotation goes.
	small := computeSubsets(svc, pods[:600]) // 200+100 and 500+100
	fit := plan(svc, stored(got, "2"), small.Subsets, time.Time{})
	if fit == nil {
		t.Fatal("no write after shrinking")
	}
	if _, ok := fit.Annotations[corev1.EndpointsOverCapacity]; ok {
		t.Error("over-capacity annotation kept at 900 addresses")
	}
}
