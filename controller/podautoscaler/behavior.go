package podautoscaler

import (
	"math"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
)

// From the metrics' proposal to the replica count written. The controller remembers, per
// HPA, its recent unstabilized recommendations and (with spec.behavior) the scale changes it
// made; both are kept in memory only, as in Kubernetes: a restarted controller starts over,
// with the target's current count as its first recommendation.
//
// Without spec.behavior (the legacy rules), a scale down takes the highest recommendation of
// the last --horizontal-pod-autoscaler-downscale-stabilization, and a scale up may at most
// double the count (and go to at least 4) per sync. With spec.behavior, each direction has a
// stabilization window (scale up takes the lowest recommendation within its window, scale
// down the highest within its own) and policies limiting the change over a period: Pods (a
// number of pods) or Percent (of the count at the period's start), the policy allowing the
// most change (selectPolicy Max), the least (Min), or none (Disabled). The count is then kept
// within minReplicas and maxReplicas.

// condition is one status condition to set.
type condition struct {
	status  corev1.ConditionStatus
	reason  string
	message string
}

// normalized is the count to write and the AbleToScale and ScalingLimited conditions saying
// how it was reached.
type normalized struct {
	replicas int32
	able     condition
	limited  condition
}

type recommendation struct {
	replicas int32
	at       time.Time
}

// scaleEvent is one change of the target's count made by the controller.
type scaleEvent struct {
	change int32 // pods added or removed, never negative
	at     time.Time
}

// hpaHistory is what one HPA's decisions look back on.
type hpaHistory struct {
	recommendations []recommendation
	up, down        []scaleEvent
}

// history holds every HPA's, by HPA key.
type history struct {
	mu    sync.Mutex
	byKey map[string]*hpaHistory
	// downscaleWindow is --horizontal-pod-autoscaler-downscale-stabilization: the legacy
	// rules' window and a behavior's scale-down window when it gives none.
	downscaleWindow time.Duration
}

func newHistory(downscaleWindow time.Duration) *history {
	return &history{byKey: map[string]*hpaHistory{}, downscaleWindow: downscaleWindow}
}

func (h *history) of(key string) *hpaHistory {
	e := h.byKey[key]
	if e == nil {
		e = &hpaHistory{}
		h.byKey[key] = e
	}
	return e
}

// forget drops a deleted HPA's history.
func (h *history) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byKey, key)
}

// start records the target's current count as the HPA's first recommendation, so that the
// first decisions after an HPA appears (or the controller restarts) do not scale it down at
// once within the stabilization window.
func (h *history) start(key string, current int32, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.of(key); len(e.recommendations) == 0 {
		e.recommendations = []recommendation{{current, now}}
	}
}

// normalize turns the metrics' proposal (desired) into the count to write.
func (h *history) normalize(key string, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, current, desired, minReplicas, maxReplicas int32, now time.Time) normalized {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.of(key)
	var n normalized
	var stabilized int32
	if behavior == nil {
		stabilized = e.stabilizeDown(desired, now, h.downscaleWindow)
		if stabilized != desired {
			n.able = condition{corev1.ConditionTrue, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"}
		}
		n.replicas, n.limited = legacyLimits(current, stabilized, minReplicas, maxReplicas)
	} else {
		up, down := rulesOf(behavior, h.downscaleWindow)
		var reason, message string
		stabilized, reason, message = e.stabilize(current, desired, up, down, now)
		if stabilized != desired {
			n.able = condition{corev1.ConditionTrue, reason, message}
		}
		n.replicas, n.limited = e.rateLimits(current, stabilized, minReplicas, maxReplicas, up, down, now)
	}
	if n.able.reason == "" {
		n.able = condition{corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size"}
	}
	n.limited.status = corev1.ConditionFalse
	if n.replicas != stabilized {
		n.limited.status = corev1.ConditionTrue
	}
	return n
}

// recordScale remembers a change the controller made, for the behavior's policies. Changes
// older than the longest period of their direction's policies are forgotten.
func (h *history) recordScale(key string, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, from, to int32, now time.Time) {
	if behavior == nil || from == to {
		return // the legacy rules look at no past changes
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.of(key)
	up, down := rulesOf(behavior, h.downscaleWindow)
	if to > from {
		e.up = append(recent(e.up, longestPeriod(up), now), scaleEvent{to - from, now})
	} else {
		e.down = append(recent(e.down, longestPeriod(down), now), scaleEvent{from - to, now})
	}
}

func recent(events []scaleEvent, period time.Duration, now time.Time) []scaleEvent {
	cutoff := now.Add(-period)
	kept := events[:0]
	for _, ev := range events {
		if !ev.at.Before(cutoff) {
			kept = append(kept, ev)
		}
	}
	return kept
}

func longestPeriod(r *autoscalingv2.HPAScalingRules) time.Duration {
	var longest int32
	for _, p := range r.Policies {
		longest = max(longest, p.PeriodSeconds)
	}
	return seconds(longest)
}

func seconds(s int32) time.Duration { return time.Duration(s) * time.Second }

// stabilizeDown is the legacy rules' stabilization: the highest recommendation within window
// (this one included), which it then records.
func (e *hpaHistory) stabilizeDown(desired int32, now time.Time, window time.Duration) int32 {
	cutoff := now.Add(-window)
	highest := desired
	kept := e.recommendations[:0]
	for _, r := range e.recommendations {
		if r.at.Before(cutoff) {
			continue
		}
		kept = append(kept, r)
		highest = max(highest, r.replicas)
	}
	e.recommendations = append(kept, recommendation{desired, now})
	return highest
}

// stabilize is a behavior's stabilization: the count moves towards desired no further than
// the lowest recommendation of the scale-up window (up) and the highest of the scale-down
// window (down) allow. It records desired unstabilized.
func (e *hpaHistory) stabilize(current, desired int32, up, down *autoscalingv2.HPAScalingRules, now time.Time) (int32, string, string) {
	upCutoff := now.Add(-seconds(deref(up.StabilizationWindowSeconds, 0)))
	downCutoff := now.Add(-seconds(deref(down.StabilizationWindowSeconds, 0)))
	lowest, highest := desired, desired
	kept := e.recommendations[:0]
	for _, r := range e.recommendations {
		if r.at.After(upCutoff) {
			lowest = min(lowest, r.replicas)
		}
		if r.at.After(downCutoff) {
			highest = max(highest, r.replicas)
		}
		if r.at.Before(upCutoff) && r.at.Before(downCutoff) {
			continue // outside both windows: never looked at again
		}
		kept = append(kept, r)
	}
	e.recommendations = append(kept, recommendation{desired, now})
	stabilized := min(max(current, lowest), highest)
	if desired >= current {
		return stabilized, "ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation"
	}
	return stabilized, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"
}

// legacyLimits keeps desired within minReplicas, maxReplicas and the legacy scale-up limit.
func legacyLimits(current, desired, minReplicas, maxReplicas int32) (int32, condition) {
	limit := int32(math.Max(2*float64(current), 4))
	ceiling := condition{reason: "TooManyReplicas", message: "the desired replica count is more than the maximum replica count"}
	if maxReplicas > limit {
		ceiling = condition{reason: "ScaleUpLimit", message: "the desired replica count is increasing faster than the maximum scale rate"}
	} else {
		limit = maxReplicas
	}
	switch {
	case desired < minReplicas:
		return minReplicas, condition{reason: "TooFewReplicas", message: "the desired replica count is less than the minimum replica count"}
	case desired > limit:
		return limit, ceiling
	}
	return desired, withinRange
}

var withinRange = condition{reason: "DesiredWithinRange", message: "the desired count is within the acceptable range"}

// rateLimits keeps desired within what the policies of its direction allow now, and within
// minReplicas and maxReplicas.
func (e *hpaHistory) rateLimits(current, desired, minReplicas, maxReplicas int32, up, down *autoscalingv2.HPAScalingRules, now time.Time) (int32, condition) {
	switch {
	case desired > current:
		limit := max(scaleUpLimit(current, e.up, e.down, up, now), current) // never below the current count
		if maxReplicas > limit {
			if desired > limit {
				return limit, condition{reason: "ScaleUpLimit", message: "the desired replica count is increasing faster than the maximum scale rate"}
			}
		} else if desired > maxReplicas {
			return maxReplicas, condition{reason: "TooManyReplicas", message: "the desired replica count is more than the maximum replica count"}
		}
	case desired < current:
		limit := min(scaleDownLimit(current, e.up, e.down, down, now), current) // never above the current count
		if minReplicas < limit {
			if desired < limit {
				return limit, condition{reason: "ScaleDownLimit", message: "the desired replica count is decreasing faster than the maximum scale rate"}
			}
		} else if desired < minReplicas {
			return minReplicas, condition{reason: "TooFewReplicas", message: "the desired replica count is less than the minimum replica count"}
		}
	}
	return desired, withinRange
}

// changedWithin sums the changes of events within period of now.
func changedWithin(events []scaleEvent, period time.Duration, now time.Time) int32 {
	cutoff := now.Add(-period)
	var sum int32
	for _, ev := range events {
		if ev.at.After(cutoff) {
			sum += ev.change
		}
	}
	return sum
}

// periodStart is the count at the start of a policy's period: the current one without the
// changes made since.
func periodStart(current int32, up, down []scaleEvent, period time.Duration, now time.Time) int32 {
	return current - changedWithin(up, period, now) + changedWithin(down, period, now)
}

// scaleUpLimit is the highest count the scale-up policies allow now.
func scaleUpLimit(current int32, up, down []scaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time) int32 {
	sel := deref(rules.SelectPolicy, autoscalingv2.MaxChangePolicySelect)
	if sel == autoscalingv2.DisabledPolicySelect {
		return current
	}
	pick, limit := larger, int32(math.MinInt32) // Max: the policy allowing the most pods
	if sel == autoscalingv2.MinChangePolicySelect {
		pick, limit = smaller, math.MaxInt32
	}
	for _, p := range rules.Policies {
		start := periodStart(current, up, down, seconds(p.PeriodSeconds), now)
		var allowed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			allowed = start + p.Value
		case autoscalingv2.PercentScalingPolicy:
			// Rounded up: a small count must still be able to grow.
			allowed = int32(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		default:
			continue
		}
		limit = pick(limit, allowed)
	}
	return limit
}

// scaleDownLimit is the lowest count the scale-down policies allow now.
func scaleDownLimit(current int32, up, down []scaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time) int32 {
	sel := deref(rules.SelectPolicy, autoscalingv2.MaxChangePolicySelect)
	if sel == autoscalingv2.DisabledPolicySelect {
		return current
	}
	pick, limit := smaller, int32(math.MaxInt32) // Max: the policy allowing the most pods removed
	if sel == autoscalingv2.MinChangePolicySelect {
		pick, limit = larger, math.MinInt32
	}
	for _, p := range rules.Policies {
		start := periodStart(current, up, down, seconds(p.PeriodSeconds), now)
		var allowed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			allowed = start - p.Value
		case autoscalingv2.PercentScalingPolicy:
			allowed = int32(float64(start) * (1 - float64(p.Value)/100))
		default:
			continue
		}
		limit = pick(limit, allowed)
	}
	return limit
}

// rulesOf returns a behavior's rules for each direction, with defaults for what the API left
// unset (it fills them for objects it stores; these cover others): the default rules for a
// missing direction, and for scale down the flag's window when the rules give none.
func rulesOf(b *autoscalingv2.HorizontalPodAutoscalerBehavior, downscaleWindow time.Duration) (up, down *autoscalingv2.HPAScalingRules) {
	up, down = b.ScaleUp, b.ScaleDown
	if up == nil {
		up = &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(0)), Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15}, {Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}}
	}
	if down == nil {
		down = &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}}
	}
	if down.StabilizationWindowSeconds == nil {
		d := *down
		d.StabilizationWindowSeconds = new(int32(downscaleWindow / time.Second))
		down = &d
	}
	return up, down
}

func larger(a, b int32) int32  { return max(a, b) }
func smaller(a, b int32) int32 { return min(a, b) }

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
