package disruption

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/reconcile"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sync brings one budget's status in step with its pods. A sync that fails for any reason
// but a stale read (a conflict) leaves the budget allowing no disruption, with the reason in
// its DisruptionAllowed condition, and is retried.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil // not a key of ours: nothing will ever make it one
	}
	pdb, err := c.pdbs.Lister().Namespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	recheck, err := c.syncBudget(ctx, pdb)
	switch {
	case err == nil:
		return reconcile.After(recheck), nil
	case apierrors.IsConflict(err):
		return reconcile.Result{}, err // the newer state is on its way: sync that one
	}
	slog.Info("PodDisruptionBudget sync failed; allowing no disruption", "controller", Name, "key", key, "err", err)
	if ferr := c.writeStatus(ctx, pdb, failedStatus(pdb, err)); ferr != nil {
		return reconcile.Result{}, ferr
	}
	return reconcile.Result{}, err
}

// syncBudget computes and writes the budget's status. It returns when the budget must be
// looked at again without any change: when the first recorded eviction expires.
func (c *Controller) syncBudget(ctx context.Context, pdb *policyv1.PodDisruptionBudget) (time.Duration, error) {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "NoPods", "Failed to get pods: %v", err)
		return 0, err
	}
	pods := c.pods.Lister().Namespace(pdb.Namespace).List(sel)
	if len(pods) == 0 {
		c.recorder.Eventf(pdb, corev1.EventTypeNormal, "NoPods", "No matching pods found")
	}
	expected, desired, err := need(&pdb.Spec, len(pods), func() (int32, error) {
		n, unmanaged, err := c.expectedScale(ctx, pods)
		if err == nil && len(unmanaged) > 0 {
			// They count for nothing: only a count (minAvailable as an integer) covers them.
			c.recorder.Eventf(pdb, corev1.EventTypeWarning, "UnmanagedPods", "Pods selected by this PodDisruptionBudget (selector: %v) were found "+
				"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "+
				"To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.", pdb.Spec.Selector)
		}
		return n, err
	})
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: %v", err)
		return 0, err
	}
	now := c.now()
	disrupted, late, recheck := stillDisrupted(pods, pdb.Status.DisruptedPods, now)
	for _, p := range late {
		c.recorder.Eventf(p, corev1.EventTypeWarning, "NotDeleted", "%s", notDeletedMessage(pdb))
	}
	st, changed := nextStatus(pdb, computed{expected: expected, desired: desired, current: healthy(pods, disrupted, now), disrupted: disrupted})
	if changed {
		if err := c.writeStatus(ctx, pdb, st); err != nil {
			return 0, err
		}
	}
	if recheck.IsZero() {
		return 0, nil
	}
	return max(recheck.Sub(now), time.Millisecond), nil
}

// writeStatus writes st as the budget's status, unless it has it already; a conflict means
// the cache is behind and the sync is to be repeated.
func (c *Controller) writeStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, st policyv1.PodDisruptionBudgetStatus) error {
	if statusEqual(&pdb.Status, &st) {
		return nil
	}
	next := pdb.DeepCopy()
	next.Status = st
	_, err := client.Resource[*policyv1.PodDisruptionBudget](c.client, "poddisruptionbudgets").Namespace(pdb.Namespace).UpdateStatus(ctx, next)
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	return err
}

// staleCondition reports whether the pod carries a DisruptionTarget condition an eviction
// (or anything else but its node) set, without being deleted since; wait is how long until it
// counts as stale. Finished pods keep theirs.
func (c *Controller) staleCondition(p *corev1.Pod) (wait time.Duration, ok bool) {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return 0, false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type != corev1.DisruptionTarget {
			continue
		}
		// The node agent's own condition may rightly stay long before the pod ends.
		if cond.Status != corev1.ConditionTrue || cond.Reason == corev1.PodReasonTerminationByKubelet {
			return 0, false
		}
		return max(c.staleAfter-c.now().Sub(cond.LastTransitionTime.Time), 0), true
	}
	return 0, false
}

// syncPodCondition sets a stale DisruptionTarget condition of pod key ("ns/name") to False:
// the eviction that set it did not delete the pod, which stays.
func (c *Controller) syncPodCondition(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil
	}
	pod, err := c.pods.Lister().Namespace(ns).Get(name)
	if err != nil {
		return reconcile.Result{}, nil // gone: nothing to clear
	}
	wait, ok := c.staleCondition(pod)
	switch {
	case !ok:
		return reconcile.Result{}, nil
	case wait > 0:
		return reconcile.After(wait), nil
	}
	next := pod.DeepCopy()
	for i := range next.Status.Conditions {
		if next.Status.Conditions[i].Type == corev1.DisruptionTarget {
			next.Status.Conditions[i] = corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse,
				ObservedGeneration: next.Generation, LastTransitionTime: metav1.NewTime(c.now())}
		}
	}
	_, err = client.Resource[*corev1.Pod](c.client, "pods").Namespace(ns).UpdateStatus(ctx, next)
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("clearing the DisruptionTarget condition of pod %s: %w", key, err)
	}
	return reconcile.Result{}, nil
}
