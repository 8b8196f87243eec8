package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type nodeOpt func(*corev1.Node)

func node(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func notReady(status corev1.ConditionStatus) nodeOpt {
	return func(n *corev1.Node) { n.Status.Conditions[0].Status = status }
}
func noConditions(n *corev1.Node) { n.Status.Conditions = nil }
func cordoned(n *corev1.Node)     { n.Spec.Unschedulable = true }
func labelled(k, v string) nodeOpt {
	return func(n *corev1.Node) { n.Labels = map[string]string{k: v} }
}
func tainted(key, value string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

func podWith(selector map[string]string, tols ...corev1.Toleration) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{NodeSelector: selector, Tolerations: tols}}
}

func TestFits(t *testing.T) {
	gpuTaint := "node(s) had untolerated taint {dedicated: gpu}"
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want string
	}{
		{"ready plain node", podWith(nil), node("n"), ""},
		{"not ready", podWith(nil), node("n", notReady(corev1.ConditionFalse)), reasonNotReady},
		{"ready unknown", podWith(nil), node("n", notReady(corev1.ConditionUnknown)), reasonNotReady},
		{"no ready condition", podWith(nil), node("n", noConditions), reasonNotReady},
		{"cordoned", podWith(nil), node("n", cordoned), reasonUnschedulable},
		{"cordoned, tolerated", podWith(nil, corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists}), node("n", cordoned), ""},
		{"selector matches", podWith(map[string]string{"disk": "ssd"}), node("n", labelled("disk", "ssd")), ""},
		{"selector, other value", podWith(map[string]string{"disk": "ssd"}), node("n", labelled("disk", "hdd")), reasonSelector},
		{"selector, no labels", podWith(map[string]string{"disk": "ssd"}), node("n"), reasonSelector},
		{"NoSchedule taint", podWith(nil), node("n", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule)), gpuTaint},
		{"NoExecute taint", podWith(nil), node("n", tainted("dedicated", "gpu", corev1.TaintEffectNoExecute)), gpuTaint},
		{"taint without value", podWith(nil), node("n", tainted("maintenance", "", corev1.TaintEffectNoSchedule)), "node(s) had untolerated taint {maintenance}"},
		{"PreferNoSchedule taint is no bar", podWith(nil), node("n", tainted("dedicated", "gpu", corev1.TaintEffectPreferNoSchedule)), ""},
		{"taint tolerated", podWith(nil, corev1.Toleration{Key: "dedicated", Value: "gpu"}), node("n", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule)), ""},
		{"one of two taints tolerated",
			podWith(nil, corev1.Toleration{Key: "dedicated", Value: "gpu"}),
			node("n", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule), tainted("zone", "b", corev1.TaintEffectNoExecute)),
			"node(s) had untolerated taint {zone: b}"},
		{"tolerate everything", podWith(nil, corev1.Toleration{Operator: corev1.TolerationOpExists}),
			node("n", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule), tainted("zone", "b", corev1.TaintEffectNoExecute)), ""},
		{"not ready is reported before the taint", podWith(nil), node("n", notReady(corev1.ConditionFalse), tainted("x", "", corev1.TaintEffectNoSchedule)), reasonNotReady},
	} {
		if got := Fits(tc.pod, tc.node); got != tc.want {
			t.Errorf("%s: Fits = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFilterAndMessage(t *testing.T) {
	nodes := []*corev1.Node{
		node("a", labelled("disk", "hdd")),
		node("b", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
		node("c", tainted("dedicated", "gpu", corev1.TaintEffectNoSchedule), labelled("disk", "ssd")),
		node("d", labelled("disk", "ssd")),
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		nodes   []*corev1.Node
		fit     []string
		message string
	}{
		{"all fit", podWith(nil, corev1.Toleration{Operator: corev1.TolerationOpExists}), nodes, []string{"a", "b", "c", "d"}, ""},
		{"untainted fit", podWith(nil), nodes, []string{"a", "d"}, ""},
		{"selector and taint", podWith(map[string]string{"disk": "ssd"}), nodes, []string{"d"}, ""},
		{"none fit", podWith(map[string]string{"disk": "ssd"}), nodes[:3], nil,
			"0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 node(s) didn't match Pod's node affinity/selector."},
		{"no nodes", podWith(nil), nil, nil, "no nodes available to schedule pods"},
	} {
		fit, misfits := Filter(tc.pod, tc.nodes)
		var names []string
		for _, n := range fit {
			names = append(names, n.Name)
		}
		if !equal(names, tc.fit) {
			t.Errorf("%s: fit = %v, want %v", tc.name, names, tc.fit)
		}
		if len(fit) == 0 {
			if got := UnschedulableMessage(len(tc.nodes), misfits); got != tc.message {
				t.Errorf("%s: message = %q, want %q", tc.name, got, tc.message)
			}
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestUnschedulableMessage(t *testing.T) {
	for _, tc := range []struct {
		total   int
		misfits map[string]int
		want    string
	}{
		{3, map[string]int{reasonSelector: 1, "node(s) had untolerated taint {dedicated: gpu}": 2},
			"0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) had untolerated taint {dedicated: gpu}."},
		{4, map[string]int{reasonUnschedulable: 1, reasonNotReady: 1, reasonSelector: 2},
			"0/4 nodes are available: 1 node(s) were not ready, 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."},
		{0, nil, "no nodes available to schedule pods"},
	} {
		if got := UnschedulableMessage(tc.total, tc.misfits); got != tc.want {
			t.Errorf("UnschedulableMessage(%d, %v) = %q, want %q", tc.total, tc.misfits, got, tc.want)
		}
	}
}

func TestChoose(t *testing.T) {
	nodes := []*corev1.Node{node("c"), node("a"), node("b")}
	for _, tc := range []struct {
		name   string
		counts map[string]int
		want   string
	}{
		{"fewest pods", map[string]int{"a": 3, "b": 1, "c": 2}, "b"},
		{"tie broken by name", map[string]int{"a": 1, "b": 1, "c": 1}, "a"},
		{"tie among the fewest", map[string]int{"a": 2, "b": 0, "c": 0}, "b"},
		{"empty nodes", nil, "a"},
	} {
		got := Choose(nodes, func(n string) int { return tc.counts[n] })
		if got == nil || got.Name != tc.want {
			t.Errorf("%s: Choose = %v, want %s", tc.name, got, tc.want)
		}
	}
	if got := Choose(nil, func(string) int { return 0 }); got != nil {
		t.Errorf("Choose(nil) = %v, want nil", got.Name)
	}
}

func TestSetUnschedulable(t *testing.T) {
	t0, t1 := metav1.Unix(100, 0), metav1.Unix(200, 0)
	pod := &corev1.Pod{}
	setUnschedulable(pod, "m1", t0)
	setUnschedulable(pod, "m2", t1)
	if len(pod.Status.Conditions) != 1 {
		t.Fatalf("conditions = %+v, want one", pod.Status.Conditions)
	}
	c := pod.Status.Conditions[0]
	if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || c.Message != "m2" {
		t.Errorf("condition = %+v", c)
	}
	if !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("transition time = %v, want %v (the status did not change)", c.LastTransitionTime, t0)
	}
}
