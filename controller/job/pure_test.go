package job

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func TestIndexSet(t *testing.T) {
	for _, tc := range []struct {
		in          string
		completions int
		want        string
		total       int
	}{
		{"", 5, "", 0},
		{"0,1,2,4", 5, "0-2,4", 4},
		{"3-5,1", 5, "1,3-4", 3}, // beyond completions dropped, unordered input sorted
		{"x,2", 5, "2", 1},
	} {
		s := parseIndexSet(tc.in, tc.completions)
		if s.String() != tc.want || s.total() != tc.total {
			t.Errorf("%q: %q (%d), want %q (%d)", tc.in, s, s.total(), tc.want, tc.total)
		}
	}
	s := newIndexSet([]int{7, 1, 2, 2}).with(3, 9)
	if s.String() != "1-3,7,9" || !s.has(2) || s.has(4) || !s.has(9) || s.has(10) {
		t.Errorf("set %q", s)
	}
	got := pendingIndexes(3, 6, newIndexSet([]int{0, 2}), newIndexSet([]int{3}), map[int]bool{1: true})
	if !slices.Equal(got, []int{4, 5}) {
		t.Errorf("pending %v", got)
	}
}

func finishedPod(name string, phase corev1.PodPhase, at time.Time, code int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name),
		Finalizers: []string{batchv1.JobTrackingFinalizer}},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.NewTime(at)}}}}}}
}

// TestBackoff: 10 s after one failure, doubling per failure in a row, capped; a success
// resets the count.
func TestBackoff(t *testing.T) {
	b := defaultBackoff
	fail := func(ago time.Duration) *corev1.Pod { return finishedPod("f", corev1.PodFailed, t0.Add(-ago), 1) }
	ok := func(ago time.Duration) *corev1.Pod { return finishedPod("s", corev1.PodSucceeded, t0.Add(-ago), 0) }
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want time.Duration
	}{
		{"none", nil, 0},
		{"one failure just now", []*corev1.Pod{fail(0)}, 10 * time.Second},
		{"one failure 4s ago", []*corev1.Pod{fail(4 * time.Second)}, 6 * time.Second},
		{"three in a row", []*corev1.Pod{fail(3 * time.Second), fail(2 * time.Second), fail(time.Second)}, 40*time.Second - time.Second},
		{"success after failures", []*corev1.Pod{fail(3 * time.Second), ok(time.Second)}, 0},
		{"failure after a success", []*corev1.Pod{ok(3 * time.Second), fail(0)}, 10 * time.Second},
		{"capped", slices.Repeat([]*corev1.Pod{fail(0)}, 40), 6 * time.Minute},
		{"long past", []*corev1.Pod{fail(time.Hour)}, 0},
	} {
		if got := b.remaining(tc.pods, t0); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestJudgeFailure(t *testing.T) {
	policy := &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{1, 2}}},
		{Action: batchv1.PodFailurePolicyActionCount, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: new("main"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{2}}},
	}}
	disrupted := finishedPod("d", corev1.PodFailed, t0, 7)
	disrupted.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		action batchv1.PodFailurePolicyAction
		counts bool
		msg    string
	}{
		{"disrupted", disrupted, batchv1.PodFailurePolicyActionIgnore, false, ""},
		{"exit 7", finishedPod("p", corev1.PodFailed, t0, 7), batchv1.PodFailurePolicyActionFailJob, true,
			"Container main for pod ns/p failed with exit code 7 matching FailJob rule at index 1"},
		{"exit 2", finishedPod("p", corev1.PodFailed, t0, 2), batchv1.PodFailurePolicyActionCount, true, ""},
		{"exit 1: no rule", finishedPod("p", corev1.PodFailed, t0, 1), "", true, ""},
	} {
		v := judgeFailure(policy, tc.pod)
		if v.action != tc.action || v.counts() != tc.counts || v.failJob != tc.msg {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}

func TestSuccessPolicyMet(t *testing.T) {
	done := newIndexSet([]int{0, 2, 3})
	for _, tc := range []struct {
		rules []batchv1.SuccessPolicyRule
		want  string
	}{
		{[]batchv1.SuccessPolicyRule{{SucceededIndexes: new("0-1")}}, ""},
		{[]batchv1.SuccessPolicyRule{{SucceededIndexes: new("0-1")}, {SucceededIndexes: new("2-3")}}, "Matched rules at index 1"},
		{[]batchv1.SuccessPolicyRule{{SucceededCount: new(int32(3))}}, "Matched rules at index 0"},
		{[]batchv1.SuccessPolicyRule{{SucceededCount: new(int32(4))}}, ""},
		{[]batchv1.SuccessPolicyRule{{SucceededIndexes: new("0-3"), SucceededCount: new(int32(3))}}, "Matched rules at index 0"},
	} {
		if got := successPolicyMet(&batchv1.SuccessPolicy{Rules: tc.rules}, 5, done); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.rules, got, tc.want)
		}
	}
}

// TestState: what newState counts and what finishedCondition and wantActive decide from it.
func TestState(t *testing.T) {
	job := func(change func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", UID: "job"}, Spec: batchv1.JobSpec{
			Completions: new(int32(4)), Parallelism: new(int32(3)), BackoffLimit: new(int32(1))}}
		if change != nil {
			change(j)
		}
		return j
	}
	active := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Finalizers: []string{batchv1.JobTrackingFinalizer}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	for _, tc := range []struct {
		name              string
		job               *batchv1.Job
		pods              []*corev1.Pod
		succeeded, failed int32
		want              int32 // wantActive
		reason            string
	}{
		{"fresh", job(nil), nil, 0, 0, 3, ""},
		{"two left", job(func(j *batchv1.Job) { j.Status.Succeeded = 1 }),
			[]*corev1.Pod{finishedPod("s", corev1.PodSucceeded, t0, 0), active("a")}, 2, 0, 2, ""},
		{"counted and uncounted", job(func(j *batchv1.Job) {
			j.Status.Failed = 1
			j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Failed: []types.UID{"f"}}
		}), []*corev1.Pod{finishedPod("f", corev1.PodFailed, t0, 1)}, 0, 2, 3, reasonBackoffLimit},
		{"deadline", job(func(j *batchv1.Job) {
			j.Spec.ActiveDeadlineSeconds = new(int64(10))
			j.Status.StartTime = &metav1.Time{Time: t0.Add(-11 * time.Second)}
		}), nil, 0, 0, 3, reasonDeadline},
		{"no completions, one success", job(func(j *batchv1.Job) { j.Spec.Completions = nil }),
			[]*corev1.Pod{finishedPod("s", corev1.PodSucceeded, t0, 0), active("a")}, 1, 0, 1, ""},
		{"pod being deleted counts as failed", job(nil),
			[]*corev1.Pod{func() *corev1.Pod { p := active("d"); p.DeletionTimestamp = &metav1.Time{Time: t0}; return p }()}, 0, 1, 3, ""},
		{"pod being deleted, replace only failed", job(func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = new(batchv1.Failed) }),
			[]*corev1.Pod{func() *corev1.Pod { p := active("d"); p.DeletionTimestamp = &metav1.Time{Time: t0}; return p }()}, 0, 0, 3, ""},
		{"failure target kept", job(func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reasonPolicy}}
		}), nil, 0, 0, 3, reasonPolicy},
	} {
		s := newState(tc.job, tc.pods)
		if s.succeeded != tc.succeeded || s.failed != tc.failed {
			t.Errorf("%s: succeeded %d failed %d, want %d %d", tc.name, s.succeeded, s.failed, tc.succeeded, tc.failed)
		}
		if got := s.wantActive(int32(len(s.active))); got != tc.want {
			t.Errorf("%s: wantActive %d, want %d", tc.name, got, tc.want)
		}
		reason := ""
		if c := s.finishedCondition(t0); c != nil {
			reason = c.Reason
		}
		if reason != tc.reason {
			t.Errorf("%s: finished with %q, want %q", tc.name, reason, tc.reason)
		}
	}
}

// TestRestartsCountAgainstTheLimit: pods restarting in place (OnFailure) fail the Job once
// their restarts reach the backoff limit.
func TestRestartsCountAgainstTheLimit(t *testing.T) {
	j := &batchv1.Job{Spec: batchv1.JobSpec{BackoffLimit: new(int32(2)), Completions: new(int32(1)), Parallelism: new(int32(1)),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure}}}}
	pod := func(restarts int32) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: restarts}}}}
	}
	if newState(j, []*corev1.Pod{pod(1)}).pastBackoffLimitOnFailure() {
		t.Error("1 restart of 2 failed the job")
	}
	if !newState(j, []*corev1.Pod{pod(2)}).pastBackoffLimitOnFailure() {
		t.Error("2 restarts of 2 did not fail the job")
	}
}
