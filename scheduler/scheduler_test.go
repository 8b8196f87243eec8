package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/scheduler"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var server *testserver.Server

func TestMain(m *testing.M) {
	var err error
	if server, err = testserver.Start(nil); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = server.Stop()
	os.Exit(code)
}

func newClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Host: server.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createNode creates a node and then sets its Ready condition and allocatable resources
// (plenty, unless n gives its own) through the status subresource.
func createNode(t *testing.T, c *client.Client, n *corev1.Node, ready corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	nodes := client.Resource[*corev1.Node](c, "nodes")
	allocatable := n.Status.Allocatable
	if allocatable == nil {
		allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	}
	got, err := nodes.Create(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	got.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	got.Status.Allocatable = allocatable
	if _, err := nodes.UpdateStatus(ctx, got); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
}

func newPod(name string, mutate func(*corev1.PodSpec)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if mutate != nil {
		mutate(&p.Spec)
	}
	return p
}

// eventually polls check until it returns "" or the deadline passes, then fails with its last
// complaint.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestScheduler(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := testserver.Namespace(t, c, "scheduler-")
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)

	gpu := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	for _, n := range []struct {
		node  *corev1.Node
		ready corev1.ConditionStatus
	}{
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sched-a"}}, corev1.ConditionTrue},
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sched-b"}}, corev1.ConditionTrue},
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sched-not-ready"}}, corev1.ConditionFalse},
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sched-cordoned"}, Spec: corev1.NodeSpec{Unschedulable: true}}, corev1.ConditionTrue},
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sched-gpu", Labels: map[string]string{"accel": "gpu"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{gpu}}}, corev1.ConditionTrue},
	} {
		createNode(t, c, n.node, n.ready)
	}

	// A pod bound before the scheduler starts counts towards its node.
	if _, err := pods.Create(ctx, newPod("pre-bound", func(s *corev1.PodSpec) { s.NodeName = "sched-a" })); err != nil {
		t.Fatal(err)
	}

	o := scheduler.DefaultOptions()
	o.Workers = 2
	o.Election.LeaseDuration, o.Election.RenewDeadline, o.Election.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- scheduler.RunWithClient(runCtx, o, c) }()
	defer func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("scheduler: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("the scheduler did not stop within 15s of its context's cancellation")
		}
	}()

	type want struct {
		nodes   []string // any of these
		message string   // when no node: the PodScheduled=False message
	}
	tolerateGPU := func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{"accel": "gpu"}
		s.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	}
	cases := []struct {
		pod  *corev1.Pod
		want want
	}{
		{newPod("plain-1", nil), want{nodes: []string{"sched-a", "sched-b"}}},
		{newPod("plain-2", nil), want{nodes: []string{"sched-a", "sched-b"}}},
		{newPod("plain-3", nil), want{nodes: []string{"sched-a", "sched-b"}}},
		{newPod("gpu", tolerateGPU), want{nodes: []string{"sched-gpu"}}},
		{newPod("tolerate-all", func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{"accel": "gpu"}
			s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}), want{nodes: []string{"sched-gpu"}}},
		{newPod("gpu-untolerated", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"accel": "gpu"} }),
			want{message: "0/5 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were not ready, 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."}},
		{newPod("ssd", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"disk": "ssd"} }),
			want{message: "0/5 nodes are available: 1 node(s) were not ready, 1 node(s) were unschedulable, 3 node(s) didn't match Pod's node affinity/selector."}},
	}
	for _, tc := range cases {
		if _, err := pods.Create(ctx, tc.pod); err != nil {
			t.Fatal(err)
		}
	}
	// Another scheduler's pod is left alone.
	if _, err := pods.Create(ctx, newPod("other-scheduler", func(s *corev1.PodSpec) { s.SchedulerName = "other" })); err != nil {
		t.Fatal(err)
	}
	// So is a pod naming a node that does not exist (the pod GC removes it, not the scheduler).
	if _, err := pods.Create(ctx, newPod("missing-node", func(s *corev1.PodSpec) { s.NodeName = "sched-missing" })); err != nil {
		t.Fatal(err)
	}

	for _, tc := range cases {
		eventually(t, tc.pod.Name, func() string {
			p, err := pods.Get(ctx, tc.pod.Name)
			if err != nil {
				return err.Error()
			}
			if len(tc.want.nodes) > 0 {
				for _, n := range tc.want.nodes {
					if p.Spec.NodeName == n {
						return ""
					}
				}
				return fmt.Sprintf("bound to %q, want one of %v", p.Spec.NodeName, tc.want.nodes)
			}
			if p.Spec.NodeName != "" {
				return fmt.Sprintf("bound to %q, want no node", p.Spec.NodeName)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled {
					if cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonUnschedulable || cond.Message != tc.want.message {
						return fmt.Sprintf("condition %+v, want False/Unschedulable %q", cond, tc.want.message)
					}
					return ""
				}
			}
			return "no PodScheduled condition"
		})
	}

	// Spread by count: with pre-bound on sched-a, the three plain pods go 1 to a and 2 to b.
	counts := map[string]int{}
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		counts[p.Spec.NodeName]++
	}
	if counts["sched-a"] != 2 || counts["sched-b"] != 2 {
		t.Errorf("pods per node = %v, want 2 on sched-a (one pre-bound) and 2 on sched-b", counts)
	}

	// The unschedulable condition is written once, not on every retry.
	before, err := pods.Get(ctx, "ssd")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // longer than the first two retries
	after, err := pods.Get(ctx, "ssd")
	if err != nil {
		t.Fatal(err)
	}
	if before.ResourceVersion != after.ResourceVersion {
		t.Errorf("the unschedulable pod was rewritten without a change: resourceVersion %s → %s", before.ResourceVersion, after.ResourceVersion)
	}
	// ... but each attempt is a FailedScheduling event, repeats counted in one Event.
	eventually(t, "FailedScheduling event", func() string {
		evs, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "ssd" && e.Reason == "FailedScheduling" {
				if e.Type != corev1.EventTypeWarning || e.Source.Component != "default-scheduler" ||
					e.Message != cases[len(cases)-1].want.message || e.InvolvedObject.UID != after.UID || e.Count < 2 {
					return fmt.Sprintf("event %+v", e)
				}
				return ""
			}
		}
		return fmt.Sprintf("none in %d events", len(evs.Items))
	})

	// A suitable node appears: the waiting pod binds to it.
	createNode(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sched-ssd", Labels: map[string]string{"disk": "ssd"}}}, corev1.ConditionTrue)
	eventually(t, "ssd after its node appeared", func() string {
		p, err := pods.Get(ctx, "ssd")
		if err != nil {
			return err.Error()
		}
		if p.Spec.NodeName != "sched-ssd" {
			return fmt.Sprintf("bound to %q", p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue {
				return fmt.Sprintf("condition %+v, want PodScheduled=True", cond)
			}
		}
		return ""
	})

	// The pod of another scheduler has stayed unbound and untouched all along.
	p, err := pods.Get(ctx, "other-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || len(p.Status.Conditions) != 0 {
		t.Errorf("another scheduler's pod was touched: nodeName %q, conditions %+v", p.Spec.NodeName, p.Status.Conditions)
	}
	if p, err = pods.Get(ctx, "missing-node"); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "sched-missing" || len(p.Status.Conditions) != 0 || p.Status.Phase != corev1.PodPending {
		t.Errorf("the pod on a missing node was touched: nodeName %q, phase %q, conditions %+v", p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
	}

	// The scheduler holds the kube-scheduler Lease.
	lease, err := client.Resource[*coordinationv1.Lease](c, "leases").Namespace("kube-system").Get(ctx, "kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("lease holder = %v, want this scheduler", lease.Spec.HolderIdentity)
	}
}
