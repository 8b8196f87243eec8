package statefulset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/reconcile"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// staleClaimRetry is how soon a set waiting for the garbage collector to delete a claim looks
// again: claims are not watched, and the collector usually needs well under a second.
const staleClaimRetry = time.Second

// sync brings one StatefulSet's pods and claims a step closer to its spec and writes its status.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil
	}
	shared, err := c.sets.Lister().Namespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.writes.forget(key)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if !c.writes.settled(key) {
		return reconcile.Result{}, nil // the event that shows the last write queues the set again
	}
	set := shared.DeepCopy()
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil || sel.Empty() {
		return reconcile.Result{}, nil // validation refuses these; nothing to select
	}
	h, err := c.revisions(ctx, set, sel)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("history: %w", err)
	}
	var members []*corev1.Pod
	for _, p := range c.pods.Lister().Namespace(ns).List(labels.Everything()) {
		if isMember(set, p) {
			members = append(members, p)
		}
	}
	owner := podcontrol.Owner{Object: set, GVK: Kind, Fresh: func(ctx context.Context) (metav1.Object, error) {
		return client.Resource[*appsv1.StatefulSet](c.client, "statefulsets").Namespace(ns).Get(ctx, name)
	}}
	pods, claimErr := podcontrol.Claim(ctx, c.client, owner, sel, members)
	if claimErr != nil && !errors.Is(claimErr, podcontrol.ErrOwnerGone) {
		return reconcile.Result{}, claimErr
	}
	now := c.now()
	var p plan
	var applyErr error
	if set.DeletionTimestamp == nil {
		v, err := c.view(set, h, pods, now)
		if err != nil {
			return reconcile.Result{}, err
		}
		p = makePlan(v)
		if p.waiting != "" {
			slog.Debug("statefulset waiting", "statefulset", key, "for", p.waiting)
		}
		pods, applyErr = c.apply(ctx, set, key, v, p)
	}
	st := computeStatus(set, h, pods, now)
	statusErr := c.writeStatus(ctx, set, st)
	pruneErr := c.prune(ctx, set, h, pods)
	if err := errors.Join(applyErr, statusErr, pruneErr); err != nil {
		return reconcile.Result{}, err
	}
	var after time.Duration
	if p.retry {
		after = staleClaimRetry
	}
	// Pods ready but not yet available for minReadySeconds become so without an event.
	if d := nextAvailable(pods, set.Spec.MinReadySeconds, now); d > 0 && (after == 0 || d < after) {
		after = d
	}
	return reconcile.After(after), nil
}

// view gathers what planning reads.
func (c *Controller) view(set *appsv1.StatefulSet, h *history, pods []*corev1.Pod, now time.Time) (*view, error) {
	current, err := templateOf(h.current)
	if err != nil {
		return nil, err
	}
	update, err := templateOf(h.update)
	if err != nil {
		return nil, err
	}
	claims := map[string]*corev1.PersistentVolumeClaim{}
	if len(set.Spec.VolumeClaimTemplates) > 0 {
		for _, cl := range c.claims.Lister().Namespace(set.Namespace).List(labels.Everything()) {
			claims[cl.Name] = cl
		}
	}
	return &view{set: set, pods: pods, claims: claims, current: current, update: update,
		currentRevision: h.current.Name, updateRev: h.update.Name, now: now}, nil
}

// apply takes the plan's steps: in order, one after the other, for OrderedReady; each phase's
// at once (in batches of growing size) for Parallel, stopping after a phase with a failure.
// It returns the pods as the steps left them (made, or terminating), for the status.
func (c *Controller) apply(ctx context.Context, set *appsv1.StatefulSet, key string, v *view, p plan) ([]*corev1.Pod, error) {
	byName := map[string]*corev1.Pod{}
	for _, pod := range v.pods {
		byName[pod.Name] = pod
	}
	result := func() []*corev1.Pod {
		out := make([]*corev1.Pod, 0, len(byName))
		for _, pod := range byName {
			out = append(out, pod)
		}
		return out
	}
	var mu sync.Mutex
	run := func(s step) error {
		pod, err := c.take(ctx, set, key, v, s)
		if pod != nil {
			mu.Lock()
			byName[pod.Name] = pod
			mu.Unlock()
		}
		return err
	}
	if set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		for _, s := range p.steps() {
			if err := run(s); err != nil {
				return result(), err
			}
		}
		return result(), nil
	}
	for _, ph := range p.phases {
		var next int
		var errs []error
		_, err := podcontrol.SlowStart(len(ph), func() error {
			mu.Lock()
			s := ph[next]
			next++
			mu.Unlock()
			err := run(s)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return err
		})
		if err != nil {
			return result(), errors.Join(errs...)
		}
	}
	return result(), nil
}

// take carries out one step and returns the pod as it left it (nil if unchanged).
func (c *Controller) take(ctx context.Context, set *appsv1.StatefulSet, key string, v *view, s step) (*corev1.Pod, error) {
	pods := client.Resource[*corev1.Pod](c.client, "pods").Namespace(set.Namespace)
	switch s.kind {
	case createPod:
		if err := c.ensureClaims(ctx, set, v, s.pod, true); err != nil {
			c.podEvent(set, "create", s.pod.Name, err)
			return nil, err
		}
		podKey := cache.MetaNamespaceKey(s.pod)
		c.writes.expect(key, podKey, false)
		made, err := pods.Create(ctx, s.pod)
		switch {
		case err == nil:
			c.podEvent(set, "create", s.pod.Name, nil)
			return made, nil
		case apierrors.IsAlreadyExists(err):
			c.writes.observed(key, podKey, false)
			existing, getErr := pods.Get(ctx, s.pod.Name)
			if getErr == nil && metav1.IsControlledBy(existing, set) {
				return nil, nil // the cache is behind: the pod's event is on its way and queues the set again
			}
			// Someone else's pod holds the name (or one that no longer matches the
			// selector): it is not the set's to take; retry until it goes.
			err = fmt.Errorf("pod %s exists and is not controlled by statefulset %s", s.pod.Name, set.Name)
			c.podEvent(set, "create", s.pod.Name, err)
			return nil, err
		default:
			c.writes.observed(key, podKey, false)
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil, nil
			}
			c.podEvent(set, "create", s.pod.Name, err)
			return nil, err
		}
	case deletePod:
		podKey := cache.MetaNamespaceKey(s.pod)
		c.writes.expect(key, podKey, true)
		err := pods.Delete(ctx, s.pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.pod.UID}})
		switch {
		case err == nil:
			c.podEvent(set, "delete", s.pod.Name, nil)
			gone := s.pod.DeepCopy()
			gone.DeletionTimestamp = &metav1.Time{Time: v.now}
			return gone, nil
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			c.writes.observed(key, podKey, true) // gone already, or another pod has the name now
			return nil, nil
		default:
			c.writes.observed(key, podKey, true)
			c.podEvent(set, "delete", s.pod.Name, err)
			return nil, err
		}
	case fixPod:
		if err := c.ensureClaims(ctx, set, v, s.pod, true); err != nil {
			c.podEvent(set, "update", s.pod.Name, err)
			return nil, err
		}
		if identityMatches(set, s.pod) {
			return nil, nil
		}
		fixed := s.pod.DeepCopy()
		fixed.Labels = withIdentity(fixed.Labels, fixed.Name, s.ordinal)
		updated, err := pods.Update(ctx, fixed)
		c.podEvent(set, "update", s.pod.Name, err)
		if err != nil {
			return nil, err
		}
		return updated, nil
	case fixClaims:
		return nil, c.ensureClaims(ctx, set, v, s.pod, false)
	}
	return nil, fmt.Errorf("unknown step %v", s.kind)
}

// ensureClaims makes the pod's missing claims (when create is set) and gives its claims the
// owners the retention policy asks for. A claim being deleted cannot serve a new pod: the pod
// waits until it is gone and can be made again.
func (c *Controller) ensureClaims(ctx context.Context, set *appsv1.StatefulSet, v *view, pod *corev1.Pod, create bool) error {
	api := client.Resource[*corev1.PersistentVolumeClaim](c.client, "persistentvolumeclaims").Namespace(set.Namespace)
	ordinal := ordinalOf(pod)
	var errs []error
	for i := range set.Spec.VolumeClaimTemplates {
		t := &set.Spec.VolumeClaimTemplates[i]
		name := claimName(set, t.Name, ordinal)
		claim, ok := v.claims[name]
		if !ok {
			if !create {
				continue
			}
			want := newClaim(set, t, ordinal)
			want.OwnerReferences, _, _ = claimOwners(set, pod, want)
			_, err := api.Create(ctx, want)
			switch {
			case err == nil:
				c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulCreate", "create Claim %s Pod %s in StatefulSet %s success", name, pod.Name, set.Name)
				continue
			case !apierrors.IsAlreadyExists(err):
				c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "create Claim %s for Pod %s in StatefulSet %s failed error: %v", name, pod.Name, set.Name, err)
				errs = append(errs, fmt.Errorf("failed to create PVC %s: %w", name, err))
				continue
			}
			// Made already, the cache does not show it yet: it may still be one going away.
			if claim, err = api.Get(ctx, name); err != nil {
				errs = append(errs, fmt.Errorf("failed to retrieve PVC %s: %w", name, err))
				continue
			}
		}
		if claim.DeletionTimestamp != nil {
			errs = append(errs, fmt.Errorf("pvc %s is being deleted", name))
			continue
		}
		refs, change, conflict := claimOwners(set, pod, claim)
		if conflict {
			c.recorder.Eventf(set, corev1.EventTypeWarning, "ConflictingController",
				"PersistentVolumeClaim %s has a conflicting OwnerReference that acts as a managing controller, the retention policy is ignored for this claim", name)
		}
		if !change {
			continue
		}
		next := claim.DeepCopy()
		next.OwnerReferences = refs
		if _, err := api.Update(ctx, next); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("could not update claim %s for delete policy ownerRefs: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// podEvent records what Kubernetes' StatefulSet controller records for a pod operation.
func (c *Controller) podEvent(set *appsv1.StatefulSet, verb, pod string, err error) {
	title := map[string]string{"create": "Create", "delete": "Delete", "update": "Update"}[verb]
	if err == nil {
		c.recorder.Eventf(set, corev1.EventTypeNormal, "Successful"+title, "%s Pod %s in StatefulSet %s successful", verb, pod, set.Name)
		return
	}
	c.recorder.Eventf(set, corev1.EventTypeWarning, "Failed"+title, "%s Pod %s in StatefulSet %s failed error: %v", verb, pod, set.Name, err)
}

// computeStatus counts the set's pods as kubectl and kubectl rollout status read them. When
// every pod is of the update revision, ready, and there are as many as the spec asks, the
// rollout is complete: the update revision becomes the current one.
func computeStatus(set *appsv1.StatefulSet, h *history, pods []*corev1.Pod, now time.Time) appsv1.StatefulSetStatus {
	collisions := h.collisions
	st := appsv1.StatefulSetStatus{
		ObservedGeneration: set.Generation,
		CurrentRevision:    h.current.Name,
		UpdateRevision:     h.update.Name,
		CollisionCount:     &collisions,
		Conditions:         set.Status.Conditions,
	}
	for _, p := range pods {
		if ordinalOf(p) < 0 {
			continue
		}
		if created(p) {
			st.Replicas++
		}
		if runningAndReady(p) {
			st.ReadyReplicas++
			if available(p, set.Spec.MinReadySeconds, now) {
				st.AvailableReplicas++
			}
		}
		if created(p) && !terminating(p) {
			if revisionOf(p) == st.CurrentRevision {
				st.CurrentReplicas++
			}
			if revisionOf(p) == st.UpdateRevision {
				st.UpdatedReplicas++
			}
		}
	}
	want := int32(replicas0(set))
	if set.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		st.UpdatedReplicas == want && st.ReadyReplicas == want && st.Replicas == want {
		st.CurrentReplicas, st.CurrentRevision = st.UpdatedReplicas, st.UpdateRevision
	}
	return st
}

// writeStatus writes st if it differs from the set's. A conflict is left to the set's next
// event (the write that conflicted), which queues it again.
func (c *Controller) writeStatus(ctx context.Context, set *appsv1.StatefulSet, st appsv1.StatefulSetStatus) error {
	if statusEqual(set.Status, st) {
		return nil
	}
	next := set.DeepCopy()
	next.Status = st
	_, err := client.Resource[*appsv1.StatefulSet](c.client, "statefulsets").Namespace(set.Namespace).UpdateStatus(ctx, next)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func statusEqual(a, b appsv1.StatefulSetStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration && a.Replicas == b.Replicas && a.ReadyReplicas == b.ReadyReplicas &&
		a.CurrentReplicas == b.CurrentReplicas && a.UpdatedReplicas == b.UpdatedReplicas && a.AvailableReplicas == b.AvailableReplicas &&
		a.CurrentRevision == b.CurrentRevision && a.UpdateRevision == b.UpdateRevision && deref(a.CollisionCount) == deref(b.CollisionCount)
}

// nextAvailable is how long until the first pod that is ready but not yet available for
// minReadySeconds becomes so (0: none).
func nextAvailable(pods []*corev1.Pod, minReadySeconds int32, now time.Time) time.Duration {
	if minReadySeconds <= 0 {
		return 0
	}
	var next time.Duration
	for _, p := range pods {
		r := podcontrol.ReadySince(p)
		if !r.Ready || terminating(p) || available(p, minReadySeconds, now) {
			continue
		}
		// Available strictly after the moment: a little past it.
		d := r.At.Add(time.Duration(minReadySeconds)*time.Second).Sub(now) + 10*time.Millisecond
		if next == 0 || d < next {
			next = d
		}
	}
	return next
}
