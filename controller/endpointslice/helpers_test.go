package endpointslice

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Builders for the pure tests. Defaults describe the common case: Service ns/web, IPv4, port
// "http" 80 → 8080/TCP, selecting app=web; pods on node-a in zone-a.

func service(mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "svc-uid", Labels: map[string]string{"team": "a"},
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		Spec: corev1.ServiceSpec{
			Selector:   map[string]string{"app": "web"},
			ClusterIP:  "10.96.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func headless(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }

func dualStack(s *corev1.Service) {
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
}

func publishNotReady(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }

func trafficDistribution(td string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.TrafficDistribution = &td }
}

func namedTarget(name string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString(name) }
}

// pod returns a running pod named name with the given IPs (status.podIPs), Ready when ready.
func pod(name string, ready bool, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

func withPod(p *corev1.Pod, mods ...func(*corev1.Pod)) *corev1.Pod {
	for _, m := range mods {
		m(p)
	}
	return p
}

func onNode(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func terminating(p *corev1.Pod) {
	ts := metav1.NewTime(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	p.DeletionTimestamp = &ts
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func containerPort(name string, port int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports,
			corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP})
	}
}

// nodes is a node lookup over name → zone ("" = no zone label).
func nodes(zones map[string]string) nodeLookup {
	return func(name string) (*corev1.Node, bool) {
		zone, ok := zones[name]
		if !ok {
			return nil, false
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if zone != "" {
			n.Labels[corev1.LabelTopologyZone] = zone
		}
		return n, true
	}
}

var defaultNodes = nodes(map[string]string{"node-a": "zone-a", "node-b": "zone-b", "node-c": ""})

// ep is the endpoint pod(name, ready, ip) on node-a in zone-a gives a ClusterIP Service.
func ep(name, ip string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: new(ready), Serving: new(ready), Terminating: new(false)},
		NodeName:   new("node-a"),
		Zone:       new("zone-a"),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: name, UID: types.UID(name + "-uid")},
	}
}

func httpPort(port int32) []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: new("http"), Port: new(port), Protocol: new(corev1.ProtocolTCP)}}
}

// slice is an existing slice of service() as this controller writes it.
func slice(name string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := newSlice(service(), ports, at)
	s.Name, s.UID, s.ResourceVersion, s.Generation = name, types.UID(name+"-uid"), "1", 1
	s.Endpoints = append(s.Endpoints, eps...)
	return s
}

func withSlice(s *discoveryv1.EndpointSlice, mods ...func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	for _, m := range mods {
		m(s)
	}
	return s
}

// summary renders a slice compactly for comparisons: name (or "+new"), address type, ports and
// the target pods of its endpoints in order, with "!" for not ready and hints in brackets.
func summary(s *discoveryv1.EndpointSlice) string {
	name := s.Name
	if name == "" {
		name = "+new"
	}
	var ports []string
	for _, p := range s.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d", *p.Name, *p.Port))
	}
	slices.Sort(ports)
	var eps []string
	for _, e := range s.Endpoints {
		x := e.TargetRef.Name
		if !isReady(&e) {
			x += "!"
		}
		if e.Hints != nil {
			var h []string
			for _, z := range e.Hints.ForZones {
				h = append(h, "z="+z.Name)
			}
			for _, n := range e.Hints.ForNodes {
				h = append(h, "n="+n.Name)
			}
			x += "[" + strings.Join(h, ",") + "]"
		}
		eps = append(eps, x)
	}
	return fmt.Sprintf("%s %s [%s] %s", name, s.AddressType, strings.Join(ports, ","), strings.Join(eps, " "))
}

func summaries(ss []*discoveryv1.EndpointSlice) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, summary(s))
	}
	slices.Sort(out)
	return out
}

func names(ss []*discoveryv1.EndpointSlice) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

// fakeStore applies plans the way the apiserver would, for convergence checks: objects go
// through JSON (as on the wire), creates get a name, uid and generation 1, updates bump the
// generation when anything but metadata changed.
type fakeStore struct {
	t      *testing.T
	slices map[string]*discoveryv1.EndpointSlice
	n      int
}

func newFakeStore(t *testing.T, existing []*discoveryv1.EndpointSlice) *fakeStore {
	f := &fakeStore{t: t, slices: map[string]*discoveryv1.EndpointSlice{}}
	for _, s := range existing {
		f.slices[s.Name] = roundTrip(t, s)
	}
	return f
}

func roundTrip(t *testing.T, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	out := &discoveryv1.EndpointSlice{}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *fakeStore) apply(p plan) {
	f.t.Helper()
	for _, s := range p.create {
		s = roundTrip(f.t, s)
		f.n++
		s.Name = fmt.Sprintf("%sgen%d", s.GenerateName, f.n)
		s.UID, s.Generation, s.ResourceVersion = types.UID(s.Name+"-uid"), 1, "1"
		f.slices[s.Name] = s
	}
	for _, s := range p.update {
		old, ok := f.slices[s.Name]
		if !ok {
			f.t.Fatalf("update of missing slice %s", s.Name)
		}
		s = roundTrip(f.t, s)
		s.UID, s.Generation = old.UID, old.Generation+1
		f.slices[s.Name] = s
	}
	for _, s := range p.delete {
		if _, ok := f.slices[s.Name]; !ok {
			f.t.Fatalf("delete of missing slice %s", s.Name)
		}
		delete(f.slices, s.Name)
	}
}

func (f *fakeStore) list() []*discoveryv1.EndpointSlice {
	out := make([]*discoveryv1.EndpointSlice, 0, len(f.slices))
	for _, s := range f.slices {
		out = append(out, s)
	}
	slices.SortFunc(out, byName)
	return out
}

// dump renders a value as JSON for failure messages.
func dump(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
