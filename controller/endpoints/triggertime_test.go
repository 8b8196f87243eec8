package endpoints

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func readyAt(at time.Time) podOpt {
	return func(p *corev1.Pod) { p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at) }
}

func createdAt(at time.Time) svcOpt {
	return func(s *corev1.Service) { s.CreationTimestamp = metav1.NewTime(at) }
}

// TestTriggerTimes runs one service through a sequence of syncs.
func TestTriggerTimes(t *testing.T) {
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	steps := []struct {
		name   string
		svc    *corev1.Service
		pods   []*corev1.Pod
		forget bool // forget the service before this step
		want   time.Time
	}{
		{name: "first sync: the service's creation", svc: service(), pods: []*corev1.Pod{with(pod("a"), readyAt(m(5)))}, want: t0},
		{name: "nothing changed", svc: service(), pods: []*corev1.Pod{with(pod("a"), readyAt(m(5)))}},
		{name: "a pod became ready", svc: service(), pods: []*corev1.Pod{with(pod("a"), readyAt(m(7)))}, want: m(7)},
		{name: "a new pod and a changed one: the earliest",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a"), readyAt(m(9))), with(pod("b"), readyAt(m(8)))}, want: m(8)},
		{name: "a pod whose time went back does not count",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a"), readyAt(m(1))), with(pod("b"), readyAt(m(8)))}},
		{name: "a pod without a Ready condition does not count",
			svc:  service(),
			pods: []*corev1.Pod{with(pod("a"), readyAt(m(1))), with(pod("b"), readyAt(m(8))), with(pod("c"), func(p *corev1.Pod) { p.Status.Conditions = nil })}},
		{name: "a deleted pod gives no time", svc: service(), pods: []*corev1.Pod{with(pod("a"), readyAt(m(1)))}},
		{name: "a pod that was gone and is back with its old time counts again", svc: service(),
			pods: []*corev1.Pod{with(pod("a"), readyAt(m(1))), with(pod("b"), readyAt(m(8)))}, want: m(8)},
		{name: "the service was recreated", svc: service(createdAt(m(20))),
			pods: []*corev1.Pod{with(pod("a"), readyAt(m(1))), with(pod("b"), readyAt(m(8)))}, want: m(20)},
		{name: "after forget: the creation again", forget: true, svc: service(createdAt(m(20))),
			pods: []*corev1.Pod{with(pod("a"), readyAt(m(30)))}, want: m(20)},
	}
	tt := newTriggerTimes()
	for _, s := range steps {
		if s.forget {
			tt.forget("ns/web")
		}
		got, state := tt.observe("ns/web", s.svc, s.pods)
		if !got.Equal(s.want) {
			t.Fatalf("%s: trigger = %v, want %v", s.name, got, s.want)
		}
		// An uncommitted observation (a failed sync) changes nothing.
		if again, _ := tt.observe("ns/web", s.svc, s.pods); !again.Equal(s.want) {
			t.Fatalf("%s: trigger after a failed sync = %v, want %v", s.name, again, s.want)
		}
		tt.commit("ns/web", state)
	}
	// Another service is tracked on its own.
	if got, _ := tt.observe("ns/other", service(createdAt(m(3))), nil); !got.Equal(m(3)) {
		t.Errorf("other service: trigger = %v, want %v", got, m(3))
	}
}

func TestStaleVersions(t *testing.T) {
	s := newStaleVersions()
	if s.isStale("ns/a", "5") {
		t.Error("stale before any write")
	}
	s.replacedBy("ns/a", "5")
	if !s.isStale("ns/a", "5") {
		t.Error("the replaced version is not stale")
	}
	if s.isStale("ns/a", "6") || s.isStale("ns/b", "5") {
		t.Error("another version or key is stale")
	}
	s.forget("ns/a")
	if s.isStale("ns/a", "5") {
		t.Error("stale after forget")
	}
}

func TestProblemLog(t *testing.T) {
	p := newProblemLog()
	steps := []struct {
		key      string
		problems []string
		fresh    []string
	}{
		{"ns/a", []string{"x", "y"}, []string{"x", "y"}},
		{"ns/a", []string{"y", "x"}, nil},
		{"ns/b", []string{"x"}, []string{"x"}}, // per service
		{"ns/a", []string{"x", "z", "z"}, []string{"z"}},
		{"ns/a", nil, nil},
		{"ns/a", []string{"x"}, []string{"x"}}, // gone and back: logged again
	}
	for i, s := range steps {
		if got := p.report(s.key, s.problems); !slices.Equal(got, s.fresh) {
			t.Errorf("step %d: fresh = %q, want %q", i, got, s.fresh)
		}
	}
	p.forget("ns/b")
	if got := p.report("ns/b", []string{"x"}); !slices.Equal(got, []string{"x"}) {
		t.Errorf("after forget: fresh = %q", got)
	}
}
