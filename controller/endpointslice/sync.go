package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// errStaleCache fails a sync that would work from an informer cache that has not caught up with
// this controller's own writes; the retry comes once it has.
var errStaleCache = errors.New("EndpointSlice informer cache is out of date")

// sync is the worker's sync function: one Service, counted by result.
func (c *Controller) sync(ctx context.Context, key string) error {
	err := c.syncService(ctx, key)
	result := "success"
	switch {
	case errors.Is(err, errStaleCache):
		result = "stale"
	case err != nil:
		result = "error"
	}
	c.metrics.syncs.WithLabelValues(result).Inc()
	return err
}

// syncService brings one Service's slices up to date with its pods.
func (c *Controller) syncService(ctx context.Context, key string) error {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		slog.Error("endpointslice: dropping a malformed key", "key", key, "err", err)
		return nil // retrying would not make it well-formed
	}
	svcName := types.NamespacedName{Namespace: ns, Name: name}
	svc, err := c.services.Namespace(ns).Get(name)
	if err != nil {
		// Deleted. Its slices are removed with it by the garbage collector, through their
		// owner references; only what this controller remembers about it goes here.
		c.triggers.Forget(key)
		c.tracker.DeleteService(svcName)
		c.metrics.forgetService(svcName)
		return nil
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.Selector == nil {
		// No endpoints from pods: an ExternalName Service has none, and one without a selector
		// gets them from whoever manages its slices. Slices written before the Service changed
		// are left as they are, as Kubernetes does.
		c.metrics.forgetService(svcName)
		return nil
	}

	pods := c.podSelector.Selected(ns, svc.Spec.Selector)
	c.tracker.StartSync(svcName)
	existing := c.currentSlices(svcName)
	if c.tracker.Stale(svcName, existing) {
		// Retried at once when the informer catches up (sliceCaughtUp), else after the
		// retry delay. Kubernetes waits for the delay (1 s at first), which on one machine
		// is most of the time from a pod's readiness to its Service's endpoints.
		return errStaleCache
	}
	// Committed once the slices are written (or nothing needed writing), so that a retry
	// after a failed write still carries the trigger.
	trigger, seen := c.triggers.Observe(key, svc, pods)
	p := reconcile(reconcileInput{
		service:              svc,
		pods:                 pods,
		slices:               existing,
		nodes:                c.node,
		maxEndpointsPerSlice: c.maxEndpointsPerSlice,
		triggerTime:          trigger,
	})
	for cause, msg := range p.problems {
		if c.logged.first(cause) {
			slog.Warn("endpointslice: " + msg)
		}
	}
	c.metrics.observePlan(svcName, p.stats)

	if err := c.write(ctx, svc, &p); err != nil {
		c.recordFailure(svc, err)
		return err
	}
	c.triggers.Commit(key, seen)
	if len(p.missingNodes) > 0 {
		// The slices were written without these pods; retry until their Nodes are known (or
		// the pods are gone).
		err := missingNodesError(svc, p.missingNodes)
		c.recordFailure(svc, err)
		return err
	}
	return nil
}

// node looks a Node up in the informer's cache.
func (c *Controller) node(name string) (*corev1.Node, bool) {
	if name == "" {
		return nil, false
	}
	n, err := c.nodes.Namespace("").Get(name)
	return n, err == nil
}

// currentSlices returns the Service's slices that this controller manages and that are not being
// deleted (a slice held by a finalizer must not block the Service forever).
func (c *Controller) currentSlices(svc types.NamespacedName) []*discoveryv1.EndpointSlice {
	all, _ := c.slices.ByIndex(sliceServiceIndex, svc.Namespace+"/"+svc.Name)
	out := all[:0]
	for _, s := range all {
		if managedHere(s) && s.DeletionTimestamp == nil {
			out = append(out, s)
		}
	}
	return out
}

// write sends a plan to the apiserver: creates, then updates, then deletes, recording each
// write in the tracker as it succeeds. It stops at the first failure; the retry starts over
// from the informer's (by then updated) view.
func (c *Controller) write(ctx context.Context, svc *corev1.Service, p *plan) error {
	slices := client.Resource[*discoveryv1.EndpointSlice](c.client, "endpointslices").Namespace(svc.Namespace)
	for _, s := range p.create {
		created, err := slices.Create(ctx, s)
		if err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil // every create in a namespace being deleted fails: nothing to retry
			}
			return fmt.Errorf("failed to create EndpointSlice for Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		c.tracker.Update(created)
		c.metrics.changes.WithLabelValues("create").Inc()
	}
	for _, s := range p.update {
		updated, err := slices.Update(ctx, s)
		if err != nil {
			return fmt.Errorf("failed to update %s EndpointSlice for Service %s/%s: %w", s.Name, svc.Namespace, svc.Name, err)
		}
		c.tracker.Update(updated)
		c.metrics.changes.WithLabelValues("update").Inc()
	}
	for _, s := range p.delete {
		err := slices.Delete(ctx, s.Name, metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
			c.tracker.Forget(s) // gone already, which is what was wanted
		case err != nil:
			return fmt.Errorf("failed to delete %s EndpointSlice for Service %s/%s: %w", s.Name, svc.Namespace, svc.Name, err)
		default:
			c.tracker.ExpectDeletion(s)
			c.metrics.changes.WithLabelValues("delete").Inc()
		}
	}
	return nil
}

func (c *Controller) recordFailure(svc *corev1.Service, err error) {
	c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpointSlices",
		"Error updating Endpoint Slices for Service %s/%s: %v", svc.Namespace, svc.Name, err)
}

// missingNodesError names the pods left out for want of their Node (a few of them: there may be
// thousands).
func missingNodesError(svc *corev1.Service, missing []missingNode) error {
	const shown = 5
	var parts []string
	for _, m := range missing[:min(len(missing), shown)] {
		parts = append(parts, fmt.Sprintf("Pod %s (Node %q)", m.pod, m.node))
	}
	if len(missing) > shown {
		parts = append(parts, fmt.Sprintf("and %d more", len(missing)-shown))
	}
	return fmt.Errorf("skipping %d pods of Service %s/%s whose Node was not found: %s",
		len(missing), svc.Namespace, svc.Name, strings.Join(parts, ", "))
}

// onceLog remembers which causes of trouble were logged, so that a cause met on every sync
// (a named port no pod declares) is logged once rather than on every sync. It forgets them all
// when it holds too many, so that it stays small however much churn it sees.
type onceLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

const onceLogSize = 10000

func newOnceLog() *onceLog { return &onceLog{seen: map[string]bool{}} }

// first reports whether cause is new (and should be logged now).
func (l *onceLog) first(cause string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[cause] {
		return false
	}
	if len(l.seen) >= onceLogSize {
		clear(l.seen)
	}
	l.seen[cause] = true
	return true
}
