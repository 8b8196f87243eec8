package endpoints

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sync brings the Endpoints of the service with key ("ns/name") in line with the caches. An
// error means "try again later"; the worker loop retries with backoff.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		// Keys come from cache objects, so this cannot happen; retrying would not help.
		slog.Error("endpoints: dropping malformed key", "key", key, "err", err)
		return nil
	}
	endpointsAPI := client.Resource[*corev1.Endpoints](c.client, "endpoints").Namespace(ns)

	svc, err := c.services.Lister().Namespace(ns).Get(name)
	if err != nil {
		// The service is gone (or never was: a leftover Endpoints object). Whatever
		// Endpoints carry its name were ours or are orphans; either way they go.
		if err := endpointsAPI.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !client.IsNotFound(err) {
			return err
		}
		c.triggers.Forget(key)
		c.stale.forget(key)
		c.problems.forget(key)
		return nil
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.Selector == nil {
		// An ExternalName service has no endpoints, and the Endpoints of a service without
		// a selector are written by someone else: leave them alone.
		return nil
	}

	pods := c.podSelector.Selected(ns, svc.Spec.Selector)
	// Committed on every sync that succeeds, written or not, so that the next sync compares
	// with the latest state.
	trigger, seen := c.triggers.Observe(key, svc, pods)
	want := computeSubsets(svc, pods)
	c.problems.report(key, want.Problems)

	current, err := c.endpoints.Lister().Namespace(ns).Get(name)
	if err != nil {
		current = nil // not in the cache: create
	} else if c.stale.isStale(key, current.ResourceVersion) {
		return fmt.Errorf("endpoints cache is behind: %s still at resourceVersion %s, which our last update replaced", key, current.ResourceVersion)
	}

	next := plan(svc, current, want.Subsets, trigger)
	if next == nil {
		c.triggers.Commit(key, seen)
		return nil
	}
	if current == nil {
		_, err = endpointsAPI.Create(ctx, next)
	} else {
		var updated *corev1.Endpoints
		if updated, err = endpointsAPI.Update(ctx, next); err == nil && updated.ResourceVersion != current.ResourceVersion {
			c.stale.replacedBy(key, current.ResourceVersion)
		}
	}
	if err == nil {
		c.triggers.Commit(key, seen)
		return nil
	}
	if ctx.Err() != nil {
		return err // shutting down: not the object's fault, no event
	}
	if current == nil {
		if apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// The namespace is being deleted and will refuse every create; its deletion
			// takes the service with it. Nothing to retry.
			return nil
		}
		if client.IsAlreadyExists(err) {
			// Our cache has not seen the object yet (typically the one our previous sync
			// created a moment ago). Not a failure worth an event; retry once it has.
			return fmt.Errorf("endpoints cache is behind: %s exists but is not in the cache yet", key)
		}
		c.recorder.Eventf(next, corev1.EventTypeWarning, "FailedToCreateEndpoint", "Failed to create endpoint for service %s: %v", key, err)
	} else {
		c.recorder.Eventf(next, corev1.EventTypeWarning, "FailedToUpdateEndpoint", "Failed to update endpoint %s: %v", key, err)
	}
	return err
}
