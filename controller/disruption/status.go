package disruption

import (
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The arithmetic of a budget's status, free of the API: what the sync computes from the pods
// it lists and the scale of their controllers.

// DeletionTimeout is how long a pod the eviction subresource recorded in status.disruptedPods
// counts as gone without being deleted; past it, the eviction is taken to have failed and the
// pod counts again.
const DeletionTimeout = 2 * time.Minute

// need returns the budget's expectedPods and desiredHealthy. matching is the number of pods
// its selector matches; scale returns the summed scale of those pods' controllers, and is
// called only when the spec needs it: for maxUnavailable, and for minAvailable as a percent.
// Percentages round up, so that a budget never asks for less than it says.
func need(spec *policyv1.PodDisruptionBudgetSpec, matching int, scale func() (int32, error)) (expected, desired int32, err error) {
	switch {
	case spec.MaxUnavailable != nil:
		if expected, err = scale(); err != nil {
			return 0, 0, err
		}
		unavailable, err := intstr.GetScaledValueFromIntOrPercent(spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0, 0, err
		}
		return expected, max(expected-int32(unavailable), 0), nil
	case spec.MinAvailable != nil && spec.MinAvailable.Type == intstr.Int:
		// A count needs no controller: the pods the selector matches are what is expected.
		return int32(matching), spec.MinAvailable.IntVal, nil
	case spec.MinAvailable != nil:
		if expected, err = scale(); err != nil {
			return 0, 0, err
		}
		available, err := intstr.GetScaledValueFromIntOrPercent(spec.MinAvailable, int(expected), true)
		if err != nil {
			return 0, 0, err
		}
		return expected, int32(available), nil
	}
	return 0, 0, nil
}

// allowed is status.disruptionsAllowed: the healthy pods beyond those desired. None while no
// pods are expected, so that a budget whose first pods appear before it is synced is safe.
func allowed(currentHealthy, desiredHealthy, expected int32) int32 {
	if expected <= 0 || currentHealthy <= desiredHealthy {
		return 0
	}
	return currentHealthy - desiredHealthy
}

// healthy counts the Ready pods that are neither being deleted nor recently evicted.
func healthy(pods []*corev1.Pod, disrupted map[string]metav1.Time, now time.Time) int32 {
	var n int32
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if at, ok := disrupted[p.Name]; ok && at.Add(DeletionTimeout).After(now) {
			continue
		}
		if podReady(p) {
			n++
		}
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stillDisrupted returns the entries of status.disruptedPods to keep: those of matching pods
// that are not being deleted yet and were evicted less than DeletionTimeout ago. The others
// go: a pod deleted or gone needs no entry, and one not deleted in time was not evicted after
// all (those are returned as late, for an event). recheck is when the first kept entry
// expires (zero if none is kept).
func stillDisrupted(pods []*corev1.Pod, recorded map[string]metav1.Time, now time.Time) (kept map[string]metav1.Time, late []*corev1.Pod, recheck time.Time) {
	kept = map[string]metav1.Time{}
	if len(recorded) == 0 {
		return kept, nil, time.Time{}
	}
	for _, p := range pods {
		at, ok := recorded[p.Name]
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		expires := at.Add(DeletionTimeout)
		if expires.Before(now) {
			late = append(late, p)
			continue
		}
		kept[p.Name] = at
		if recheck.IsZero() || expires.Before(recheck) {
			recheck = expires
		}
	}
	return kept, late, recheck
}

// computed is what one sync found about a budget.
type computed struct {
	expected, desired, current int32
	disrupted                  map[string]metav1.Time
}

// nextStatus returns the status the budget should have, and whether it differs from the one
// it has. The DisruptionAllowed condition follows disruptionsAllowed; it keeps its transition
// time while its status stays.
func nextStatus(pdb *policyv1.PodDisruptionBudget, c computed) (policyv1.PodDisruptionBudgetStatus, bool) {
	old := &pdb.Status
	st := policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation,
		DisruptedPods:      c.disrupted,
		DisruptionsAllowed: allowed(c.current, c.desired, c.expected),
		CurrentHealthy:     c.current,
		DesiredHealthy:     c.desired,
		ExpectedPods:       c.expected,
		Conditions:         cloneConditions(old.Conditions),
	}
	setAllowedCondition(&st)
	return st, !statusEqual(old, &st)
}

// statusEqual reports whether two statuses say the same.
func statusEqual(a, b *policyv1.PodDisruptionBudgetStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration && a.DisruptionsAllowed == b.DisruptionsAllowed &&
		a.CurrentHealthy == b.CurrentHealthy && a.DesiredHealthy == b.DesiredHealthy && a.ExpectedPods == b.ExpectedPods &&
		maps.EqualFunc(a.DisruptedPods, b.DisruptedPods, sameTime) && apiequality.Semantic.DeepEqual(a.Conditions, b.Conditions)
}

func sameTime(a, b metav1.Time) bool { return a.Equal(&b) }

// setAllowedCondition sets DisruptionAllowed from disruptionsAllowed: True (SufficientPods)
// when some are allowed, False (InsufficientPods) otherwise.
func setAllowedCondition(st *policyv1.PodDisruptionBudgetStatus) {
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
		Reason: policyv1.InsufficientPodsReason, ObservedGeneration: st.ObservedGeneration}
	if st.DisruptionsAllowed > 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, policyv1.SufficientPodsReason
	}
	setCondition(st, cond)
}

// failedStatus is the status a budget gets when its sync fails: no disruption allowed, and
// why in the DisruptionAllowed condition (SyncFailed), so that evictions are refused safely
// and say so.
func failedStatus(pdb *policyv1.PodDisruptionBudget, err error) policyv1.PodDisruptionBudgetStatus {
	st := *pdb.Status.DeepCopy()
	st.DisruptionsAllowed = 0
	setCondition(&st, metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
		Reason: policyv1.SyncFailedReason, Message: err.Error(), ObservedGeneration: st.ObservedGeneration})
	return st
}

// setCondition replaces the condition of cond's type; its transition time is now unless the
// status stays the same.
func setCondition(st *policyv1.PodDisruptionBudgetStatus, cond metav1.Condition) {
	if st.Conditions == nil {
		st.Conditions = []metav1.Condition{}
	}
	apimeta.SetStatusCondition(&st.Conditions, cond)
}

func cloneConditions(c []metav1.Condition) []metav1.Condition {
	if c == nil {
		return nil
	}
	out := make([]metav1.Condition, len(c))
	copy(out, c)
	return out
}

// notDeletedMessage is the warning event on a pod an eviction recorded but that was not
// deleted in time.
func notDeletedMessage(pdb *policyv1.PodDisruptionBudget) string {
	return fmt.Sprintf("Pod was expected by PDB %s/%s to be deleted but it wasn't", pdb.Namespace, pdb.Name)
}
