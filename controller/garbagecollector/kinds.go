package garbagecollector

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// kind is one served resource the collector watches, with the reads and writes it makes to
// its objects (their metadata only: that is all it looks at).
type kind struct {
	gvk        schema.GroupVersionKind
	resource   string
	namespaced bool
	api        *client.Typed[*metav1.PartialObjectMetadata]
}

func (k *kind) get(ctx context.Context, ns, name string) (metav1.Object, error) {
	return k.api.Namespace(ns).Get(ctx, name)
}

func (k *kind) delete(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
	return k.api.Namespace(ns).Delete(ctx, name, opts)
}

func (k *kind) patch(ctx context.Context, ns, name string, pt types.PatchType, data []byte) error {
	_, err := k.api.Namespace(ns).Patch(ctx, name, pt, data, metav1.PatchOptions{})
	return err
}

// watched is a resource the collector watches: its kind and its informer handler.
type watched struct {
	kind *kind
	reg  cache.Registration
}

// collectedVerbs are what a resource must support for the collector to handle its objects:
// seeing them all and deleting them (as Kubernetes' collector requires).
var collectedVerbs = []string{"delete", "list", "watch"}

// ignored are resources the collector leaves alone, as Kubernetes' does: events, which nothing
// owns in practice and which churn the most.
func ignored(gvr schema.GroupVersionResource) bool {
	return gvr.Resource == "events" && (gvr.Group == "" || gvr.Group == "events.k8s.io")
}

// rediscover asks the server what it serves and watches every resource that can be listed,
// watched and deleted (the preferred version of each group), from the typed informer other
// controllers share where there is one, else from one of the objects' metadata. Resources no
// longer served stop being watched. It runs before the first sync and then every
// discoveryPeriod, so a resource that appears later (a custom resource) is collected from the
// next pass on, without a restart.
func (c *Controller) rediscover(ctx context.Context) {
	served, err := controller.ServedResources(ctx, c.serverResources, func(r client.APIResource) bool { return !ignored(r.GroupVersionResource) }, collectedVerbs...)
	if err != nil {
		// Kept as they are: a failed discovery says nothing about what stopped being served.
		slog.Warn("garbage collector: discovery failed, watching the resources found before", "err", err)
		return
	}
	c.watch(served)
	c.informers.Start(ctx)
}

// watch makes resources the set of watched resources: it adds handlers for the new ones and
// removes those of the ones gone. New handlers are added to the loop's wait for sync when
// the loop has not started yet.
func (c *Controller) watch(resources []client.APIResource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched.Sync(resources, func(r client.APIResource) (watched, bool) {
		k := &kind{gvk: r.GroupVersionKind(), resource: r.Resource, namespaced: r.Namespaced, api: client.Metadata(c.client, r.GroupVersionResource)}
		gvk := k.gvk
		inf := c.informers.ForResource(r.GroupVersionResource)
		// The graph needs every change, and its keys are UIDs: a handler of its own.
		reg := inf.AddObjectHandler(cache.Handler[cache.Object]{
			OnAdd:    func(obj cache.Object, _ bool) { c.observe(nodeOf(obj, gvk)) },
			OnUpdate: func(_, obj cache.Object) { c.observe(nodeOf(obj, gvk)) },
			OnDelete: func(obj cache.Object, _ bool) { c.forget(obj.GetUID()) },
		}, 0)
		c.kinds[gvk.GroupKind()] = k
		if !c.started {
			c.loop.Reads(reg.HasSynced)
		}
		slog.Debug("garbage collector: watching", "resource", r.GroupVersionResource)
		return watched{kind: k, reg: reg}, true
	}, func(gvr schema.GroupVersionResource, w watched) {
		c.unwatch(w)
		slog.Info("garbage collector: resource no longer served, not watching it", "resource", gvr)
	})
}

// unwatch removes a resource's handler and forgets its kind.
func (c *Controller) unwatch(w watched) {
	w.reg.Remove()
	if c.kinds[w.kind.gvk.GroupKind()] == w.kind {
		delete(c.kinds, w.kind.gvk.GroupKind())
	}
}

// watchedResources lists the resources watched now, sorted.
func (c *Controller) watchedResources() []schema.GroupVersionResource {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.watched.Resources()
	slices.SortFunc(out, compareGVR)
	return out
}

// compareGVR orders resources by group, then resource.
func compareGVR(a, b schema.GroupVersionResource) int {
	if a.Group != b.Group {
		return strings.Compare(a.Group, b.Group)
	}
	return strings.Compare(a.Resource, b.Resource)
}

// kindOf returns the watched kind gk, or nil.
func (c *Controller) kindOf(gk schema.GroupKind) *kind {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kinds[gk]
}

// stopWatching removes every handler: the collector has stopped.
func (c *Controller) stopWatching() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched.Clear(func(_ schema.GroupVersionResource, w watched) { c.unwatch(w) })
}

// nodeOf is the graph's view of obj.
func nodeOf(obj metav1.Object, gvk schema.GroupVersionKind) *node {
	return &node{
		uid:        obj.GetUID(),
		kind:       gvk,
		namespace:  obj.GetNamespace(),
		name:       obj.GetName(),
		owners:     obj.GetOwnerReferences(),
		deleting:   obj.GetDeletionTimestamp() != nil,
		finalizers: obj.GetFinalizers(),
	}
}
