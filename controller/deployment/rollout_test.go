package deployment

import (
	"regexp"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestResolveBounds(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { return new(intstr.FromString(s)) }
	num := func(n int) *intstr.IntOrString { return new(intstr.FromInt32(int32(n))) }
	for _, tc := range []struct {
		name                   string
		surge, unavail         *intstr.IntOrString
		replicas               int32
		wantSurge, wantUnavail int32
		wantErr                bool
	}{
		{"defaults of 25% on 3", pct("25%"), pct("25%"), 3, 1, 0, false},
		{"defaults of 25% on 4", pct("25%"), pct("25%"), 4, 1, 1, false},
		{"defaults of 25% on 10", pct("25%"), pct("25%"), 10, 3, 2, false},
		{"surge rounds up", pct("10%"), pct("10%"), 1, 1, 0, false},
		{"both zero: one may be unavailable", num(0), num(0), 5, 0, 1, false},
		{"zero percent both", pct("0%"), pct("0%"), 5, 0, 1, false},
		{"absolute", num(2), num(1), 5, 2, 1, false},
		{"100%", pct("100%"), pct("100%"), 7, 7, 7, false},
		{"zero replicas", pct("25%"), pct("25%"), 0, 0, 1, false},
		{"bad string", pct("abc"), num(1), 3, 0, 0, true},
		{"bad percentage", num(1), pct("x%"), 3, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, u, err := resolveBounds(tc.surge, tc.unavail, tc.replicas)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (s != tc.wantSurge || u != tc.wantUnavail) {
				t.Errorf("got surge %d unavailable %d, want %d %d", s, u, tc.wantSurge, tc.wantUnavail)
			}
		})
	}
}

// rs builds a ReplicaSet of spec size n with avail available pods at revision rev.
func rs(name string, rev string, n, avail int32) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{RevisionAnnotation: rev}},
		Spec:       appsv1.ReplicaSetSpec{Replicas: new(n)},
		Status:     appsv1.ReplicaSetStatus{Replicas: n, AvailableReplicas: avail},
	}
}

func withStatus(rs *appsv1.ReplicaSet, pods int32) *appsv1.ReplicaSet {
	rs.Status.Replicas = pods
	return rs
}

func TestScaleUpTarget(t *testing.T) {
	for _, tc := range []struct {
		name            string
		replicas, surge int32
		newRS           *appsv1.ReplicaSet
		old             []*appsv1.ReplicaSet
		want            int32
	}{
		{"first rollout goes straight to replicas", 3, 1, rs("n", "1", 0, 0), nil, 3},
		{"surge room of one", 3, 1, rs("n", "2", 0, 0), []*appsv1.ReplicaSet{rs("o", "1", 3, 3)}, 1},
		{"no room while old are full", 3, 1, rs("n", "2", 1, 0), []*appsv1.ReplicaSet{rs("o", "1", 3, 3)}, 1},
		{"room after old shrink", 3, 1, rs("n", "2", 1, 1), []*appsv1.ReplicaSet{rs("o", "1", 2, 2)}, 2},
		{"capped at replicas", 3, 5, rs("n", "2", 1, 1), []*appsv1.ReplicaSet{rs("o", "1", 1, 1)}, 3},
		{"bigger than replicas shrinks to replicas", 3, 1, rs("n", "2", 5, 5), nil, 3},
		{"old pods not gone yet", 3, 1, rs("n", "2", 1, 1), []*appsv1.ReplicaSet{withStatus(rs("o", "1", 2, 2), 3)}, 1},
		{"zero surge", 4, 0, rs("n", "2", 0, 0), []*appsv1.ReplicaSet{rs("o", "1", 3, 3)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := append(append([]*appsv1.ReplicaSet{}, tc.old...), tc.newRS)
			if got := scaleUpTarget(tc.replicas, tc.surge, tc.newRS, all); got != tc.want {
				t.Errorf("scaleUpTarget = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestScaleDownPlan(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		replicas, unavailable int32
		newRS                 *appsv1.ReplicaSet
		old                   []*appsv1.ReplicaSet
		want                  map[int]int32
	}{
		{"nothing to lose with zero unavailable and new not ready", 3, 0,
			rs("n", "2", 1, 0), []*appsv1.ReplicaSet{rs("o", "1", 3, 3)}, map[int]int32{}},
		{"new ready lets one old go", 3, 0,
			rs("n", "2", 1, 1), []*appsv1.ReplicaSet{rs("o", "1", 3, 3)}, map[int]int32{0: 2}},
		{"unavailable budget of one", 4, 1,
			rs("n", "2", 1, 0), []*appsv1.ReplicaSet{rs("o", "1", 4, 4)}, map[int]int32{0: 3}},
		{"unhealthy old pods go first, taking the budget", 4, 1,
			rs("n", "3", 1, 0), []*appsv1.ReplicaSet{rs("a", "1", 2, 0), rs("b", "2", 3, 3)}, map[int]int32{0: 0}},
		{"unhealthy old pods first, then available ones", 4, 2,
			rs("n", "3", 1, 0), []*appsv1.ReplicaSet{rs("a", "1", 2, 0), rs("b", "2", 3, 3)}, map[int]int32{0: 0, 1: 2}},
		{"old all gone when new available", 3, 0,
			rs("n", "2", 3, 3), []*appsv1.ReplicaSet{rs("o", "1", 1, 1)}, map[int]int32{0: 0}},
		{"availability floor holds", 3, 1,
			rs("n", "2", 1, 0), []*appsv1.ReplicaSet{rs("o", "1", 2, 2)}, map[int]int32{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := scaleDownPlan(tc.replicas, tc.unavailable, tc.newRS, tc.old)
			if len(got) != len(tc.want) {
				t.Fatalf("plan %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("plan %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestRevisions(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  []*appsv1.ReplicaSet
		want int64
	}{
		{"first", nil, 1},
		{"after one", []*appsv1.ReplicaSet{rs("a", "1", 0, 0)}, 2},
		{"after gaps", []*appsv1.ReplicaSet{rs("a", "7", 0, 0), rs("b", "3", 0, 0)}, 8},
		{"bad annotation counts as 0", []*appsv1.ReplicaSet{rs("a", "x", 0, 0)}, 1},
	} {
		if got := nextRevision(tc.old); got != tc.want {
			t.Errorf("%s: nextRevision = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func template(image string) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
	}
}

func TestTemplateHash(t *testing.T) {
	a, b := TemplateHash(template("one"), nil), TemplateHash(template("one"), nil)
	if a != b {
		t.Errorf("same template hashed to %q and %q", a, b)
	}
	if !regexp.MustCompile(`^[bcdfghjklmnpqrstvwxz2456789]{1,10}$`).MatchString(a) {
		t.Errorf("hash %q is not a short safe string", a)
	}
	for _, other := range []string{TemplateHash(template("two"), nil), TemplateHash(template("one"), new(int32(1)))} {
		if other == a {
			t.Errorf("different input hashed to the same %q", a)
		}
	}
	withHash := template("one")
	withHash.Labels[HashLabel] = a
	if !sameTemplate(withHash, template("one")) || sameTemplate(template("one"), template("two")) {
		t.Error("sameTemplate must ignore only the hash label")
	}
}

func TestToPrune(t *testing.T) {
	old := []*appsv1.ReplicaSet{rs("c", "3", 0, 0), rs("a", "1", 0, 0), rs("b", "2", 1, 1), rs("d", "4", 0, 0)}
	got := toPrune(old, 2)
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "c" {
		t.Errorf("pruned %v, want a and c (b still has pods)", names(got))
	}
	if got := toPrune(old, 10); got != nil {
		t.Errorf("pruned %v under the limit", names(got))
	}
}

func names(rss []*appsv1.ReplicaSet) []string {
	var out []string
	for _, rs := range rss {
		out = append(out, rs.Name)
	}
	return out
}

func TestProgress(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(3)), ProgressDeadlineSeconds: new(int32(60))},
	}
	newRS := rs("web-x", "2", 3, 3)
	done := appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3}
	progress(d, newRS, &done, now)
	if c := getCondition(&done, appsv1.DeploymentProgressing); c == nil || c.Reason != ReasonNewRSAvailable {
		t.Fatalf("complete rollout: condition %+v", c)
	}
	// Stuck since long before the deadline: failed.
	stuck := appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 1, AvailableReplicas: 3,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
			Reason: ReasonRSUpdated, LastUpdateTime: metav1.NewTime(now.Add(-2 * time.Minute))}}}
	d.Status = *stuck.DeepCopy()
	progress(d, newRS, &stuck, now)
	if c := getCondition(&stuck, appsv1.DeploymentProgressing); c.Reason != ReasonProgressDeadlineExceeded || c.Status != corev1.ConditionFalse {
		t.Fatalf("stuck rollout: condition %+v", c)
	}
	// Progress made: the update time moves and the deadline is checked again later.
	moving := *d.Status.DeepCopy()
	moving.UpdatedReplicas = 2
	if after := progress(d, newRS, &moving, now); after <= 0 {
		t.Errorf("no recheck scheduled")
	}
	if c := getCondition(&moving, appsv1.DeploymentProgressing); c.Reason != ReasonRSUpdated || !c.LastUpdateTime.Time.Equal(now) {
		t.Fatalf("moving rollout: condition %+v", c)
	}
}
