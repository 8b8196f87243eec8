package endpointslice

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTriggerTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // the Service's creation
	at := func(minutes int) time.Time { return t0.Add(time.Duration(minutes) * time.Minute) }
	readyAt := func(name string, minutes int) *corev1.Pod {
		p := pod(name, true, ipOf(name))
		p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(minutes))
		return p
	}
	created := func(minutes int) *corev1.Service {
		return service(func(s *corev1.Service) { s.CreationTimestamp = metav1.NewTime(at(minutes)) })
	}
	type sync struct {
		svc  *corev1.Service
		pods []*corev1.Pod
		want time.Time
	}
	for _, tc := range []struct {
		name  string
		syncs []sync
	}{
		{"first sync: the Service's creation", []sync{
			{created(0), []*corev1.Pod{readyAt("a", 5)}, at(0)},
		}},
		{"nothing new: zero", []sync{
			{created(0), []*corev1.Pod{readyAt("a", 5)}, at(0)},
			{created(0), []*corev1.Pod{readyAt("a", 5)}, time.Time{}},
		}},
		{"the earliest new transition", []sync{
			{created(0), []*corev1.Pod{readyAt("a", 5)}, at(0)},
			{created(0), []*corev1.Pod{readyAt("a", 9), readyAt("b", 7), readyAt("c", 8)}, at(7)},
		}},
		{"an older transition of an unchanged pod does not count", []sync{
			{created(0), []*corev1.Pod{readyAt("a", 5)}, at(0)},
			{created(0), []*corev1.Pod{readyAt("a", 5), readyAt("b", 9)}, at(9)},
		}},
		{"a pod without Ready condition counts for nothing", []sync{
			{created(0), nil, at(0)},
			{created(0), []*corev1.Pod{pod("a", true, "10.1.0.1")}, time.Time{}},
		}},
		{"a pod removed: zero", []sync{
			{created(0), []*corev1.Pod{readyAt("a", 5), readyAt("b", 6)}, at(0)},
			{created(0), []*corev1.Pod{readyAt("a", 5)}, time.Time{}},
		}},
		{"a pod gone and back with the same state counts again", []sync{
			{created(0), []*corev1.Pod{readyAt("a", 5)}, at(0)},
			{created(0), nil, time.Time{}},
			{created(0), []*corev1.Pod{readyAt("a", 5)}, at(5)},
		}},
		{"the Service recreated", []sync{
			{created(0), []*corev1.Pod{readyAt("a", 5)}, at(0)},
			{created(20), []*corev1.Pod{readyAt("a", 5)}, at(20)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt := newTriggerTimes()
			for i, s := range tc.syncs {
				if got := tt.Compute(s.svc, s.pods); !got.Equal(s.want) {
					t.Errorf("sync %d: got %v, want %v", i, got, s.want)
				}
			}
		})
	}

	tt := newTriggerTimes()
	tt.Compute(created(0), nil)
	tt.Forget(svcWeb)
	if got := tt.Compute(created(0), nil); !got.Equal(at(0)) {
		t.Errorf("after Forget the next sync is a first sync again: got %v", got)
	}
}

func TestPodEndpointChanged(t *testing.T) {
	base := pod("a", true, "10.1.0.1")
	for _, tc := range []struct {
		name string
		mod  func(*corev1.Pod)
		want bool
	}{
		{"nothing", func(*corev1.Pod) {}, false},
		{"annotation", func(p *corev1.Pod) { p.Annotations = map[string]string{"x": "y"} }, false},
		{"labels only (handled apart)", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "other"} }, false},
		{"readiness", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		{"deletion", terminating, true},
		{"IP", func(p *corev1.Pod) { p.Status.PodIPs[0].IP = "10.1.0.2" }, true},
		{"second IP", func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::1"}) }, true},
		{"node", onNode("node-b"), true},
		{"hostname", func(p *corev1.Pod) { p.Spec.Hostname = "h" }, true},
		{"subdomain", func(p *corev1.Pod) { p.Spec.Subdomain = "web" }, true},
		{"finished", phase(corev1.PodSucceeded), true},
		{"pending to running", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, false},
	} {
		p := base.DeepCopy()
		tc.mod(p)
		if got := podEndpointChanged(base, p); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
