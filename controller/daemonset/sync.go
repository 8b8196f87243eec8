package daemonset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/controller/revision"
	"github.com/kplane/kplane/reconcile"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// failedPods paces the replacement of failed daemon pods per DaemonSet and node: 1 s doubling
// to 15 min, so that a pod failing at once does not become a busy loop of creations.
type failedPods struct {
	mu    sync.Mutex
	until map[string]time.Time
	delay map[string]time.Duration
}

const (
	failedBackoffBase = time.Second
	failedBackoffMax  = 15 * time.Minute
)

func newFailedPods() *failedPods {
	return &failedPods{until: map[string]time.Time{}, delay: map[string]time.Duration{}}
}

// wait returns how long the replacement of a failed pod on key must still wait; a zero means
// now, and starts the next, longer, wait.
func (f *failedPods) wait(key string, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.until[key]; ok && now.Before(u) {
		return u.Sub(now)
	}
	d := min(max(2*f.delay[key], failedBackoffBase), failedBackoffMax)
	f.delay[key], f.until[key] = d, now.Add(d)
	return 0
}

// nodePods is what one node has of a DaemonSet: whether it should run its pod, whether a
// pod there may stay, and the pods.
type nodePods struct {
	node               *corev1.Node
	shouldRun, mayStay bool
	pods               []*corev1.Pod
}

// sync makes each node run what the DaemonSet wants there and writes its status.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil
	}
	shared, err := c.sets.Lister().Namespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.exp.Forget(key)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	ds := shared.DeepCopy()
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() {
		return reconcile.Result{}, nil // validation refuses these; nothing to select
	}
	h, err := c.revisions(ctx, ds)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("history: %w", err)
	}
	hash := h.current.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	owner := podcontrol.Owner{Object: ds, GVK: Kind, Fresh: func(ctx context.Context) (metav1.Object, error) {
		return client.Resource[*appsv1.DaemonSet](c.client, "daemonsets").Namespace(ns).Get(ctx, name)
	}}
	pods, err := podcontrol.Claim(ctx, c.client, owner, sel, c.pods.Lister().Namespace(ns).List(labels.Everything()))
	if err != nil {
		return reconcile.Result{}, err
	}
	byNode := c.nodesOf(ds, pods)
	var after time.Duration
	var manageErr error
	if ds.DeletionTimestamp == nil && c.exp.Satisfied(key) {
		after, manageErr = c.manage(ctx, ds, key, hash, byNode)
	}
	inUse := map[string]bool{}
	for _, p := range pods {
		inUse[p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] = true
	}
	pruneErr := c.prune(ctx, ds, h, inUse)
	statusErr := c.writeStatus(ctx, ds, hash, byNode)
	if err := errors.Join(manageErr, pruneErr, statusErr); err != nil {
		return reconcile.Result{}, err
	}
	// Pods ready but not yet available for minReadySeconds become so without an event.
	if mrs := ds.Spec.MinReadySeconds; mrs > 0 {
		after = minPositive(after, time.Duration(mrs)*time.Second)
	}
	return reconcile.After(after), nil
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// nodesOf sorts the DaemonSet's pods by node, for every node there is (and for nodes gone,
// so that their pods are deleted).
func (c *Controller) nodesOf(ds *appsv1.DaemonSet, pods []*corev1.Pod) map[string]*nodePods {
	out := map[string]*nodePods{}
	for _, n := range c.nodes.Lister().List(labels.Everything()) {
		run, stay := placementOf(ds, n)
		out[n.Name] = &nodePods{node: n, shouldRun: run, mayStay: stay}
	}
	for _, p := range pods {
		name := nodeOf(p)
		np, ok := out[name]
		if !ok {
			np = &nodePods{}
			out[name] = np
		}
		np.pods = append(np.pods, p)
	}
	return out
}

// manage creates the pods nodes lack and deletes those they should not have, then rolls the
// template out. It returns how long until a failed pod may be replaced.
func (c *Controller) manage(ctx context.Context, ds *appsv1.DaemonSet, key, hash string, byNode map[string]*nodePods) (time.Duration, error) {
	var create []string
	var remove []*corev1.Pod
	var after time.Duration
	now := c.now()
	for name, np := range byNode {
		var live []*corev1.Pod
		for _, p := range np.pods {
			switch {
			case p.DeletionTimestamp != nil:
			case p.Status.Phase == corev1.PodFailed && np.shouldRun:
				// Replaced, but not faster than the backoff allows.
				if wait := c.failures.wait(key+"/"+name, now); wait > 0 {
					after = minPositive(after, wait)
					live = append(live, p)
					continue
				}
				c.recorder.Eventf(ds, corev1.EventTypeWarning, "FailedDaemonPod", "Found failed daemon pod %s/%s on node %s, will try to kill it", p.Namespace, p.Name, name)
				remove = append(remove, p)
			default:
				live = append(live, p)
			}
		}
		switch {
		case np.node == nil || !np.mayStay:
			remove = append(remove, live...)
		case np.shouldRun && len(live) == 0:
			create = append(create, name)
		case len(live) > 1 && !surging(ds):
			// One pod per node: keep the oldest (of the current template if any).
			slices.SortFunc(live, func(a, b *corev1.Pod) int {
				if ca, cb := a.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash, b.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash; ca != cb {
					if ca {
						return -1
					}
					return 1
				}
				return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
			})
			remove = append(remove, live[1:]...)
		}
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		more, surge := rollout(ds, hash, byNode, now)
		remove = append(remove, more...)
		create = append(create, surge...)
	}
	slices.Sort(create)
	return after, c.apply(ctx, ds, key, hash, create, remove)
}

// surging: a RollingUpdate with maxSurge lets a node run its new pod beside the old one.
func surging(ds *appsv1.DaemonSet) bool {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	return ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType && ru != nil && ru.MaxSurge != nil &&
		!(ru.MaxSurge.Type == intstr.Int && ru.MaxSurge.IntVal == 0) && ru.MaxSurge.StrVal != "0%"
}

// rollout replaces pods of old templates on the nodes that should run the DaemonSet:
// without surge, deleting old pods while no more than maxUnavailable nodes lack an available
// pod (an old pod that is not available goes at once); with surge, creating the new pod
// beside the old one on up to maxSurge nodes and deleting the old pod once the new one is
// available.
func rollout(ds *appsv1.DaemonSet, hash string, byNode map[string]*nodePods, now time.Time) (remove []*corev1.Pod, create []string) {
	desired := 0
	for _, np := range byNode {
		if np.shouldRun {
			desired++
		}
	}
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ru == nil {
		ru = &appsv1.RollingUpdateDaemonSet{}
	}
	maxUnavailable, _ := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ru.MaxUnavailable, intstr.FromInt32(1)), desired, true)
	maxSurge, _ := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ru.MaxSurge, intstr.FromInt32(0)), desired, true)
	if maxUnavailable == 0 && maxSurge == 0 {
		maxUnavailable = 1 // validation forbids both zero; a rollout must make progress
	}
	available := func(p *corev1.Pod) bool { return isAvailable(p, ds.Spec.MinReadySeconds, now) }
	current := func(p *corev1.Pod) bool { return p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash }
	names := make([]string, 0, len(byNode))
	for name, np := range byNode {
		if np.shouldRun && np.node != nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if maxSurge == 0 {
		unavailable := 0
		var candidates []*corev1.Pod
		for _, name := range names {
			var oldPod, newPod *corev1.Pod
			for _, p := range byNode[name].pods {
				if p.DeletionTimestamp != nil {
					continue
				}
				if current(p) {
					newPod = p
				} else {
					oldPod = p
				}
			}
			switch {
			case newPod != nil:
				if !available(newPod) {
					unavailable++
				}
			case oldPod == nil:
				unavailable++ // being created, or deleted already
			case !available(oldPod):
				remove = append(remove, oldPod) // gives no service: replace it now
				unavailable++
			default:
				candidates = append(candidates, oldPod)
			}
		}
		for _, p := range candidates {
			if unavailable >= maxUnavailable {
				break
			}
			remove = append(remove, p)
			unavailable++
		}
		return remove, nil
	}
	surged := 0
	for _, name := range names {
		var oldPods []*corev1.Pod
		var newPod *corev1.Pod
		for _, p := range byNode[name].pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			if current(p) {
				newPod = p
			} else {
				oldPods = append(oldPods, p)
			}
		}
		switch {
		case len(oldPods) == 0:
		case newPod == nil:
			if surged < maxSurge || !slices.ContainsFunc(oldPods, available) {
				create = append(create, name)
				surged++
			}
		case available(newPod):
			remove = append(remove, oldPods...)
		default:
			surged++
		}
	}
	return remove, create
}

// isAvailable: ready for at least minReadySeconds.
func isAvailable(p *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	r := podcontrol.ReadySince(p)
	return r.Ready && !r.At.Add(time.Duration(minReadySeconds)*time.Second).After(now)
}

// apply creates a pod on each node of create and deletes remove, in parallel, setting the
// expectations their events will fulfil.
func (c *Controller) apply(ctx context.Context, ds *appsv1.DaemonSet, key, hash string, create []string, remove []*corev1.Pod) error {
	if len(create)+len(remove) == 0 {
		return nil
	}
	c.exp.ExpectCreations(key, len(create))
	removeKeys := make([]string, len(remove))
	for i, p := range remove {
		removeKeys[i] = cache.MetaNamespaceKey(p)
	}
	c.exp.ExpectDeletions(key, removeKeys)
	pods := client.Resource[*corev1.Pod](c.client, "pods").Namespace(ds.Namespace)
	var mu sync.Mutex
	next := 0
	made, createErr := podcontrol.SlowStart(len(create), func() error {
		mu.Lock()
		node := create[next]
		next++
		mu.Unlock()
		tmpl := ds.Spec.Template.DeepCopy()
		tmpl.Labels = revision.WithLabel(tmpl.Labels, appsv1.DefaultDaemonSetUniqueLabelKey, hash)
		// The apiserver counts template changes in this annotation; pods carry the count as a
		// label for the clients that still read it (none without the annotation, as in
		// Kubernetes).
		if gen, ok := ds.Annotations[appsv1.DeprecatedTemplateGeneration]; ok {
			tmpl.Labels[templateGenerationLabel] = gen
		}
		pinnedTo(&tmpl.Spec, node)
		withDaemonTolerations(&tmpl.Spec)
		created, err := pods.Create(ctx, podcontrol.NewPod(ds, Kind, tmpl, ds.Name+"-"))
		if err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil
			}
			c.recorder.Eventf(ds, corev1.EventTypeWarning, "FailedCreate", "Error creating: %v", err)
			return err
		}
		c.recorder.Eventf(ds, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %s", created.Name)
		return nil
	})
	for range len(create) - made {
		c.exp.CreationObserved(key)
	}
	errs := make([]error, len(remove))
	var wg sync.WaitGroup
	for i, p := range remove {
		wg.Go(func() {
			err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			switch {
			case err == nil:
				c.recorder.Eventf(ds, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: %s", p.Name)
			case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
				c.exp.DeletionObserved(key, removeKeys[i])
			default:
				c.exp.DeletionObserved(key, removeKeys[i])
				c.recorder.Eventf(ds, corev1.EventTypeWarning, "FailedDelete", "Error deleting: %v", err)
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, createErr)...)
}

// writeStatus writes the counts kubectl and kubectl rollout status read, if they changed.
func (c *Controller) writeStatus(ctx context.Context, ds *appsv1.DaemonSet, hash string, byNode map[string]*nodePods) error {
	now := c.now()
	st := appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, CollisionCount: ds.Status.CollisionCount,
		Conditions: ds.Status.Conditions}
	for _, np := range byNode {
		var scheduled []*corev1.Pod
		for _, p := range np.pods {
			if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
				scheduled = append(scheduled, p)
			}
		}
		if np.shouldRun {
			st.DesiredNumberScheduled++
		}
		if len(scheduled) == 0 {
			continue
		}
		if !np.shouldRun {
			st.NumberMisscheduled++
			continue
		}
		st.CurrentNumberScheduled++
		// The node's pod that counts: the newest (during a surge, the new one).
		p := slices.MaxFunc(scheduled, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
		if podcontrol.ReadySince(p).Ready {
			st.NumberReady++
			if isAvailable(p, ds.Spec.MinReadySeconds, now) {
				st.NumberAvailable++
			}
		}
		if p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash {
			st.UpdatedNumberScheduled++
		}
	}
	st.NumberUnavailable = max(st.DesiredNumberScheduled-st.NumberAvailable, 0)
	if statusEqual(ds.Status, st) {
		return nil
	}
	ds.Status = st
	_, err := client.Resource[*appsv1.DaemonSet](c.client, "daemonsets").Namespace(ds.Namespace).UpdateStatus(ctx, ds)
	return err
}

func statusEqual(a, b appsv1.DaemonSetStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration && a.DesiredNumberScheduled == b.DesiredNumberScheduled &&
		a.CurrentNumberScheduled == b.CurrentNumberScheduled && a.NumberMisscheduled == b.NumberMisscheduled &&
		a.NumberReady == b.NumberReady && a.NumberAvailable == b.NumberAvailable && a.NumberUnavailable == b.NumberUnavailable &&
		a.UpdatedNumberScheduled == b.UpdatedNumberScheduled && deref(a.CollisionCount) == deref(b.CollisionCount)
}
