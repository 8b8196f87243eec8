package deployment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/reconcile"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// errRequeue asks for another sync after a write the cache must see first.
var errRequeue = errors.New("waiting for the cache to catch up")

func (c *Controller) rsAPI(ns string) *client.Typed[*appsv1.ReplicaSet] {
	return client.Resource[*appsv1.ReplicaSet](c.client, "replicasets").Namespace(ns)
}

// sync moves one Deployment one step toward its spec and writes its status. While a rollout
// is under way it asks to be synced again when the progress deadline is due, to mark the
// rollout failed if nothing moved by then.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil
	}
	cached, err := c.deployments.Lister().Namespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	d := cached.DeepCopy()
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() {
		// Validation keeps these out; one that got in is not worth retrying.
		c.event(d, corev1.EventTypeWarning, "SelectingAll", "This deployment has an invalid or empty selector; it controls nothing")
		return reconcile.Result{}, nil
	}
	rss, err := c.claim(ctx, d, sel)
	if err != nil {
		return reconcile.Result{}, err
	}
	if d.DeletionTimestamp != nil {
		return reconcile.Result{}, nil // the garbage collector removes the ReplicaSets
	}
	surge, unavailable, err := bounds(d)
	if err != nil {
		c.event(d, corev1.EventTypeWarning, "InvalidStrategy", "%v", err)
		return reconcile.Result{}, nil
	}
	newRS, old := splitNew(d, rss)

	created := false
	recreateWaiting := d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType && !oldGone(old)
	if newRS == nil && !d.Spec.Paused && !recreateWaiting {
		newRS, err = c.createNewRS(ctx, d, old, surge)
		if err != nil {
			return reconcile.Result{}, err
		}
		created = true
	} else if newRS != nil {
		if newRS, err = c.syncRevision(ctx, d, newRS, old, surge); err != nil {
			return reconcile.Result{}, err
		}
	}

	var stepErr error
	switch {
	case d.Spec.Paused:
		// TODO(deployment): a paused deployment that is scaled should scale its
		// ReplicaSets proportionally; for now only a lone new ReplicaSet follows.
		if newRS != nil && len(activeOf(old)) == 0 && rsReplicas(newRS) != replicasOf(d) {
			_, stepErr = c.scale(ctx, d, newRS, replicasOf(d), surge)
		}
	case d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType:
		stepErr = c.recreate(ctx, d, newRS, old)
	default:
		stepErr = c.rolling(ctx, d, newRS, old, surge, unavailable)
	}

	all := append(slices.Clone(old), newRS)
	if newRS == nil {
		all = old
	}
	st := counts(d, newRS, all, unavailable)
	var res reconcile.Result
	if created {
		setCondition(&st, cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonNewRSCreated,
			fmt.Sprintf("Created new replica set %q", newRS.Name)), c.now())
	} else if after := progress(d, newRS, &st, c.now()); after > 0 {
		res = reconcile.After(after)
	}
	if complete(d, &st) && !d.Spec.Paused && d.Spec.RevisionHistoryLimit != nil {
		c.prune(ctx, d, old)
	}
	err = errors.Join(stepErr, c.writeStatus(ctx, d, st))
	if err != nil && res.After > 0 {
		// A failed sync's Result is dropped for the retry with backoff; the deadline is
		// still checked at its time, should the retries give up before then (as Kubernetes
		// requeues a stuck deployment whatever the status write does).
		c.loop.Queue.AddAfter(key, res.After)
	}
	return res, err
}

// splitNew finds the ReplicaSet whose template is the deployment's (the oldest if several)
// and returns it apart from the rest.
func splitNew(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet) {
	slices.SortFunc(rss, func(a, b *appsv1.ReplicaSet) int {
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if a.CreationTimestamp.Before(&b.CreationTimestamp) {
				return -1
			}
			return 1
		}
		return byRevision(a, b)
	})
	var newRS *appsv1.ReplicaSet
	var old []*appsv1.ReplicaSet
	for _, rs := range rss {
		if newRS == nil && sameTemplate(&rs.Spec.Template, &d.Spec.Template) {
			newRS = rs
			continue
		}
		old = append(old, rs)
	}
	slices.SortFunc(old, byRevision)
	return newRS, old
}

func activeOf(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rsReplicas(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// oldGone: no old ReplicaSet wants or has pods.
// TODO(deployment): Kubernetes also waits for the old pods themselves (terminating ones
// included) before Recreate starts new ones; this reads only the ReplicaSets' counts.
func oldGone(old []*appsv1.ReplicaSet) bool {
	for _, rs := range old {
		if rsReplicas(rs) > 0 || rs.Status.Replicas > 0 || rs.Status.ObservedGeneration < rs.Generation {
			return false
		}
	}
	return true
}

// claim returns the ReplicaSets the deployment controls and its selector matches, adopting
// matching orphans and releasing owned ones that no longer match.
func (c *Controller) claim(ctx context.Context, d *appsv1.Deployment, sel labels.Selector) ([]*appsv1.ReplicaSet, error) {
	var owned []*appsv1.ReplicaSet
	var errs []error
	deleting := d.DeletionTimestamp != nil
	for _, rs := range c.rss.Lister().Namespace(d.Namespace).List(labels.Everything()) {
		matches := sel.Matches(labels.Set(rs.Labels))
		ref := metav1.GetControllerOf(rs)
		switch {
		case ref != nil && ref.UID != d.UID:
		case ref != nil && matches:
			owned = append(owned, rs)
		case ref != nil:
			if !deleting {
				if err := c.patchOwner(ctx, rs, map[string]any{"$patch": "delete", "uid": d.UID}); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
		case matches && !deleting && rs.DeletionTimestamp == nil:
			if err := c.patchOwner(ctx, rs, controllerRef(d)); err != nil {
				if !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
				continue
			}
			owned = append(owned, rs)
		}
	}
	return owned, errors.Join(errs...)
}

func controllerRef(d *appsv1.Deployment) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: deploymentKind.GroupVersion().String(), Kind: deploymentKind.Kind,
		Name: d.Name, UID: d.UID, Controller: new(true), BlockOwnerDeletion: new(true),
	}
}

// patchOwner sets (or, with a $patch: delete entry, removes) a controller reference; the
// ReplicaSet's UID in the patch makes it fail if the name now belongs to another object.
func (c *Controller) patchOwner(ctx context.Context, rs *appsv1.ReplicaSet, ref any) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []any{ref}, "uid": rs.UID,
	}})
	if err != nil {
		return err
	}
	_, err = c.rsAPI(rs.Namespace).Patch(ctx, rs.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
	return err
}

// createNewRS creates the ReplicaSet of the deployment's current template, sized as the
// strategy allows right now.
func (c *Controller) createNewRS(ctx context.Context, d *appsv1.Deployment, old []*appsv1.ReplicaSet, surge int32) (*appsv1.ReplicaSet, error) {
	hash := TemplateHash(&d.Spec.Template, d.Status.CollisionCount)
	tmpl := d.Spec.Template.DeepCopy()
	tmpl.Labels = withLabel(tmpl.Labels, HashLabel, hash)
	sel := d.Spec.Selector.DeepCopy()
	sel.MatchLabels = withLabel(sel.MatchLabels, HashLabel, hash)
	size := replicasOf(d)
	if d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		size = scaleUpTarget(replicasOf(d), surge, &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Replicas: new(int32(0))}}, old)
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            d.Name + "-" + hash,
			Namespace:       d.Namespace,
			Labels:          tmpl.Labels,
			Annotations:     rsAnnotations(nil, d, nextRevision(old), surge),
			OwnerReferences: []metav1.OwnerReference{controllerRef(d)},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        new(size),
			MinReadySeconds: d.Spec.MinReadySeconds,
			Selector:        sel,
			Template:        *tmpl,
		},
	}
	created, err := c.rsAPI(d.Namespace).Create(ctx, rs)
	if err == nil {
		c.event(d, corev1.EventTypeNormal, "ScalingReplicaSet", "Scaled up replica set %s from 0 to %d", created.Name, size)
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		c.event(d, corev1.EventTypeWarning, "FailedCreate", "Failed to create new replica set %q: %v", rs.Name, err)
		return nil, err
	}
	// The name is taken. If by our own ReplicaSet of this template, the cache is only
	// behind; otherwise it is a hash collision: count it, which changes the next name.
	existing, gerr := c.rsAPI(d.Namespace).Get(ctx, rs.Name)
	if gerr != nil {
		return nil, gerr
	}
	if metav1.IsControlledBy(existing, d) && sameTemplate(&existing.Spec.Template, &d.Spec.Template) {
		return nil, errRequeue
	}
	n := int32(1)
	if d.Status.CollisionCount != nil {
		n = *d.Status.CollisionCount + 1
	}
	d.Status.CollisionCount = &n
	if _, uerr := client.Resource[*appsv1.Deployment](c.client, "deployments").Namespace(d.Namespace).UpdateStatus(ctx, d); uerr != nil {
		return nil, uerr
	}
	return nil, fmt.Errorf("replica set name %s collides with another object; collision count now %d", rs.Name, n)
}

// rsAnnotations returns a copy of base with the revision and replica annotations set.
func rsAnnotations(base map[string]string, d *appsv1.Deployment, rev int64, surge int32) map[string]string {
	out := make(map[string]string, len(base)+3)
	for k, v := range base {
		out[k] = v
	}
	if rev > 0 {
		out[RevisionAnnotation] = strconv.FormatInt(rev, 10)
	}
	out[DesiredReplicasAnnotation] = strconv.Itoa(int(replicasOf(d)))
	out[MaxReplicasAnnotation] = strconv.Itoa(int(replicasOf(d) + surge))
	return out
}

// syncRevision gives a new ReplicaSet that is not the newest revision (an old template
// brought back) the next revision, and keeps its minReadySeconds the deployment's.
func (c *Controller) syncRevision(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, old []*appsv1.ReplicaSet, surge int32) (*appsv1.ReplicaSet, error) {
	want := max(revision(rs), nextRevision(old))
	if revision(rs) == want && rs.Spec.MinReadySeconds == d.Spec.MinReadySeconds {
		return rs, nil
	}
	up := rs.DeepCopy()
	up.Annotations = rsAnnotations(rs.Annotations, d, want, surge)
	up.Spec.MinReadySeconds = d.Spec.MinReadySeconds
	return c.rsAPI(rs.Namespace).Update(ctx, up)
}

// scale sets a ReplicaSet's size (and its replica annotations); it reports whether it wrote.
func (c *Controller) scale(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, n, surge int32) (bool, error) {
	from := rsReplicas(rs)
	up := rs.DeepCopy()
	up.Spec.Replicas = new(n)
	up.Annotations = rsAnnotations(rs.Annotations, d, 0, surge)
	if from == n && apiequality.Semantic.DeepEqual(up.Annotations, rs.Annotations) {
		return false, nil
	}
	if _, err := c.rsAPI(rs.Namespace).Update(ctx, up); err != nil {
		return false, err
	}
	if from != n {
		dir := "up"
		if n < from {
			dir = "down"
		}
		c.event(d, corev1.EventTypeNormal, "ScalingReplicaSet", "Scaled %s replica set %s from %d to %d", dir, rs.Name, from, n)
	}
	return true, nil
}

// rolling takes one step of a rolling update: grow the new ReplicaSet within the surge, or
// else shrink old ones within the unavailability allowed.
// TODO(deployment): a replicas change in the middle of a rollout is not spread
// proportionally over the ReplicaSets; the step arithmetic converges without it.
func (c *Controller) rolling(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet, surge, unavailable int32) error {
	if newRS == nil {
		return nil
	}
	all := append(slices.Clone(old), newRS)
	target := scaleUpTarget(replicasOf(d), surge, newRS, all)
	if target != rsReplicas(newRS) {
		wrote, err := c.scale(ctx, d, newRS, target, surge)
		if err != nil || wrote {
			return err
		}
	}
	plan := scaleDownPlan(replicasOf(d), unavailable, newRS, old)
	var errs []error
	for i, rs := range old {
		n, ok := plan[i]
		if !ok {
			n = rsReplicas(rs)
		}
		if _, err := c.scale(ctx, d, rs, n, surge); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// recreate scales every old ReplicaSet to zero, and the new one to replicas once the old
// pods are gone.
func (c *Controller) recreate(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	var errs []error
	for _, rs := range old {
		if _, err := c.scale(ctx, d, rs, 0, 0); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 || newRS == nil || !oldGone(old) {
		return errors.Join(errs...)
	}
	_, err := c.scale(ctx, d, newRS, replicasOf(d), 0)
	return err
}

// prune deletes the old ReplicaSets beyond the revision history limit.
func (c *Controller) prune(ctx context.Context, d *appsv1.Deployment, old []*appsv1.ReplicaSet) {
	for _, rs := range toPrune(old, *d.Spec.RevisionHistoryLimit) {
		err := c.rsAPI(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &rs.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) {
			c.event(d, corev1.EventTypeWarning, "FailedDelete", "Failed to delete old replica set %s: %v", rs.Name, err)
		}
	}
}

// writeStatus writes st unless the deployment has it already.
func (c *Controller) writeStatus(ctx context.Context, d *appsv1.Deployment, st appsv1.DeploymentStatus) error {
	if apiequality.Semantic.DeepEqual(d.Status, st) {
		return nil
	}
	api := client.Resource[*appsv1.Deployment](c.client, "deployments").Namespace(d.Namespace)
	up := d.DeepCopy()
	up.Status = st
	_, err := api.UpdateStatus(ctx, up)
	if apierrors.IsConflict(err) {
		// Usually only the cache is behind (our own last status write). If the server's
		// copy has the spec this status was computed for, write onto it; otherwise the
		// deployment's update event brings the next sync.
		fresh, gerr := api.Get(ctx, d.Name)
		if gerr != nil || fresh.UID != d.UID || fresh.Generation != d.Generation {
			return err
		}
		if apiequality.Semantic.DeepEqual(fresh.Status, st) {
			return nil
		}
		fresh.Status = st
		_, err = api.UpdateStatus(ctx, fresh)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
