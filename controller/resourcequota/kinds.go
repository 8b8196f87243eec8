package resourcequota

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/quota"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// discoveryPeriod is how often the controller asks the server what it serves (Kubernetes'
// quota controller does every 30 seconds).
const discoveryPeriod = 30 * time.Second

// countedVerbs are what a resource must support to be counted: objects that can be created
// (and so charged), listed, watched and deleted, as Kubernetes' quota controller requires.
var countedVerbs = []string{"create", "list", "watch", "delete"}

// watchTyped registers the resources whose usage is more than a count, and so needs their
// objects whole: pods, services and claims. Their deletions, and the updates released says
// give back what they were charged, queue the quotas of their namespace that count them.
func watchTyped(c *Controller, f *cache.Factory) {
	countTyped(c, f, "pods", func(old, p *corev1.Pod) bool {
		now := c.now()
		return quota.IsTerminating(old) != quota.IsTerminating(p) || quota.Charged(old, now) && !quota.Charged(p, now)
	})
	countTyped(c, f, "services", func(old, s *corev1.Service) bool {
		return quota.QuotaServiceType(old) != quota.QuotaServiceType(s)
	})
	countTyped(c, f, "persistentvolumeclaims", func(old, pvc *corev1.PersistentVolumeClaim) bool {
		return quota.ClaimNeedsRecount(pvc, old)
	})
}

func countTyped[T cache.Object](c *Controller, f *cache.Factory, resource string, released func(old, obj T) bool) {
	gr := schema.GroupResource{Group: client.Resource[T](c.client, resource).GroupVersionKind().Group, Resource: resource}
	inf := cache.For[T](f, resource)
	c.typed[gr] = true
	c.listers[gr] = func(ns string) ([]runtime.Object, error) {
		items := inf.Lister().Namespace(ns).List(labels.Everything())
		out := make([]runtime.Object, len(items))
		for i, o := range items {
			out[i] = o
		}
		return out, nil
	}
	controller.Watch(c.loop, inf, cache.Handler[T]{
		OnDelete: func(obj T, _ bool) { c.replenish(gr, obj.GetNamespace()) },
		OnUpdate: func(old, obj T) {
			if released(old, obj) {
				c.replenish(gr, obj.GetNamespace())
			}
		},
	}, 0)
}

// rediscover asks the server what it serves and counts the objects of every namespaced
// resource that can be created, listed, watched and deleted (count/<resource>.<group>),
// events left out, through the typed informer other controllers share where there is one,
// else one of the objects' metadata; resources no longer served stop being counted. It runs
// before the first sync and then every discoveryPeriod, so a resource served later (a custom
// resource) is counted from the next pass on, without a restart.
//
// Once the loop runs, the quotas that name a newly counted resource are queued when its
// informer has synced (or after a discoveryPeriod, when the sync's error retries): the
// objects there already were never charged by this server's admission, and a quota in a
// namespace with none of them must show 0 used for admission to charge against.
func (c *Controller) rediscover(ctx context.Context) {
	served, err := controller.ServedResources(ctx, c.serverResources, func(r client.APIResource) bool { return r.Namespaced && !quota.Ignored(r.GroupResource()) }, countedVerbs...)
	if err != nil {
		slog.Warn("resource quota controller: discovery failed, counting the resources found before", "err", err)
		return
	}
	added := c.count(served)
	c.informers.Start(ctx)
	if len(added) == 0 {
		return
	}
	// Each resource's quotas are queued as soon as its informer has synced, so that one
	// slow to list does not hold back the others.
	deadline := time.NewTimer(discoveryPeriod)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(added) > 0 {
		for gr, reg := range added {
			if reg.HasSynced() {
				c.recountQuotasNaming(gr)
				delete(added, gr)
			}
		}
		if len(added) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			// Queued anyway: their syncs fail and retry until the informers have synced.
			for gr := range added {
				c.recountQuotasNaming(gr)
			}
			return
		case <-tick.C:
		}
	}
}

// recountQuotasNaming queues every quota whose spec.hard names something gr's objects use.
func (c *Controller) recountQuotasNaming(gr schema.GroupResource) {
	e := quota.For(gr)
	for _, q := range c.quotas.Lister().List(labels.Everything()) {
		if len(e.Matching(quota.Names(q.Spec.Hard))) > 0 {
			c.loop.Queue.Add(cache.MetaNamespaceKey(q))
		}
	}
}

// count makes resources the set of counted resources (beside the typed ones). Once the
// loop runs, it returns the registrations of the resources it started counting.
func (c *Controller) count(resources []client.APIResource) map[schema.GroupResource]cache.Registration {
	c.mu.Lock()
	defer c.mu.Unlock()
	added := map[schema.GroupResource]cache.Registration{}
	c.counted.Sync(resources, func(r client.APIResource) (cache.Registration, bool) {
		gr := r.GroupResource()
		if c.typed[gr] {
			return cache.Registration{}, false
		}
		inf := c.informers.ForResource(r.GroupVersionResource)
		reg := inf.AddObjectHandler(cache.Handler[cache.Object]{OnDelete: func(obj cache.Object, _ bool) { c.replenish(gr, obj.GetNamespace()) }}, 0)
		c.listers[gr] = func(ns string) ([]runtime.Object, error) {
			if !reg.HasSynced() {
				return nil, fmt.Errorf("%s not known yet", gr)
			}
			objs := inf.Objects(ns)
			out := make([]runtime.Object, len(objs))
			for i, o := range objs {
				out[i] = o
			}
			return out, nil
		}
		if c.started {
			added[gr] = reg
		} else {
			c.loop.Reads(reg.HasSynced)
		}
		return reg, true
	}, func(gvr schema.GroupVersionResource, reg cache.Registration) {
		c.uncount(gvr, reg)
		slog.Info("resource quota controller: resource no longer served, not counting it", "resource", gvr)
	})
	return added
}

// uncount removes a counted resource's handler and lister.
func (c *Controller) uncount(gvr schema.GroupVersionResource, reg cache.Registration) {
	reg.Remove()
	delete(c.listers, gvr.GroupResource())
}

// countedResources lists the resources counted now, sorted.
func (c *Controller) countedResources() []schema.GroupResource {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]schema.GroupResource, 0, len(c.listers))
	for gr := range c.listers {
		out = append(out, gr)
	}
	slices.SortFunc(out, func(a, b schema.GroupResource) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// countingListers returns the listers of the counted resources as of now.
func (c *Controller) countingListers() map[schema.GroupResource]quota.Lister {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[schema.GroupResource]quota.Lister, len(c.listers))
	for gr, l := range c.listers {
		out[gr] = l
	}
	return out
}

// stopCounting removes the handlers of the discovered resources: the controller has stopped.
func (c *Controller) stopCounting() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counted.Clear(c.uncount)
}
