package replicaset

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/reconcile"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// sync brings one owner's pods to its replicas and writes its status. Scaling happens only
// when the owner's expectations are satisfied, so that the pods in the cache include every
// creation and deletion asked for before.
func (c *Controller[T]) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil // not a key this controller queued: nothing to retry
	}
	owner, err := c.owners.Lister().Namespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.exp.Forget(key)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	settled := c.exp.Satisfied(key)
	sel, err := c.kind.Selector(owner)
	if err != nil {
		// Validation keeps these out; one that got in is not worth retrying.
		c.event(owner, corev1.EventTypeWarning, "InvalidSelector", "Invalid selector: %v", err)
		return reconcile.Result{}, nil
	}
	var active []*corev1.Pod
	for _, p := range c.pods.Lister().Namespace(ns).List(labels.Everything()) {
		if podcontrol.IsActive(p) {
			active = append(active, p)
		}
	}
	owned, err := c.claim(ctx, owner, sel, active)
	if err != nil {
		return reconcile.Result{}, err
	}
	var manageErr error
	if settled && owner.GetDeletionTimestamp() == nil {
		manageErr = c.manage(ctx, owner, key, owned)
	}
	var templateLabels map[string]string
	if t := c.kind.Template(owner); t != nil {
		templateLabels = t.Labels
	}
	mrs := c.kind.MinReadySeconds(owner)
	st := calculateStatus(owned, templateLabels, mrs, owner.GetGeneration(), c.now())
	if err := c.updateStatus(ctx, owner, st); err != nil {
		return reconcile.Result{}, errors.Join(manageErr, err)
	}
	if manageErr == nil && mrs > 0 && st.ReadyReplicas == c.kind.Replicas(owner) && st.AvailableReplicas != st.ReadyReplicas {
		// Some ready pods are not available yet: look again when they may be.
		return reconcile.After(time.Duration(mrs) * time.Second), nil
	}
	return reconcile.Result{}, manageErr
}

// claim returns the pods the owner controls and its selector matches (see podcontrol.Claim).
func (c *Controller[T]) claim(ctx context.Context, owner T, sel labels.Selector, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	o := podcontrol.Owner{Object: owner, GVK: c.kind.GVK, Fresh: func(ctx context.Context) (metav1.Object, error) {
		return client.Resource[T](c.client, c.kind.Resource).Namespace(owner.GetNamespace()).Get(ctx, owner.GetName())
	}}
	return podcontrol.Claim(ctx, c.client, o, sel, pods)
}

// manage creates or deletes pods so that owned becomes the owner's replicas, at most
// c.burst of them, and sets the expectations those writes will be observed by.
func (c *Controller[T]) manage(ctx context.Context, owner T, key string, owned []*corev1.Pod) error {
	diff := len(owned) - int(c.kind.Replicas(owner))
	switch {
	case diff < 0:
		tmpl := c.kind.Template(owner)
		if tmpl == nil {
			return nil // validation requires a template
		}
		n := min(-diff, c.burst)
		c.exp.ExpectCreations(key, n)
		done, err := podcontrol.SlowStart(n, func() error { return c.createPod(ctx, owner, tmpl) })
		// Creations not made will not be observed.
		for range n - done {
			c.exp.CreationObserved(key)
		}
		return err
	case diff > 0:
		victims := podcontrol.PodsToDelete(owned, owned, min(diff, c.burst), c.now())
		keys := make([]string, len(victims))
		for i, p := range victims {
			keys[i] = cache.MetaNamespaceKey(p)
		}
		c.exp.ExpectDeletions(key, keys)
		errs := make([]error, len(victims))
		var wg sync.WaitGroup
		for i, p := range victims {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.deleteOwnedPod(ctx, owner, key, p)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	return nil
}

func (c *Controller[T]) createPod(ctx context.Context, owner T, tmpl *corev1.PodTemplateSpec) error {
	pod := podcontrol.NewPod(owner, c.kind.GVK, tmpl, owner.GetName()+"-")
	created, err := client.Resource[*corev1.Pod](c.client, "pods").Namespace(owner.GetNamespace()).Create(ctx, pod)
	if err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// The namespace, and the owner with it, are going away.
			return nil
		}
		c.event(owner, corev1.EventTypeWarning, "FailedCreate", "Error creating: %v", err)
		return err
	}
	c.event(owner, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %s", created.Name)
	return nil
}

func (c *Controller[T]) deleteOwnedPod(ctx context.Context, owner T, key string, pod *corev1.Pod) error {
	err := client.Resource[*corev1.Pod](c.client, "pods").Namespace(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
	if err != nil {
		// This deletion will not be observed.
		c.exp.DeletionObserved(key, cache.MetaNamespaceKey(pod))
		if apierrors.IsNotFound(err) {
			return nil
		}
		c.event(owner, corev1.EventTypeWarning, "FailedDelete", "Error deleting: %v", err)
		return err
	}
	c.event(owner, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: %s", pod.Name)
	return nil
}

// updateStatus writes st into the owner's status unless it is there already.
func (c *Controller[T]) updateStatus(ctx context.Context, owner T, st Status) error {
	if c.kind.Status(owner) == st {
		return nil
	}
	api := client.Resource[T](c.client, c.kind.Resource).Namespace(owner.GetNamespace())
	_, err := api.UpdateStatus(ctx, c.kind.WithStatus(owner, st))
	if apierrors.IsConflict(err) {
		// Usually only the cache is behind (our own previous status write). If the spec
		// is the one counted for, write onto the server's copy; otherwise the owner's
		// update event brings the next sync.
		fresh, gerr := api.Get(ctx, owner.GetName())
		if gerr != nil || fresh.GetUID() != owner.GetUID() || fresh.GetGeneration() != owner.GetGeneration() {
			return err
		}
		if c.kind.Status(fresh) == st {
			return nil
		}
		_, err = api.UpdateStatus(ctx, c.kind.WithStatus(fresh, st))
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
