package daemonset

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// These tests run the controller against the real apiserver with Node objects and no
// scheduler or node agent: each test plays both, binding pods and writing their status.

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

func start(t *testing.T) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(cctx, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	testserver.RunControllers(t, cctx, ctrl)
}

// setup makes a namespace and the named nodes (Ready), removed when the test ends.
func setup(t *testing.T, nodes ...string) string {
	t.Helper()
	ctx := context.Background()
	ns := strings.ToLower(t.Name())
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	api := client.Resource[*corev1.Node](c, "nodes")
	for _, name := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		if _, err := api.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = api.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	return ns
}

func newSet(ns, name string, change func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	l := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: l},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "v1"}}}},
	}}
	if change != nil {
		change(ds)
	}
	return ds
}

func livePods(t *testing.T, ns string) []*corev1.Pod {
	t.Helper()
	l, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := slices.DeleteFunc(l.Items, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(nodeOf(a), nodeOf(b)) })
	return out
}

func nodesOfPods(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, nodeOf(p))
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last state: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitNodes(t *testing.T, ns string, want ...string) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	waitFor(t, fmt.Sprintf("pods on %v", want), func() (bool, string) {
		pods = livePods(t, ns)
		return slices.Equal(nodesOfPods(pods), want), fmt.Sprint(nodesOfPods(pods))
	})
	return pods
}

// runPod plays the scheduler and the node: binds the pod to its node and marks it Ready
// (or Failed).
func runPod(t *testing.T, p *corev1.Pod, phase corev1.PodPhase) {
	t.Helper()
	ctx := context.Background()
	api := client.Resource[*corev1.Pod](c, "pods").Namespace(p.Namespace)
	if p.Spec.NodeName == "" {
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: nodeOf(p)}}
		if err := api.CreateSubresource(ctx, p.Name, "binding", b, &metav1.Status{}); err != nil {
			t.Fatal(err)
		}
	}
	fresh, err := api.Get(ctx, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	fresh.Status.Phase = phase
	if phase == corev1.PodRunning {
		fresh.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	}
	if _, err := api.UpdateStatus(ctx, fresh); err != nil {
		t.Fatal(err)
	}
}

func getSet(t *testing.T, ns, name string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := client.Resource[*appsv1.DaemonSet](c, "daemonsets").Namespace(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func update(t *testing.T, ns, name string, change func(*appsv1.DaemonSet)) {
	t.Helper()
	waitFor(t, "the update written", func() (bool, string) {
		ds := getSet(t, ns, name)
		change(ds)
		_, err := client.Resource[*appsv1.DaemonSet](c, "daemonsets").Namespace(ns).Update(context.Background(), ds)
		return err == nil, fmt.Sprint(err)
	})
}

// TestNodes: a pod on each node the DaemonSet selects, pinned there by node affinity and
// tolerating what daemons tolerate; a node newly labelled gets one; a NoExecute taint the pod
// does not tolerate takes it away; a failed pod is replaced; the status counts them.
func TestNodes(t *testing.T) {
	start(t)
	ns := setup(t, "dn-a", "dn-b", "dn-c")
	ctx := context.Background()
	nodes := client.Resource[*corev1.Node](c, "nodes")
	if _, err := client.Resource[*appsv1.DaemonSet](c, "daemonsets").Namespace(ns).Create(ctx, newSet(ns, "agent", func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.NodeSelector = map[string]string{"role": "edge"}
	})); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dn-a", "dn-b"} {
		n, _ := nodes.Get(ctx, name)
		n.Labels["role"] = "edge"
		if _, err := nodes.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	pods := waitNodes(t, ns, "dn-a", "dn-b")
	p := pods[0]
	if !slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == corev1.TaintNodeUnschedulable }) ||
		p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == "" || !metav1.IsControlledBy(p, getSet(t, ns, "agent")) {
		t.Errorf("pod %s: tolerations %v labels %v", p.Name, p.Spec.Tolerations, p.Labels)
	}
	for _, p := range pods {
		runPod(t, p, corev1.PodRunning)
	}
	waitFor(t, "status", func() (bool, string) {
		st := getSet(t, ns, "agent").Status
		return st.DesiredNumberScheduled == 2 && st.CurrentNumberScheduled == 2 && st.NumberReady == 2 && st.NumberAvailable == 2 &&
			st.UpdatedNumberScheduled == 2, fmt.Sprintf("%+v", st)
	})
	// A NoExecute taint takes the pod away; a cordon (unschedulable) does not.
	n, _ := nodes.Get(ctx, "dn-b")
	n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoExecute}}
	if _, err := nodes.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	n, _ = nodes.Get(ctx, "dn-a")
	n.Spec.Unschedulable = true
	if _, err := nodes.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	pods = waitNodes(t, ns, "dn-a")
	// A failed pod is replaced.
	runPod(t, pods[0], corev1.PodFailed)
	waitFor(t, "a replacement", func() (bool, string) {
		live := slices.DeleteFunc(livePods(t, ns), func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		return len(live) == 1 && live[0].Name != pods[0].Name, fmt.Sprint(len(live))
	})
}

// TestRollingUpdate: a new template replaces one node's pod at a time (maxUnavailable 1),
// each revision is kept as a ControllerRevision, and going back to the first template makes
// its revision the newest.
func TestRollingUpdate(t *testing.T) {
	start(t)
	ns := setup(t, "ru-a", "ru-b")
	ctx := context.Background()
	if _, err := client.Resource[*appsv1.DaemonSet](c, "daemonsets").Namespace(ns).Create(ctx, newSet(ns, "web", nil)); err != nil {
		t.Fatal(err)
	}
	for _, p := range waitNodes(t, ns, "ru-a", "ru-b") {
		if g := p.Labels[templateGenerationLabel]; g != "1" {
			t.Errorf("pod %s of the first template: template generation label %q, want 1", p.Name, g)
		}
		runPod(t, p, corev1.PodRunning)
	}
	update(t, ns, "web", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "v2" })
	image := func(p *corev1.Pod) string { return p.Spec.Containers[0].Image }
	// Exactly one old pod goes first; its node gets the new one.
	var fresh *corev1.Pod
	waitFor(t, "one node updated", func() (bool, string) {
		pods := livePods(t, ns)
		var images []string
		for _, p := range pods {
			images = append(images, image(p))
			if image(p) == "v2" {
				fresh = p
			}
		}
		return len(pods) == 2 && fresh != nil, fmt.Sprint(images)
	})
	if n := len(slices.DeleteFunc(livePods(t, ns), func(p *corev1.Pod) bool { return image(p) == "v2" })); n != 1 {
		t.Fatalf("%d old pods while the first new one is not ready, want 1 (maxUnavailable 1)", n)
	}
	// The apiserver counted the template change; the pod says which template it is of.
	if g := fresh.Labels[templateGenerationLabel]; g != "2" {
		t.Errorf("pod of the second template: template generation label %q, want 2", g)
	}
	runPod(t, fresh, corev1.PodRunning)
	var second *corev1.Pod
	waitFor(t, "both nodes updated", func() (bool, string) {
		pods := livePods(t, ns)
		second = nil
		for _, p := range pods {
			if image(p) == "v2" && p.Name != fresh.Name {
				second = p
			}
		}
		return len(pods) == 2 && second != nil, fmt.Sprint(len(pods))
	})
	runPod(t, second, corev1.PodRunning)
	waitFor(t, "rolled out", func() (bool, string) {
		ds := getSet(t, ns, "web")
		return ds.Status.ObservedGeneration == ds.Generation && ds.Status.UpdatedNumberScheduled == 2 && ds.Status.NumberAvailable == 2,
			fmt.Sprintf("%+v", ds.Status)
	})
	revisions := func() map[string]int64 {
		l, err := client.Resource[*appsv1.ControllerRevision](c, "controllerrevisions").Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, r := range l.Items {
			out[r.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] = r.Revision
		}
		return out
	}
	hashOf := func(p *corev1.Pod) string { return p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] }
	revs := revisions()
	if len(revs) != 2 || revs[hashOf(fresh)] != 2 {
		t.Fatalf("revisions %v, want two, the current (%s) numbered 2", revs, hashOf(fresh))
	}
	var first string
	for h, n := range revs {
		if n == 1 {
			first = h
		}
	}
	// Back to v1: its revision becomes number 3, no new revision is made.
	update(t, ns, "web", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "v1" })
	waitFor(t, "the first revision renumbered", func() (bool, string) {
		r := revisions()
		return len(r) == 2 && r[first] == 3, fmt.Sprint(r)
	})
}

func TestPlacement(t *testing.T) {
	ds := newSet("ns", "x", nil)
	tolerating := newSet("ns", "x", func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	})
	node := func(taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	noSchedule := corev1.Taint{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}
	noExecute := corev1.Taint{Key: "dedicated", Effect: corev1.TaintEffectNoExecute}
	for _, tc := range []struct {
		name         string
		ds           *appsv1.DaemonSet
		node         *corev1.Node
		run, mayStay bool
	}{
		{"plain node", ds, node(), true, true},
		{"cordoned", ds, node(corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}), true, true},
		{"not ready", ds, node(corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}), true, true},
		{"NoSchedule", ds, node(noSchedule), false, true},
		{"NoExecute", ds, node(noExecute), false, false},
		{"tolerated", tolerating, node(noSchedule, noExecute), true, true},
	} {
		run, stay := placementOf(tc.ds, tc.node)
		if run != tc.run || stay != tc.mayStay {
			t.Errorf("%s: run %v stay %v, want %v %v", tc.name, run, stay, tc.run, tc.mayStay)
		}
	}
}

func TestRollout(t *testing.T) {
	now := time.Now()
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}}
	pod := func(name, hash string, ok bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash}},
			Spec: corev1.PodSpec{NodeName: name}}
		if ok {
			p.Status.Conditions = ready
		}
		return p
	}
	byNode := func(pods ...*corev1.Pod) map[string]*nodePods {
		out := map[string]*nodePods{}
		for _, p := range pods {
			out[p.Name] = &nodePods{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.Name}}, shouldRun: true, mayStay: true, pods: []*corev1.Pod{p}}
		}
		return out
	}
	set := func(unavailable, surge intstr.IntOrString) *appsv1.DaemonSet {
		return newSet("ns", "x", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &unavailable, MaxSurge: &surge}}
		})
	}
	names := func(pods []*corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	// maxUnavailable 1: one of three old pods goes; an old pod that is not ready goes anyway.
	remove, create := rollout(set(intstr.FromInt32(1), intstr.FromInt32(0)), "new", byNode(pod("a", "old", true), pod("b", "old", true), pod("c", "old", true)), now)
	if got := names(remove); len(got) != 1 || create != nil {
		t.Errorf("maxUnavailable 1: remove %v create %v", got, create)
	}
	remove, _ = rollout(set(intstr.FromInt32(1), intstr.FromInt32(0)), "new", byNode(pod("a", "old", false), pod("b", "old", true)), now)
	if got := names(remove); !slices.Equal(got, []string{"a"}) {
		t.Errorf("an unavailable old pod: remove %v", got)
	}
	// 50% of 4 is 2.
	remove, _ = rollout(set(intstr.FromString("50%"), intstr.FromInt32(0)), "new", byNode(pod("a", "old", true), pod("b", "old", true), pod("c", "old", true), pod("d", "old", true)), now)
	if len(remove) != 2 {
		t.Errorf("50%%: remove %v", names(remove))
	}
	// Surge 1: one new pod beside an old one; none deleted until it is available.
	_, create = rollout(set(intstr.FromInt32(0), intstr.FromInt32(1)), "new", byNode(pod("a", "old", true), pod("b", "old", true)), now)
	if len(create) != 1 {
		t.Errorf("surge: create %v", create)
	}
}
