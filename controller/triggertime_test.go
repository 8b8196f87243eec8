package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var triggerT0 = time.Date(2025, 1, 2, 3, 4, 5, 600, time.UTC)

func triggerService(created time.Time) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", CreationTimestamp: metav1.NewTime(created)}}
}

// readyPod is a pod whose Ready condition last changed at (no condition when at is zero).
func readyPod(name string, at time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if !at.IsZero() {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	}
	return p
}

// TestTriggerTimes runs one service through a sequence of syncs.
func TestTriggerTimes(t *testing.T) {
	m := func(n int) time.Time { return triggerT0.Add(time.Duration(n) * time.Minute) }
	svc := triggerService(triggerT0)
	steps := []struct {
		name   string
		svc    *corev1.Service
		pods   []*corev1.Pod
		forget bool // forget the service before this step
		want   time.Time
	}{
		{name: "first sync: the service's creation", svc: svc, pods: []*corev1.Pod{readyPod("a", m(5))}, want: triggerT0},
		{name: "nothing changed", svc: svc, pods: []*corev1.Pod{readyPod("a", m(5))}},
		{name: "a pod became ready", svc: svc, pods: []*corev1.Pod{readyPod("a", m(7))}, want: m(7)},
		{name: "a new pod and a changed one: the earliest", svc: svc,
			pods: []*corev1.Pod{readyPod("a", m(9)), readyPod("b", m(8))}, want: m(8)},
		{name: "a pod whose time went back does not count", svc: svc,
			pods: []*corev1.Pod{readyPod("a", m(1)), readyPod("b", m(8))}},
		{name: "a pod without a Ready condition does not count", svc: svc,
			pods: []*corev1.Pod{readyPod("a", m(1)), readyPod("b", m(8)), readyPod("c", time.Time{})}},
		{name: "a deleted pod gives no time", svc: svc, pods: []*corev1.Pod{readyPod("a", m(1))}},
		{name: "a pod that was gone and is back with its old time counts again", svc: svc,
			pods: []*corev1.Pod{readyPod("a", m(1)), readyPod("b", m(8))}, want: m(8)},
		{name: "the service was recreated", svc: triggerService(m(20)),
			pods: []*corev1.Pod{readyPod("a", m(1)), readyPod("b", m(8))}, want: m(20)},
		{name: "after forget: the creation again", forget: true, svc: triggerService(m(20)),
			pods: []*corev1.Pod{readyPod("a", m(30))}, want: m(20)},
	}
	tt := NewTriggerTimes()
	for _, s := range steps {
		if s.forget {
			tt.Forget("ns/web")
		}
		got, state := tt.Observe("ns/web", s.svc, s.pods)
		if !got.Equal(s.want) {
			t.Fatalf("%s: trigger = %v, want %v", s.name, got, s.want)
		}
		// An uncommitted observation (a failed sync) changes nothing.
		if again, _ := tt.Observe("ns/web", s.svc, s.pods); !again.Equal(s.want) {
			t.Fatalf("%s: trigger after a failed sync = %v, want %v", s.name, again, s.want)
		}
		tt.Commit("ns/web", state)
	}
	// Another service is tracked on its own.
	if got, _ := tt.Observe("ns/other", triggerService(m(3)), nil); !got.Equal(m(3)) {
		t.Errorf("other service: trigger = %v, want %v", got, m(3))
	}
}
