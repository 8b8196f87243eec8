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
