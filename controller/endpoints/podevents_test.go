package endpoints

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestServicesToSync(t *testing.T) {
	sel := func(name string, selector map[string]string) *corev1.Service {
		return service(func(s *corev1.Service) { s.Name, s.Spec.Selector = name, selector })
	}
	services := []*corev1.Service{
		sel("web", map[string]string{"app": "web"}),
		sel("web-canary", map[string]string{"app": "web", "track": "canary"}),
		sel("api", map[string]string{"app": "api"}),
		sel("all", map[string]string{}),                  // selects every pod
		sel("manual", nil),                               // selects none
		sel("external", map[string]string{"app": "web"}), // its type is checked at sync, not here
	}
	services[5].Spec.Type = corev1.ServiceTypeExternalName

	base := func() *corev1.Pod { return pod("p", "10.1.0.1") }
	next := func(opts ...podOpt) *corev1.Pod {
		p := with(base(), opts...)
		p.ResourceVersion = "2"
		return p
	}
	canary := podLabels(map[string]string{"app": "web", "track": "canary"})
	api := podLabels(map[string]string{"app": "api"})
	tests := []struct {
		name     string
		old, cur *corev1.Pod
		want     []string
	}{
		{"created", nil, base(), []string{"ns/all", "ns/external", "ns/web"}},
		{"deleted", base(), nil, []string{"ns/all", "ns/external", "ns/web"}},
		{"deleted canary", with(base(), canary), nil, []string{"ns/all", "ns/external", "ns/web", "ns/web-canary"}},
		{"resync: same resourceVersion", base(), with(base(), notReady), nil},
		{"annotation only", base(), next(func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }), nil},
		{"nodeName only", base(), next(func(p *corev1.Pod) { p.Spec.NodeName = "node-2" }), nil},
		{"phase only", base(), next(phase(corev1.PodPending)), nil},
		{"readiness flipped", base(), next(notReady), []string{"ns/all", "ns/external", "ns/web"}},
		{"Ready condition time only", base(), next(readyAt(t0.Add(1))), nil},
		{"pod IPs changed", base(), next(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.1.0.2"}} }), []string{"ns/all", "ns/external", "ns/web"}},
		{"second IP added", base(), next(func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::1"}) }), []string{"ns/all", "ns/external", "ns/web"}},
		{"podIP alone changed", base(), next(func(p *corev1.Pod) { p.Status.PodIP = "10.9.9.9" }), nil},
		{"deletion started", base(), next(terminating), []string{"ns/all", "ns/external", "ns/web"}},
		{"terminating pod updated again", with(base(), terminating), next(terminating), []string{"ns/all", "ns/external", "ns/web"}},
		{"labels only: services joined", base(), next(canary), []string{"ns/web-canary"}},
		{"labels only: services left and joined", base(), next(api), []string{"ns/api", "ns/external", "ns/web"}},
		{"labels and readiness: old and new", base(), next(api, notReady), []string{"ns/all", "ns/api", "ns/external", "ns/web"}},
		{"labels that select the same services, readiness flipped", base(), next(podLabels(map[string]string{"app": "web", "x": "y"}), notReady), []string{"ns/all", "ns/external", "ns/web"}},
		{"hostname only: no service joined or left", base(), next(func(p *corev1.Pod) { p.Spec.Hostname = "h" }), nil},
		{"subdomain and readiness", base(), next(func(p *corev1.Pod) { p.Spec.Subdomain = "web" }, notReady), []string{"ns/all", "ns/external", "ns/web"}},
		{"labels dropped", base(), next(podLabels(nil)), []string{"ns/external", "ns/web"}},
		{"both nil", nil, nil, nil},
	}
	for _, tt := range tests {
		if got := servicesToSync(matchAmong(services), tt.old, tt.cur); !slices.Equal(got, tt.want) {
			t.Errorf("%s: services = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestClassifyPodUpdate(t *testing.T) {
	ts := metav1.NewTime(t0)
	a := pod("p", "10.1.0.1")
	a.DeletionTimestamp = &ts
	// The same object on both sides: the deletionTimestamp pointer is shared.
	if c := classifyPodUpdate(a, a); c.endpoint || c.membership {
		t.Errorf("same object: %+v", c)
	}
	b := a.DeepCopy()
	if c := classifyPodUpdate(a, b); !c.endpoint {
		t.Error("two states of a terminating pod: not an endpoint change")
	}
}

// matchAmong matches pod labels against each of services in turn, the plain way.
func matchAmong(services []*corev1.Service) servicesMatching {
	return func(podLabels map[string]string) []*corev1.Service {
		var out []*corev1.Service
		for _, svc := range services {
			if svc.Spec.Selector != nil && labels.SelectorFromValidatedSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
				out = append(out, svc)
			}
		}
		return out
	}
}
