package job

import (
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// failureVerdict is what a Job's podFailurePolicy says of one failed pod.
type failureVerdict struct {
	// action is the matching rule's action; "" when no rule matched (the pod counts).
	action batchv1.PodFailurePolicyAction
	// failJob, for FailJob, says which container or condition matched which rule.
	failJob string
}

// counts reports whether the failure counts towards the backoff limit.
func (v failureVerdict) counts() bool { return v.action != batchv1.PodFailurePolicyActionIgnore }

// judgeFailure applies policy (nil: every failure counts) to a failed pod: the first rule
// that matches decides.
func judgeFailure(policy *batchv1.PodFailurePolicy, p *corev1.Pod) failureVerdict {
	if policy == nil {
		return failureVerdict{}
	}
	for i, r := range policy.Rules {
		var what string
		switch {
		case r.OnExitCodes != nil:
			cs := matchExitCodes(p, r.OnExitCodes)
			if cs == nil {
				continue
			}
			what = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %d", cs.Name, p.Namespace, p.Name, cs.State.Terminated.ExitCode)
		case len(r.OnPodConditions) > 0:
			c := matchConditions(p, r.OnPodConditions)
			if c == nil {
				continue
			}
			what = fmt.Sprintf("Pod %s/%s has condition %s", p.Namespace, p.Name, c.Type)
		default:
			continue
		}
		v := failureVerdict{action: r.Action}
		if r.Action == batchv1.PodFailurePolicyActionFailJob {
			v.failJob = fmt.Sprintf("%s matching %s rule at index %d", what, r.Action, i)
		}
		return v
	}
	return failureVerdict{}
}

// matchExitCodes returns the first terminated container (then init container) whose non-zero
// exit code the requirement matches.
func matchExitCodes(p *corev1.Pod, r *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range list {
			cs := &list[i]
			t := cs.State.Terminated
			if t == nil || t.ExitCode == 0 || (r.ContainerName != nil && *r.ContainerName != cs.Name) {
				continue
			}
			in := slices.Contains(r.Values, t.ExitCode)
			if (r.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && in) || (r.Operator == batchv1.PodFailurePolicyOnExitCodesOpNotIn && !in) {
				return cs
			}
		}
	}
	return nil
}

func matchConditions(p *corev1.Pod, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		for _, want := range patterns {
			if c.Type == want.Type && c.Status == want.Status {
				return &p.Status.Conditions[i]
			}
		}
	}
	return nil
}

// successPolicyMet returns the message of the first rule of policy that succeeded (the
// indexes done) satisfy, or "" when none does.
func successPolicyMet(policy *batchv1.SuccessPolicy, completions int, done indexSet) string {
	if policy == nil {
		return ""
	}
	for ruleIndex, r := range policy.Rules {
		var n int
		if r.SucceededIndexes != nil {
			for _, i := range parseIndexSet(*r.SucceededIndexes, completions).list() {
				if done.has(i) {
					n++
				}
			}
			if r.SucceededCount == nil && n < parseIndexSet(*r.SucceededIndexes, completions).total() {
				continue
			}
		} else {
			n = done.total()
		}
		if r.SucceededCount != nil && n < int(*r.SucceededCount) {
			continue
		}
		return fmt.Sprintf("Matched rules at index %d", ruleIndex)
	}
	return ""
}

// Pod-failure backoff: after the n-th failure in a row (since the last success) no pod is
// created for base·2^(n-1), at most maxBackoff, counted from the last failure.
const (
	backoffBase = 10 * time.Second
	backoffMax  = 6 * time.Minute
)

// backoff is the pod-failure backoff: base·2^(n-1) after n failures in a row, at most max.
type backoff struct{ base, max time.Duration }

var defaultBackoff = backoff{backoffBase, backoffMax}

// remaining is how long pod creation must still wait after failures among pods.
func (b backoff) remaining(pods []*corev1.Pod, now time.Time) time.Duration {
	type finish struct {
		at     time.Time
		failed bool
	}
	var finished []finish
	for _, p := range pods {
		switch p.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			finished = append(finished, finish{finishTime(p), p.Status.Phase == corev1.PodFailed})
		}
	}
	slices.SortStableFunc(finished, func(a, b finish) int { return a.at.Compare(b.at) })
	failures := 0
	var last time.Time
	for i := len(finished) - 1; i >= 0 && finished[i].failed; i-- {
		failures++
		if finished[i].at.After(last) {
			last = finished[i].at
		}
	}
	if failures == 0 {
		return 0
	}
	wait := b.max
	if failures <= 30 { // beyond, the shift would overflow; the cap is far below anyway
		wait = min(b.base<<(failures-1), b.max)
	}
	return max(last.Add(wait).Sub(now), 0)
}

// finishTime is when a finished pod's last container ended, else its Ready condition's
// last change, else its creation.
func finishTime(p *corev1.Pod) time.Time {
	var t time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if term := cs.State.Terminated; term != nil && term.FinishedAt.After(t) {
			t = term.FinishedAt.Time
		}
	}
	if !t.IsZero() {
		return t
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	return p.CreationTimestamp.Time
}
