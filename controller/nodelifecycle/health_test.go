package nodelifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// TestMonitor feeds one node's heartbeats, as reported by a node whose clock is an hour
// behind, and checks staleness on the controller's clock.
func TestMonitor(t *testing.T) {
	skew := -time.Hour
	node := func(s int) time.Time { return at(s).Add(skew) }
	steps := []struct {
		now              int
		heartbeat, renew time.Time
		stale            bool
	}{
		{0, node(0), time.Time{}, false},                // first seen: a full grace period
		{30, node(0), time.Time{}, false},               // 30 s silent
		{41, node(0), time.Time{}, true},                // 41 s > 40 s grace
		{45, node(0), node(44), false},                  // the Lease is renewed
		{80, node(0), node(44), false},                  // 35 s since the renewal
		{86, node(0), node(44), true},                   // 41 s
		{87, node(0), node(40), true},                   // an older renewTime is no heartbeat
		{90, node(89), node(44), false},                 // the Ready heartbeat moves on
		{131, node(89), node(44), true},                 // 41 s
		{132, node(89).Add(-time.Hour), node(44), true}, // going backwards does not count
	}
	m := newMonitor(40 * time.Second)
	for i, s := range steps {
		if got := m.observe("n", s.heartbeat, s.renew, at(s.now)); got != s.stale {
			t.Errorf("step %d (t=%ds): stale = %v, want %v", i, s.now, got, s.stale)
		}
	}
	m.forget(map[string]bool{})
	if m.observe("n", node(0), time.Time{}, at(500)) {
		t.Error("a forgotten node is seen afresh and must not be stale")
	}
}

func cond(t corev1.NodeConditionType, s corev1.ConditionStatus) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, Reason: "KubeletSays", LastHeartbeatTime: metav1.NewTime(t0), LastTransitionTime: metav1.NewTime(t0)}
}

func TestUnknownConditions(t *testing.T) {
	now := at(100)
	all := []corev1.NodeCondition{
		cond(corev1.NodeReady, corev1.ConditionTrue), cond(corev1.NodeMemoryPressure, corev1.ConditionFalse),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse), cond(corev1.NodePIDPressure, corev1.ConditionFalse),
	}
	for _, tc := range []struct {
		name    string
		in      []corev1.NodeCondition
		changed bool
		reasons map[corev1.NodeConditionType]string
	}{
		{"all reported", all, true, map[corev1.NodeConditionType]string{
			corev1.NodeReady: reasonUnknown, corev1.NodeMemoryPressure: reasonUnknown,
			corev1.NodeDiskPressure: reasonUnknown, corev1.NodePIDPressure: reasonUnknown}},
		{"only ready", all[:1], true, map[corev1.NodeConditionType]string{
			corev1.NodeReady: reasonUnknown, corev1.NodeMemoryPressure: reasonNeverUpdated,
			corev1.NodeDiskPressure: reasonNeverUpdated, corev1.NodePIDPressure: reasonNeverUpdated}},
		{"none", nil, true, map[corev1.NodeConditionType]string{
			corev1.NodeReady: reasonNeverUpdated, corev1.NodeMemoryPressure: reasonNeverUpdated,
			corev1.NodeDiskPressure: reasonNeverUpdated, corev1.NodePIDPressure: reasonNeverUpdated}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]corev1.NodeCondition(nil), tc.in...)
			out, changed := unknownConditions(in, now)
			if changed != tc.changed {
				t.Fatalf("changed = %v", changed)
			}
			if len(out) != 4 {
				t.Fatalf("got %d conditions", len(out))
			}
			for _, c := range out {
				if c.Status != corev1.ConditionUnknown || c.Reason != tc.reasons[c.Type] || !c.LastTransitionTime.Time.Equal(now) {
					t.Errorf("%s: %+v", c.Type, c)
				}
				if c.Reason == reasonUnknown && (c.Message != messageUnknown || !c.LastHeartbeatTime.Time.Equal(t0)) {
					t.Errorf("%s: message %q, heartbeat %v (must be kept)", c.Type, c.Message, c.LastHeartbeatTime)
				}
			}
			for i := range tc.in {
				if tc.in[i].Status == corev1.ConditionUnknown {
					t.Error("the input was modified")
				}
			}
			if _, again := unknownConditions(out, at(200)); again {
				t.Error("a second pass must change nothing")
			}
		})
	}
}

func taint(key string, added int) corev1.Taint {
	ts := metav1.NewTime(at(added))
	return corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute, TimeAdded: &ts}
}

func TestWantTaints(t *testing.T) {
	other := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	unreachable, notReady := corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady
	for _, tc := range []struct {
		name           string
		in             []corev1.Taint
		ready          corev1.ConditionStatus
		want           []corev1.Taint
		added, changed bool
	}{
		{"ready, none", []corev1.Taint{other}, corev1.ConditionTrue, []corev1.Taint{other}, false, false},
		{"unknown adds unreachable", []corev1.Taint{other}, corev1.ConditionUnknown, []corev1.Taint{other, taint(unreachable, 9)}, true, true},
		{"false adds not-ready", nil, corev1.ConditionFalse, []corev1.Taint{taint(notReady, 9)}, true, true},
		{"kept with its time", []corev1.Taint{taint(unreachable, 1), other}, corev1.ConditionUnknown, []corev1.Taint{taint(unreachable, 1), other}, false, false},
		{"swap is not rate-limited", []corev1.Taint{taint(unreachable, 1)}, corev1.ConditionFalse, []corev1.Taint{taint(notReady, 9)}, false, true},
		{"ready removes both", []corev1.Taint{taint(unreachable, 1), other, taint(notReady, 2)}, corev1.ConditionTrue, []corev1.Taint{other}, false, true},
		{"a NoSchedule namesake is not ours", []corev1.Taint{{Key: unreachable, Effect: corev1.TaintEffectNoSchedule}}, corev1.ConditionTrue,
			[]corev1.Taint{{Key: unreachable, Effect: corev1.TaintEffectNoSchedule}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, added, changed := wantTaints(tc.in, tc.ready, at(9))
			if added != tc.added || changed != tc.changed {
				t.Errorf("added, changed = %v, %v; want %v, %v", added, changed, tc.added, tc.changed)
			}
			if len(out) != len(tc.want) {
				t.Fatalf("taints = %v, want %v", out, tc.want)
			}
			for i := range out {
				if !out[i].MatchTaint(&tc.want[i]) || !timeAdded(out[i]).Equal(timeAdded(tc.want[i])) {
					t.Errorf("taint %d = %v, want %v", i, out[i].ToString(), tc.want[i].ToString())
				}
			}
		})
	}
}

func timeAdded(t corev1.Taint) time.Time {
	if t.TimeAdded == nil {
		return time.Time{}
	}
	return t.TimeAdded.Time
}

func secs(n int64) *int64 { return &n }

func TestEvictionTime(t *testing.T) {
	timeout := 250 * time.Second
	unreachable := []corev1.Taint{taint(corev1.TaintNodeUnreachable, 10)}
	both := []corev1.Taint{taint(corev1.TaintNodeUnreachable, 10), taint(corev1.TaintNodeNotReady, 100)}
	tolUnreach := func(s *int64) corev1.Toleration {
		return corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: s}
	}
	for _, tc := range []struct {
		name   string
		taints []corev1.Taint
		tols   []corev1.Toleration
		at     int // seconds after t0; -1: never
	}{
		{"no taint", nil, nil, -1},
		{"not ours", []corev1.Taint{taint("example.com/drain", 0)}, nil, -1},
		{"no timeAdded", []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}, nil, -1},
		{"untolerated: the eviction timeout", unreachable, nil, 260},
		{"tolerated forever", unreachable, []corev1.Toleration{tolUnreach(nil)}, -1},
		{"tolerated 60 s", unreachable, []corev1.Toleration{tolUnreach(secs(60))}, 70},
		{"tolerated 0 s", unreachable, []corev1.Toleration{tolUnreach(secs(0))}, 10},
		{"negative is 0", unreachable, []corev1.Toleration{tolUnreach(secs(-5))}, 10},
		{"smallest seconds wins", unreachable, []corev1.Toleration{tolUnreach(nil), tolUnreach(secs(600)), tolUnreach(secs(20))}, 30},
		{"tolerate everything", unreachable, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, -1},
		{"wrong effect does not tolerate", unreachable, []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, 260},
		{"equal with empty value", unreachable, []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}, -1},
		{"equal with another value", unreachable, []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Value: "x"}}, 260},
		{"admission's default: the eviction timeout", unreachable, []corev1.Toleration{tolUnreach(secs(300))}, 260},
		{"default and explicit: smallest", unreachable, []corev1.Toleration{tolUnreach(secs(300)), tolUnreach(secs(100))}, 110},
		{"default and forever: the timeout", unreachable, []corev1.Toleration{tolUnreach(nil), tolUnreach(secs(300))}, 260},
		{"301 s is not the default", unreachable, []corev1.Toleration{tolUnreach(secs(301))}, 311},
		{"both taints, earliest wins", both, []corev1.Toleration{tolUnreach(secs(200))}, 210},
		{"both taints, one tolerated forever", both, []corev1.Toleration{tolUnreach(nil)}, 350},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.tols}}
			got, ok := evictionTime(pod, tc.taints, timeout)
			switch {
			case tc.at < 0 && ok:
				t.Errorf("evicted at %v, want never", got.Sub(t0))
			case tc.at >= 0 && !ok:
				t.Errorf("never evicted, want at %ds", tc.at)
			case tc.at >= 0 && !got.Equal(at(tc.at)):
				t.Errorf("evicted at %v, want %ds", got.Sub(t0), tc.at)
			}
		})
	}
}

func TestNeedsNotReady(t *testing.T) {
	for _, tc := range []struct {
		conds []corev1.PodCondition
		want  bool
	}{
		{nil, false},
		{[]corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}, false},
		{[]corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}, true},
		{[]corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}, false},
	} {
		if got := needsNotReady(&corev1.Pod{Status: corev1.PodStatus{Conditions: tc.conds}}); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.conds, got, tc.want)
		}
	}
}

func TestLimiter(t *testing.T) {
	l := &limiter{interval: 10 * time.Second}
	for _, s := range []struct {
		now   int
		ready bool
		take  bool
	}{
		{0, true, true}, {5, false, false}, {10, true, false}, {11, true, true}, {20, false, false}, {21, true, true},
	} {
		if got := l.ready(at(s.now)); got != s.ready {
			t.Errorf("t=%d: ready = %v", s.now, got)
		}
		if s.take {
			l.took(at(s.now))
		}
	}
}
