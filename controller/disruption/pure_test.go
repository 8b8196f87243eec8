package disruption

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func count(n int32) *intstr.IntOrString    { v := intstr.FromInt32(n); return &v }
func percent(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }

// TestNeed: expectedPods and desiredHealthy from the spec. Percentages are of the
// controllers' scale and round up (GetScaledValueFromIntOrPercent with roundUp); a count of
// minAvailable is of the matching pods and needs no controller.
func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		name          string
		spec          policyv1.PodDisruptionBudgetSpec
		matching      int
		scale         int32
		scaleErr      error
		wantExpected  int32
		wantDesired   int32
		wantErr       bool
		wantScaleRead bool
	}{
		{name: "minAvailable count", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: count(2)}, matching: 3, scale: 9,
			wantExpected: 3, wantDesired: 2},
		{name: "minAvailable count above the pods", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: count(5)}, matching: 3,
			wantExpected: 3, wantDesired: 5},
		{name: "minAvailable 50% of 3 rounds up", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: percent("50%")}, matching: 1, scale: 3,
			wantExpected: 3, wantDesired: 2, wantScaleRead: true},
		{name: "minAvailable 34% of 3", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: percent("34%")}, scale: 3,
			wantExpected: 3, wantDesired: 2, wantScaleRead: true},
		{name: "minAvailable 0%", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: percent("0%")}, scale: 4,
			wantExpected: 4, wantDesired: 0, wantScaleRead: true},
		{name: "minAvailable 100%", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: percent("100%")}, scale: 7,
			wantExpected: 7, wantDesired: 7, wantScaleRead: true},
		{name: "maxUnavailable count", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: count(1)}, matching: 2, scale: 3,
			wantExpected: 3, wantDesired: 2, wantScaleRead: true},
		{name: "maxUnavailable 50% of 3 rounds up", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: percent("50%")}, scale: 3,
			wantExpected: 3, wantDesired: 1, wantScaleRead: true},
		{name: "maxUnavailable 10% of 5 is one pod", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: percent("10%")}, scale: 5,
			wantExpected: 5, wantDesired: 4, wantScaleRead: true},
		{name: "maxUnavailable beyond the scale", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: count(5)}, scale: 3,
			wantExpected: 3, wantDesired: 0, wantScaleRead: true},
		{name: "maxUnavailable of nothing", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: percent("100%")}, scale: 0,
			wantExpected: 0, wantDesired: 0, wantScaleRead: true},
		{name: "no bound", matching: 4, wantExpected: 0, wantDesired: 0},
		{name: "scale unknown", spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: count(1)}, scaleErr: errors.New("found no controllers"),
			wantErr: true, wantScaleRead: true},
		{name: "bad percent", spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: percent("half")}, scale: 2,
			wantErr: true, wantScaleRead: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := false
			expected, desired, err := need(&tc.spec, tc.matching, func() (int32, error) {
				read = true
				return tc.scale, tc.scaleErr
			})
			if (err != nil) != tc.wantErr || read != tc.wantScaleRead {
				t.Fatalf("err %v (want one: %v), scale read %v (want %v)", err, tc.wantErr, read, tc.wantScaleRead)
			}
			if err == nil && (expected != tc.wantExpected || desired != tc.wantDesired) {
				t.Errorf("expected %d, desired %d; want %d, %d", expected, desired, tc.wantExpected, tc.wantDesired)
			}
		})
	}
}

func TestAllowed(t *testing.T) {
	for _, tc := range []struct{ current, desired, expected, want int32 }{
		{3, 2, 3, 1}, {5, 0, 5, 5}, {2, 2, 2, 0}, {1, 2, 2, 0},
		{3, 0, 0, 0}, // pods but none expected yet: safe until synced with its controllers
	} {
		if got := allowed(tc.current, tc.desired, tc.expected); got != tc.want {
			t.Errorf("allowed(current %d, desired %d, expected %d) = %d, want %d", tc.current, tc.desired, tc.expected, got, tc.want)
		}
	}
}

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testPod(name string, ready bool, change ...func(*corev1.Pod)) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
	for _, c := range change {
		c(p)
	}
	return p
}

func deleting(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

// TestHealthyAndDisrupted: Ready pods count unless being deleted or evicted less than two
// minutes ago; disruptedPods keeps only those recent entries of pods still there.
func TestHealthyAndDisrupted(t *testing.T) {
	pods := []*corev1.Pod{
		testPod("ready", true),
		testPod("unready", false),
		testPod("deleting", true, deleting),
		testPod("evicted-now", true),
		testPod("evicted-earlier", true),
		testPod("evicted-long-ago", true),
		testPod("evicted-deleting", true, deleting),
	}
	recorded := map[string]metav1.Time{
		"evicted-now": ago(0), "evicted-earlier": ago(90 * time.Second), "evicted-long-ago": ago(3 * time.Minute),
		"evicted-deleting": ago(time.Second), "gone": ago(time.Second),
	}
	kept, late, recheck := stillDisrupted(pods, recorded, now)
	if want := map[string]metav1.Time{"evicted-now": ago(0), "evicted-earlier": ago(90 * time.Second)}; !maps.EqualFunc(kept, want, sameTime) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	if len(late) != 1 || late[0].Name != "evicted-long-ago" {
		t.Errorf("late %v, want evicted-long-ago", late)
	}
	if want := now.Add(30 * time.Second); !recheck.Equal(want) {
		t.Errorf("recheck at %v, want %v (the first kept entry's expiry)", recheck, want)
	}
	// ready and evicted-long-ago: the expired entry no longer keeps its pod out.
	if got := healthy(pods, kept, now); got != 2 {
		t.Errorf("healthy %d, want 2", got)
	}
	// The entries as recorded (before the sync drops any) keep out only the recent ones.
	if got := healthy(pods, recorded, now); got != 2 {
		t.Errorf("healthy with the recorded entries %d, want 2", got)
	}
	if kept, late, recheck := stillDisrupted(pods, nil, now); len(kept) != 0 || late != nil || !recheck.IsZero() {
		t.Errorf("nothing recorded: %v %v %v", kept, late, recheck)
	}
}

// TestNextStatus: the status follows the counts, the condition follows disruptionsAllowed and
// keeps its transition time while its status stays; an unchanged status is not rewritten.
func TestNextStatus(t *testing.T) {
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 2}}
	st, changed := nextStatus(pdb, computed{expected: 3, desired: 2, current: 3})
	cond := st.Conditions
	if !changed || st.DisruptionsAllowed != 1 || st.ObservedGeneration != 2 || st.ExpectedPods != 3 || st.DesiredHealthy != 2 || st.CurrentHealthy != 3 ||
		len(cond) != 1 || cond[0].Status != metav1.ConditionTrue || cond[0].Reason != policyv1.SufficientPodsReason || cond[0].ObservedGeneration != 2 {
		t.Fatalf("status %+v, changed %v", st, changed)
	}
	pdb.Status = st
	pdb.Status.Conditions[0].LastTransitionTime = ago(time.Hour)
	if _, changed := nextStatus(pdb, computed{expected: 3, desired: 2, current: 3}); changed {
		t.Errorf("the same counts changed the status")
	}
	// Still allowed, fewer healthy: the condition stays True since an hour ago.
	st, changed = nextStatus(pdb, computed{expected: 4, desired: 2, current: 4})
	if !changed || st.DisruptionsAllowed != 2 || !st.Conditions[0].LastTransitionTime.Equal(new(ago(time.Hour))) {
		t.Errorf("status %+v", st)
	}
	st, _ = nextStatus(pdb, computed{expected: 3, desired: 2, current: 2, disrupted: map[string]metav1.Time{"a": ago(time.Second)}})
	if st.DisruptionsAllowed != 0 || st.Conditions[0].Status != metav1.ConditionFalse || st.Conditions[0].Reason != policyv1.InsufficientPodsReason ||
		st.Conditions[0].LastTransitionTime.Equal(new(ago(time.Hour))) || len(st.DisruptedPods) != 1 {
		t.Errorf("status %+v", st)
	}
	if len(pdb.Status.Conditions) != 1 || pdb.Status.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("nextStatus changed the budget it was given: %+v", pdb.Status)
	}

	failed := failedStatus(pdb, errors.New("found no controllers for pod \"a\""))
	if failed.DisruptionsAllowed != 0 || failed.CurrentHealthy != 3 || failed.Conditions[0].Reason != policyv1.SyncFailedReason ||
		failed.Conditions[0].Status != metav1.ConditionFalse || failed.Conditions[0].Message != `found no controllers for pod "a"` {
		t.Errorf("failed status %+v", failed)
	}
	if pdb.Status.DisruptionsAllowed != 1 {
		t.Errorf("failedStatus changed the budget it was given")
	}
}

// TestSelects: a missing selector matches nothing, an empty one everything.
func TestSelects(t *testing.T) {
	p := testPod("p", true, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} })
	var got []bool
	for _, sel := range []*metav1.LabelSelector{nil, {}, {MatchLabels: map[string]string{"app": "web"}}, {MatchLabels: map[string]string{"app": "db"}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}} {
		got = append(got, selects(&policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}}, p))
	}
	if want := []bool{false, true, true, false, false}; !slices.Equal(got, want) {
		t.Errorf("selects %v, want %v", got, want)
	}
}
