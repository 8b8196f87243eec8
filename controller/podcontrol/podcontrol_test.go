package podcontrol

import (
	"errors"
	"slices"
	"sync/atomic"
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
		p.Annotations = map[string]string{deletionCostAnnotation: s.cost}
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

func TestPodsToDelete(t *testing.T) {
	h := time.Hour
	for _, tc := range []struct {
		name string
		pods []podSpec
		n    int
		want []string
	}{
		{"unscheduled first", []podSpec{{name: "a", node: "n1", phase: corev1.PodRunning, age: h}, {name: "b", phase: corev1.PodPending, age: 2 * h}}, 1, []string{"b"}},
		{"pending before unknown before running", []podSpec{
			{name: "run", node: "n", phase: corev1.PodRunning, age: h},
			{name: "unk", node: "n", phase: corev1.PodUnknown, age: h},
			{name: "pend", node: "n", phase: corev1.PodPending, age: h},
		}, 3, []string{"run", "unk", "pend"}}, // n == len: every pod, in the given order
		{"pending before unknown", []podSpec{
			{name: "run", node: "n", phase: corev1.PodRunning, age: h},
			{name: "unk", node: "n", phase: corev1.PodUnknown, age: h},
			{name: "pend", node: "n", phase: corev1.PodPending, age: h},
		}, 2, []string{"pend", "unk"}},
		{"not ready first", []podSpec{{name: "r", node: "n", phase: corev1.PodRunning, ready: h, age: h}, {name: "nr", node: "n", phase: corev1.PodRunning, age: 2 * h}}, 1, []string{"nr"}},
		{"lower deletion cost first", []podSpec{
			{name: "cheap", node: "n", phase: corev1.PodRunning, ready: h, age: 2 * h, cost: "-5"},
			{name: "dear", node: "n", phase: corev1.PodRunning, ready: 2 * h, age: time.Minute, cost: "10"},
		}, 1, []string{"cheap"}},
		{"doubled up first", []podSpec{
			{name: "alone", node: "n1", phase: corev1.PodRunning, ready: h, age: h},
			{name: "pair1", node: "n2", phase: corev1.PodRunning, ready: 8 * h, age: 8 * h},
			{name: "pair2", node: "n2", phase: corev1.PodRunning, ready: 8 * h, age: 8 * h},
		}, 1, []string{"pair1"}},
		{"ready more recently first", []podSpec{
			{name: "old", node: "n1", phase: corev1.PodRunning, ready: 10 * h, age: 10 * h},
			{name: "new", node: "n2", phase: corev1.PodRunning, ready: time.Minute, age: 10 * h},
		}, 1, []string{"new"}},
		{"more restarts first", []podSpec{
			{name: "calm", node: "n1", phase: corev1.PodRunning, age: h},
			{name: "crashy", node: "n2", phase: corev1.PodRunning, age: h, restarts: 7},
		}, 1, []string{"crashy"}},
		{"newer first", []podSpec{
			{name: "old", node: "n1", phase: corev1.PodRunning, age: 100 * h},
			{name: "new", node: "n2", phase: corev1.PodRunning, age: time.Minute},
		}, 1, []string{"new"}},
		{"same age bucket: by UID", []podSpec{
			{name: "b", node: "n1", phase: corev1.PodRunning, age: 64*time.Second + time.Second},
			{name: "a", node: "n2", phase: corev1.PodRunning, age: 64*time.Second + 2*time.Second},
		}, 1, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pods []*corev1.Pod
			for _, s := range tc.pods {
				pods = append(pods, mk(s))
			}
			if got := names(PodsToDelete(pods, pods, tc.n, now)); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBatchSizes(t *testing.T) {
	for _, tc := range []struct {
		n, initial int
		want       []int
	}{
		{0, 1, nil},
		{1, 1, []int{1}},
		{3, 1, []int{1, 2}},
		{10, 1, []int{1, 2, 4, 3}},
		{500, 1, []int{1, 2, 4, 8, 16, 32, 64, 128, 245}},
		{5, 4, []int{4, 1}},
	} {
		if got := batchSizes(tc.n, tc.initial); !slices.Equal(got, tc.want) {
			t.Errorf("batchSizes(%d, %d) = %v, want %v", tc.n, tc.initial, got, tc.want)
		}
	}
}

func TestSlowStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		failFrom int64 // calls numbered from 1; calls >= failFrom fail (0: none)
		wantDone int
		wantCall int64
	}{
		{"all succeed", 10, 0, 10, 10},
		{"first fails: one call only", 10, 1, 0, 1},
		{"fails in the third batch", 10, 5, 3, 7}, // batches 1,2,4: calls 4..7 form the third
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			done, err := SlowStart(tc.n, func() error {
				if k := calls.Add(1); tc.failFrom > 0 && k >= tc.failFrom {
					return errors.New("boom")
				}
				return nil
			})
			if tc.failFrom > 0 && err == nil {
				t.Error("no error")
			}
			if tc.failFrom == 0 && err != nil {
				t.Error(err)
			}
			// In the failing batch, calls run concurrently, so which ones fail varies; the
			// count of calls made does not.
			if calls.Load() != tc.wantCall {
				t.Errorf("calls = %d, want %d", calls.Load(), tc.wantCall)
			}
			if tc.failFrom == 0 && done != tc.wantDone {
				t.Errorf("done = %d, want %d", done, tc.wantDone)
			}
			if tc.failFrom > 0 && done >= tc.n {
				t.Errorf("done = %d after a failure", done)
			}
		})
	}
}

func TestExpectations(t *testing.T) {
	clock := now
	type step struct {
		op        string // create N / delete keys / created / deleted key / forget / wait
		n         int
		keys      []string
		d         time.Duration
		satisfied bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"nothing expected", []step{{op: "check", satisfied: true}}},
		{"creations counted down", []step{
			{op: "create", n: 2, satisfied: false},
			{op: "created", satisfied: false},
			{op: "created", satisfied: true},
			{op: "created", satisfied: true},
		}},
		{"deletions by key, each once", []step{
			{op: "delete", keys: []string{"ns/a", "ns/b"}, satisfied: false},
			{op: "deleted", keys: []string{"ns/a"}, satisfied: false},
			{op: "deleted", keys: []string{"ns/a"}, satisfied: false},
			{op: "deleted", keys: []string{"ns/other"}, satisfied: false},
			{op: "deleted", keys: []string{"ns/b"}, satisfied: true},
		}},
		{"expire after the TTL", []step{
			{op: "create", n: 1, satisfied: false},
			{op: "wait", d: ExpectationsTTL, satisfied: false},
			{op: "wait", d: time.Second, satisfied: true},
		}},
		{"forget", []step{{op: "create", n: 3, satisfied: false}, {op: "forget", satisfied: true}}},
		{"new expectations replace old", []step{
			{op: "create", n: 3, satisfied: false},
			{op: "delete", keys: []string{"ns/a"}, satisfied: false},
			{op: "deleted", keys: []string{"ns/a"}, satisfied: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock = now
			e := NewExpectations(func() time.Time { return clock })
			for i, s := range tc.steps {
				switch s.op {
				case "create":
					e.ExpectCreations("rs", s.n)
				case "delete":
					e.ExpectDeletions("rs", s.keys)
				case "created":
					e.CreationObserved("rs")
				case "deleted":
					e.DeletionObserved("rs", s.keys[0])
				case "forget":
					e.Forget("rs")
				case "wait":
					clock = clock.Add(s.d)
				}
				if got := e.Satisfied("rs"); got != s.satisfied {
					t.Fatalf("step %d (%s): satisfied = %v, want %v", i, s.op, got, s.satisfied)
				}
			}
		})
	}
}
