package replicaset

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// pod describes a pod for the pure tests: node, phase, ready since (zero: not ready),
// created at, restarts, deletion cost annotation.
type podSpec struct {
	name     string
	node     string
	phase    corev1.PodPhase
	ready    time.Duration // ago; 0: not ready
	age      time.Duration
	restarts int32
	cost     string
	labels   map[string]string
}

func mk(s podSpec) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, UID: types.UID(s.name), Labels: s.labels,
			CreationTimestamp: metav1.NewTime(now.Add(-s.age))},
		Spec:   corev1.PodSpec{NodeName: s.node},
		Status: corev1.PodStatus{Phase: s.phase},
	}
	if s.ready > 0 {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-s.ready))}}
	}
	if s.restarts > 0 {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", RestartCount: s.restarts}}
	}
	if s.cost != "" {
		p.Annotations = map[string]string{"controller.kubernetes.io/pod-deletion-cost": s.cost}
	}
	return p
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestCalculateStatus(t *testing.T) {
	tmpl := map[string]string{"app": "web", "tier": "fe"}
	full := map[string]string{"app": "web", "tier": "fe", "extra": "x"}
	part := map[string]string{"app": "web"}
	for _, tc := range []struct {
		name string
		pods []podSpec
		mrs  int32
		want Status
	}{
		{"none", nil, 0, Status{ObservedGeneration: 7}},
		{"labels and readiness", []podSpec{
			{name: "a", labels: full, ready: time.Second},
			{name: "b", labels: part, ready: time.Hour},
			{name: "c", labels: full},
		}, 0, Status{Replicas: 3, FullyLabeledReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, ObservedGeneration: 7}},
		{"minReadySeconds", []podSpec{
			{name: "a", labels: full, ready: 5 * time.Second},
			{name: "b", labels: full, ready: 10 * time.Second},
			{name: "c", labels: full, ready: time.Hour},
		}, 10, Status{Replicas: 3, FullyLabeledReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 2, ObservedGeneration: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pods []*corev1.Pod
			for _, s := range tc.pods {
				pods = append(pods, mk(s))
			}
			if got := calculateStatus(pods, tmpl, tc.mrs, 7, now); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
