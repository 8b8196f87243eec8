package endpointslice

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

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
