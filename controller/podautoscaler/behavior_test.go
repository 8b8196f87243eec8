package podautoscaler

import (
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// step is one sync's decision in a behavior test: at after the start, the target had current
// replicas, the metrics asked for desired, and the count written (want) comes with reasons of
// the AbleToScale and ScalingLimited conditions; scaled records the change as the controller
// does after a successful write.
type step struct {
	after            time.Duration
	current, desired int32
	want             int32
	able, limited    string
}

func rules(window *int32, sel autoscalingv2.ScalingPolicySelect, policies ...autoscalingv2.HPAScalingPolicy) *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: window, SelectPolicy: &sel, Policies: policies}
}

func pods(n, period int32) autoscalingv2.HPAScalingPolicy {
	return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: n, PeriodSeconds: period}
}

func percent(n, period int32) autoscalingv2.HPAScalingPolicy {
	return autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: n, PeriodSeconds: period}
}

// TestNormalize runs sequences of decisions against one HPA's history, on a clock the test
// moves: stabilization windows, policies over their periods, selectPolicy, the legacy rules.
func TestNormalize(t *testing.T) {
	zero, minute := new(int32(0)), new(int32(60))
	for _, tc := range []struct {
		name     string
		behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
		min, max int32
		steps    []step
	}{
		{"legacy: scale down waits for the downscale window", nil, 1, 10, []step{
			{0, 4, 1, 4, "ScaleDownStabilized", "DesiredWithinRange"},
			{4 * time.Minute, 4, 2, 4, "ScaleDownStabilized", "DesiredWithinRange"},
			// The first recommendation (4) has left the 5 minute window; the 2 of minute 4 has not.
			{5*time.Minute + time.Second, 4, 1, 2, "ScaleDownStabilized", "DesiredWithinRange"},
			{10 * time.Minute, 2, 1, 1, "ReadyForNewScale", "DesiredWithinRange"},
		}},
		{"legacy: scale up doubles (at least to 4) per sync, within max", nil, 1, 10, []step{
			{0, 1, 9, 4, "ReadyForNewScale", "ScaleUpLimit"},
			{15 * time.Second, 4, 9, 8, "ReadyForNewScale", "ScaleUpLimit"},
			{30 * time.Second, 8, 20, 10, "ReadyForNewScale", "TooManyReplicas"},
		}},
		{"legacy: min replicas", nil, 3, 10, []step{{0, 3, 1, 3, "ScaleDownStabilized", "DesiredWithinRange"}, {6 * time.Minute, 3, 1, 3, "ReadyForNewScale", "TooFewReplicas"}}},
		{"scale-up window takes the lowest recent recommendation", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(minute, autoscalingv2.MaxChangePolicySelect, pods(100, 15)), ScaleDown: rules(zero, autoscalingv2.MaxChangePolicySelect, percent(100, 15))}, 1, 20, []step{
			{0, 2, 6, 2, "ScaleUpStabilized", "DesiredWithinRange"},
			{30 * time.Second, 2, 8, 2, "ScaleUpStabilized", "DesiredWithinRange"},
			// The recommendations of the start (2 and 6) are out of the window; the lowest since is 8.
			{61 * time.Second, 2, 9, 8, "ScaleUpStabilized", "DesiredWithinRange"},
			{2 * time.Minute, 8, 9, 9, "ReadyForNewScale", "DesiredWithinRange"},
		}},
		{"scale-down window takes the highest recent recommendation", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.MaxChangePolicySelect, pods(4, 15)), ScaleDown: rules(minute, autoscalingv2.MaxChangePolicySelect, percent(100, 15))}, 1, 20, []step{
			{0, 8, 2, 8, "ScaleDownStabilized", "DesiredWithinRange"},
			{30 * time.Second, 8, 5, 8, "ScaleDownStabilized", "DesiredWithinRange"},
			{61 * time.Second, 8, 1, 5, "ScaleDownStabilized", "DesiredWithinRange"},
			{2 * time.Minute, 5, 1, 1, "ReadyForNewScale", "DesiredWithinRange"},
		}},
		{"no scale-down window given: the flag's", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleDown: &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{percent(100, 15)}}}, 1, 20, []step{
			{0, 8, 2, 8, "ScaleDownStabilized", "DesiredWithinRange"},
			{4 * time.Minute, 8, 2, 8, "ScaleDownStabilized", "DesiredWithinRange"},
			{5*time.Minute + time.Second, 8, 2, 2, "ReadyForNewScale", "DesiredWithinRange"},
		}},
		// Max: the policy allowing more; changes made within a policy's period count against it.
		{"scale-up policies, Max", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.MaxChangePolicySelect, pods(4, 60), percent(100, 60)), ScaleDown: rules(zero, autoscalingv2.MaxChangePolicySelect, percent(100, 15))}, 1, 100, []step{
			{0, 2, 20, 6, "ReadyForNewScale", "ScaleUpLimit"},                 // 2+4 beats 2×2
			{10 * time.Second, 6, 20, 6, "ReadyForNewScale", "ScaleUpLimit"},  // the period began at 2: nothing more yet
			{61 * time.Second, 6, 20, 12, "ReadyForNewScale", "ScaleUpLimit"}, // 6×2 beats 6+4
			{2*time.Minute + 2*time.Second, 12, 20, 20, "ReadyForNewScale", "DesiredWithinRange"},
		}},
		{"scale-up policies, Min", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.MinChangePolicySelect, pods(4, 60), percent(100, 60)), ScaleDown: rules(zero, autoscalingv2.MaxChangePolicySelect, percent(100, 15))}, 1, 100, []step{
			{0, 2, 20, 4, "ReadyForNewScale", "ScaleUpLimit"},
			{61 * time.Second, 4, 20, 8, "ReadyForNewScale", "ScaleUpLimit"},
		}},
		{"percent rounds up so one pod can grow", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.MaxChangePolicySelect, percent(10, 60)), ScaleDown: rules(zero, autoscalingv2.MaxChangePolicySelect, percent(100, 15))}, 1, 100, []step{
			{0, 1, 5, 2, "ReadyForNewScale", "ScaleUpLimit"},
		}},
		{"scale up disabled", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.DisabledPolicySelect, pods(4, 60)), ScaleDown: rules(zero, autoscalingv2.MaxChangePolicySelect, percent(100, 15))}, 1, 100, []step{
			{0, 2, 20, 2, "ReadyForNewScale", "ScaleUpLimit"},
			{time.Hour, 2, 1, 1, "ReadyForNewScale", "DesiredWithinRange"},
		}},
		{"scale-down policies, Max and Min", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.MaxChangePolicySelect, pods(4, 15)), ScaleDown: rules(zero, autoscalingv2.MaxChangePolicySelect, pods(1, 60), percent(50, 60))}, 1, 100, []step{
			{0, 10, 1, 5, "ReadyForNewScale", "ScaleDownLimit"}, // 10×50% beats 10−1
			{10 * time.Second, 5, 1, 5, "ReadyForNewScale", "ScaleDownLimit"},
			{61 * time.Second, 5, 1, 2, "ReadyForNewScale", "ScaleDownLimit"}, // int(5×50%)
		}},
		{"scale-down policies, Min", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.MaxChangePolicySelect, pods(4, 15)), ScaleDown: rules(zero, autoscalingv2.MinChangePolicySelect, pods(1, 60), percent(50, 60))}, 1, 100, []step{
			{0, 10, 1, 9, "ReadyForNewScale", "ScaleDownLimit"},
			{61 * time.Second, 9, 1, 8, "ReadyForNewScale", "ScaleDownLimit"},
		}},
		{"scale down disabled, min and max still hold", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.MaxChangePolicySelect, pods(4, 15)), ScaleDown: rules(zero, autoscalingv2.DisabledPolicySelect, percent(100, 15))}, 2, 6, []step{
			{0, 5, 1, 5, "ReadyForNewScale", "ScaleDownLimit"},
			{time.Minute, 5, 9, 6, "ReadyForNewScale", "TooManyReplicas"},
		}},
		{"down to the minimum", &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: rules(zero, autoscalingv2.MaxChangePolicySelect, pods(4, 15)), ScaleDown: rules(zero, autoscalingv2.MaxChangePolicySelect, percent(100, 15))}, 3, 10, []step{
			{0, 8, 1, 3, "ReadyForNewScale", "TooFewReplicas"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(5 * time.Minute)
			for i, s := range tc.steps {
				at := now.Add(s.after)
				h.start("ns/hpa", s.current, at)
				n := h.normalize("ns/hpa", tc.behavior, s.current, s.desired, tc.min, tc.max, at)
				if n.replicas != s.want || n.able.reason != s.able || n.limited.reason != s.limited {
					t.Fatalf("step %d (%v: %d → %d): %d, %s, %s; want %d, %s, %s", i, s.after, s.current, s.desired,
						n.replicas, n.able.reason, n.limited.reason, s.want, s.able, s.limited)
				}
				// ScalingLimited is true exactly when the bounds changed the stabilized count.
				if limited := n.limited.status == corev1.ConditionTrue; limited != (s.limited != "DesiredWithinRange") {
					t.Errorf("step %d: ScalingLimited %s with reason %s", i, n.limited.status, n.limited.reason)
				}
				h.recordScale("ns/hpa", tc.behavior, s.current, n.replicas, at)
			}
		})
	}
}

// TestHistoryForget: a deleted HPA's history goes; a new one of the same name starts from its
// target's count.
func TestHistoryForget(t *testing.T) {
	h := newHistory(5 * time.Minute)
	h.start("ns/hpa", 8, now)
	if n := h.normalize("ns/hpa", nil, 8, 2, 1, 10, now.Add(time.Second)); n.replicas != 8 {
		t.Fatalf("stabilized to %d, want 8", n.replicas)
	}
	h.forget("ns/hpa")
	h.start("ns/hpa", 2, now.Add(2*time.Second))
	if n := h.normalize("ns/hpa", nil, 2, 2, 1, 10, now.Add(3*time.Second)); n.replicas != 2 || n.able.reason != "ReadyForNewScale" {
		t.Errorf("after forget: %d %s", n.replicas, n.able.reason)
	}
}

func TestTolerances(t *testing.T) {
	c := &Controller{o: *DefaultOptions()}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	if got := c.tolerances(hpa); got != (tolerances{down: 0.1, up: 0.1}) {
		t.Errorf("default %+v", got)
	}
	hpa.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{Tolerance: new(resource.MustParse("50m"))}}
	if got := c.tolerances(hpa); got != (tolerances{down: 0.1, up: 0.05}) {
		t.Errorf("scale-up tolerance of the behavior: %+v", got)
	}
}
