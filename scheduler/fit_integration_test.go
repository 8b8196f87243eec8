package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/scheduler"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSchedulerResourceFit: requests are counted against the node's allocatable; a pod that
// does not fit stays Pending with Kubernetes' words, and binds once room is freed.
func TestSchedulerResourceFit(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := testserver.Namespace(t, c, "fit-")
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	createNode(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fit-node"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourcePods: resource.MustParse("110")}}},
		corev1.ConditionTrue)

	o := scheduler.DefaultOptions()
	o.LeaderElect = false
	// The pods go with the test, so that later tests' schedulers do not place them: pods
	// bound to a node without an agent would otherwise wait for it to confirm their deletion.
	t.Cleanup(func() {
		list, err := pods.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, p := range list.Items {
			_ = pods.Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		}
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- scheduler.RunWithClient(runCtx, o, c) }()
	defer func() {
		stop()
		<-done
	}()

	cpuPod := func(name, cpu string) *corev1.Pod {
		return newPod(name, func(s *corev1.PodSpec) {
			s.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		})
	}
	bound := func(name string) {
		t.Helper()
		eventually(t, name+" bound", func() string {
			p, err := pods.Get(ctx, name)
			if err != nil {
				return err.Error()
			}
			if p.Spec.NodeName != "fit-node" {
				return fmt.Sprintf("nodeName %q, conditions %+v", p.Spec.NodeName, p.Status.Conditions)
			}
			return ""
		})
	}
	const msg = "0/1 nodes are available: 1 Insufficient cpu."
	pending := func(name string) {
		t.Helper()
		eventually(t, name+" unschedulable", func() string {
			p, err := pods.Get(ctx, name)
			if err != nil {
				return err.Error()
			}
			if p.Spec.NodeName != "" {
				return "bound to " + p.Spec.NodeName
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable && cond.Message == msg {
					return ""
				}
			}
			return fmt.Sprintf("conditions %+v", p.Status.Conditions)
		})
		eventually(t, name+" FailedScheduling event", func() string {
			evs, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err.Error()
			}
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == name && e.Reason == "FailedScheduling" && e.Type == corev1.EventTypeWarning && e.Message == msg {
					return ""
				}
			}
			return "no such event"
		})
	}

	// More than the node has at all.
	if _, err := pods.Create(ctx, cpuPod("too-big", "2")); err != nil {
		t.Fatal(err)
	}
	pending("too-big")
	// 600m fits once, not twice.
	if _, err := pods.Create(ctx, cpuPod("first", "600m")); err != nil {
		t.Fatal(err)
	}
	bound("first")
	if _, err := pods.Create(ctx, cpuPod("second", "600m")); err != nil {
		t.Fatal(err)
	}
	pending("second")
	// Pods that request nothing still fit.
	if _, err := pods.Create(ctx, newPod("no-requests", nil)); err != nil {
		t.Fatal(err)
	}
	bound("no-requests")
	// The first one goes: the second one gets its room, without waiting for a retry timer.
	start := time.Now()
	if err := pods.Delete(ctx, "first", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	bound("second")
	t.Logf("second bound %v after first was deleted", time.Since(start))
	p, err := pods.Get(ctx, "too-big")
	if err != nil || p.Spec.NodeName != "" {
		t.Errorf("too-big: %v %v", p.Spec.NodeName, err)
	}
}
