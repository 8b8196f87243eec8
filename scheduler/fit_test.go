package scheduler

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func allocatable(kv ...string) nodeOpt {
	return func(n *corev1.Node) { n.Status.Allocatable = list(kv...) }
}

func TestInsufficient(t *testing.T) {
	n := node("n", allocatable("cpu", "2", "memory", "1Gi", "pods", "3", "example.com/gpu", "1"))
	cases := []struct {
		name     string
		requests corev1.ResourceList
		used     *Used
		want     string
	}{
		{"empty node, no requests", nil, nil, ""},
		{"fits exactly", list("cpu", "2", "memory", "1Gi"), nil, ""},
		{"too much cpu", list("cpu", "2001m"), nil, "Insufficient cpu"},
		{"cpu taken by others", list("cpu", "1"), &Used{Pods: 1, Requested: list("cpu", "1500m")}, "Insufficient cpu"},
		{"cpu and memory", list("cpu", "3", "memory", "2Gi"), nil, "Insufficient cpu, Insufficient memory"},
		{"pods full, nothing requested", nil, &Used{Pods: 3}, "Too many pods"},
		{"pods full and cpu", list("cpu", "3"), &Used{Pods: 3}, "Too many pods, Insufficient cpu"},
		{"extended resource", list("example.com/gpu", "2"), nil, "Insufficient example.com/gpu"},
		{"resource the node lacks", list("ephemeral-storage", "1Gi"), nil, "Insufficient ephemeral-storage"},
		{"zero request of a resource the node lacks", list("hugepages-2Mi", "0"), nil, ""},
	}
	for _, tc := range cases {
		if got := strings.Join(Insufficient(tc.requests, n, tc.used), ", "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// A node reporting no allocatable pods takes none, as in Kubernetes.
	if got := Insufficient(nil, node("bare"), nil); len(got) != 1 || got[0] != "Too many pods" {
		t.Errorf("node without allocatable: %v", got)
	}
}

func TestFitResourcesMessage(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Requests: list("cpu", "1", "memory", "512Mi")}},
		{Name: "b", Resources: corev1.ResourceRequirements{Requests: list("cpu", "1")}},
	}}}
	nodes := []*corev1.Node{
		node("small", allocatable("cpu", "1", "memory", "1Gi", "pods", "110")),
		node("full", allocatable("cpu", "8", "memory", "8Gi", "pods", "110")),
		node("roomy", allocatable("cpu", "8", "memory", "8Gi", "pods", "110")),
		node("tiny", allocatable("cpu", "1", "memory", "256Mi", "pods", "1")),
	}
	usage := map[string]*Used{
		"full": {Pods: 2, Requested: list("cpu", "7", "memory", "7800Mi")},
		"tiny": {Pods: 1},
	}
	misfits := map[string]int{}
	fit := fitResources(pod, nodes, usage, misfits)
	if len(fit) != 1 || fit[0].Name != "roomy" {
		t.Errorf("fit = %v", fit)
	}
	msg := UnschedulableMessage(len(nodes), misfits)
	if want := "0/4 nodes are available: 1 Too many pods, 2 Insufficient memory, 3 Insufficient cpu."; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if got := UnschedulableMessage(1, map[string]int{"Insufficient cpu": 1}); got != "0/1 nodes are available: 1 Insufficient cpu." {
		t.Errorf("message %q", got)
	}
}
