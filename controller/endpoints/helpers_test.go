package endpoints

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Builders for the pure tests: a service and pods in namespace "ns" with the usual defaults
// (what the API server fills in), changed by small option functions.

const testNS = "ns"

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 600, time.UTC)

type svcOpt func(*corev1.Service)

func service(opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, UID: "svc-uid", CreationTimestamp: metav1.NewTime(t0)},
		Spec: corev1.ServiceSpec{
			Selector:   map[string]string{"app": "web"},
			ClusterIP:  "10.0.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt32(8080))},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func tcpPort(name string, port int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

func withPorts(ports ...corev1.ServicePort) svcOpt {
	return func(s *corev1.Service) { s.Spec.Ports = ports }
}

func withClusterIP(ip string) svcOpt { return func(s *corev1.Service) { s.Spec.ClusterIP = ip } }

func withFamilies(f ...corev1.IPFamily) svcOpt {
	return func(s *corev1.Service) { s.Spec.IPFamilies = f }
}

func headless(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }

func publishNotReady(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }

func withServiceLabels(l map[string]string) svcOpt {
	return func(s *corev1.Service) { s.Labels = l }
}

type podOpt func(*corev1.Pod)

// pod is a running, ready pod bound to node-1 with the given IPs as status.podIPs (the first
// also as status.podIP), labelled app=web, its single container listening on 8080 as "http".
func pod(name string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"}, ResourceVersion: "1"},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{Name: "main", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
			}}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}},
		},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func with(p *corev1.Pod, opts ...podOpt) *corev1.Pod {
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0)}}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func terminating(p *corev1.Pod) {
	ts := metav1.NewTime(t0)
	p.DeletionTimestamp = &ts
}

func podLabels(l map[string]string) podOpt { return func(p *corev1.Pod) { p.Labels = l } }

func containerPorts(ports ...corev1.ContainerPort) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Ports = ports }
}

// addr is the address pod name gets, ready or not, on node-1.
func addr(ip, name string) corev1.EndpointAddress {
	node := "node-1"
	return corev1.EndpointAddress{IP: ip, NodeName: &node, TargetRef: &corev1.ObjectReference{
		Kind: "Pod", Namespace: testNS, Name: name, UID: types.UID("uid-" + name)}}
}

func addrs(a ...corev1.EndpointAddress) []corev1.EndpointAddress { return a }

func eport(name string, port int32) corev1.EndpointPort {
	return corev1.EndpointPort{Name: name, Port: port, Protocol: corev1.ProtocolTCP}
}

func eports(p ...corev1.EndpointPort) []corev1.EndpointPort { return p }

func ptr[T any](v T) *T { return &v }

// dump renders objects for failure messages.
func dump(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// sameSubsets fails unless got is exactly want (order included, nil and empty alike).
func sameSubsets(t *testing.T, got, want []corev1.EndpointSubset) {
	t.Helper()
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("subsets:\n got %s\nwant %s", dump(got), dump(want))
	}
}

func intstrName(name string) intstr.IntOrString { return intstr.FromString(name) }
