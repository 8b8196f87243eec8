// Package replicaset runs the ReplicaSet and ReplicationController controllers (seed 000's
// replication manager): one generic controller over the owner kind, keeping each owner's
// count of active pods at its replicas. It adopts orphans its selector matches, releases
// pods that no longer match, creates missing pods in slow-start batches and deletes surplus
// ones (the cheapest to lose first), at most BurstReplicas per sync, and writes the owner's
// status. Expectations keep a cache that lags behind the controller's own writes from
// causing extra creations or deletions.
package replicaset

import (
	"context"
	"fmt"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/events"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// BurstReplicas is the most pods one sync creates or deletes (seed 000's burst limit); the
// rest wait for the next sync, once these have been observed.
const BurstReplicas = 500

// Controller keeps the pods of every owner of one kind (T) in step with its spec. The loop's
// queue holds owner keys ("ns/name"); handlers only queue keys and settle expectations.
type Controller[T cache.Object] struct {
	kind     Kind[T]
	client   *client.Client
	recorder *events.Recorder

	owners *cache.Informer[T]
	pods   *cache.Informer[*corev1.Pod]

	loop *controller.Loop
	exp  *podcontrol.Expectations
	// burst bounds the creations or deletions of one sync.
	burst int
	now   func() time.Time
}

// New builds the controller for kind k with settings o (DefaultOptions(k) and the flags) on
// ctx's shared informers and registers its handlers; the caller starts the informers, then
// calls Run.
func New[T cache.Object](ctx *controller.Context, k Kind[T], o *Options) (*Controller[T], error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, fmt.Errorf("%s controller: the context needs a client and informers", k.Name)
	}
	var recorder *events.Recorder
	if ctx.Recorder != nil {
		recorder = ctx.Recorder.For(k.Component)
	}
	c := &Controller[T]{
		kind:     k,
		client:   ctx.Client,
		recorder: recorder,
		owners:   cache.For[T](ctx.Informers, k.Resource),
		pods:     cache.For[*corev1.Pod](ctx.Informers, "pods"),
		loop:     controller.NewLoop(ctx, k.Name, controller.WithWorkers(o.ConcurrentSyncs)),
		exp:      podcontrol.NewExpectations(nil),
		burst:    BurstReplicas,
		now:      time.Now,
	}
	// Not For: a deleted owner's expectations go with it.
	controller.Watch(c.loop, c.owners, cache.Handler[T]{
		OnAdd:    func(o T, _ bool) { c.enqueue(o) },
		OnUpdate: func(_, o T) { c.enqueue(o) },
		OnDelete: func(o T, _ bool) {
			c.exp.Forget(cache.MetaNamespaceKey(o))
			c.enqueue(o)
		},
	}, ctx.ResyncPeriod())
	// Not Owns: pod events settle expectations, orphans queue the owners that may adopt them,
	// and a pod becoming ready queues its owner again when it becomes available.
	controller.Watch(c.loop, c.pods, cache.Handler[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod, _ bool) { c.addPod(p) },
		OnUpdate: c.updatePod,
		OnDelete: func(p *corev1.Pod, _ bool) { c.deletePod(p) },
	}, 0)
	return c, nil
}

// Name is the controller's short name.
func (c *Controller[T]) Name() string { return c.kind.Name }

func (c *Controller[T]) enqueue(o T) { c.loop.Queue.Add(cache.MetaNamespaceKey(o)) }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller[T]) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}

// ownerOf returns the cached owner that ref names in namespace ns, if it is of this kind and
// has ref's UID.
func (c *Controller[T]) ownerOf(ns string, ref *metav1.OwnerReference) (T, bool) {
	var zero T
	if ref == nil || ref.Kind != c.kind.GVK.Kind || ref.APIVersion != c.kind.GVK.GroupVersion().String() {
		return zero, false
	}
	o, err := c.owners.Lister().Namespace(ns).Get(ref.Name)
	if err != nil || o.GetUID() != ref.UID {
		return zero, false
	}
	return o, true
}

// matchingOwners returns the owners of pod's namespace whose selector matches its labels:
// those that may adopt it.
func (c *Controller[T]) matchingOwners(pod *corev1.Pod) []T {
	var out []T
	set := labels.Set(pod.Labels)
	for _, o := range c.owners.Lister().Namespace(pod.Namespace).List(labels.Everything()) {
		sel, err := c.kind.Selector(o)
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(set) {
			out = append(out, o)
		}
	}
	return out
}

func (c *Controller[T]) addPod(pod *corev1.Pod) {
	if pod.DeletionTimestamp != nil {
		// Seen for the first time already terminating (after a restart, say): that is
		// how a deletion looks to expectations.
		c.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if o, ok := c.ownerOf(pod.Namespace, ref); ok {
			key := cache.MetaNamespaceKey(o)
			c.exp.CreationObserved(key)
			c.loop.Queue.Add(key)
		}
		return
	}
	for _, o := range c.matchingOwners(pod) {
		c.enqueue(o)
	}
}

func (c *Controller[T]) updatePod(old, cur *corev1.Pod) {
	if old.ResourceVersion == cur.ResourceVersion {
		return // a resync: owners resync on their own
	}
	if cur.DeletionTimestamp != nil {
		// Graceful deletion begun: count it now, the final deletion comes later.
		c.deletePod(cur)
		if labelsChanged(old, cur) {
			c.deletePod(old)
		}
		return
	}
	oldRef, curRef := metav1.GetControllerOf(old), metav1.GetControllerOf(cur)
	if oldRef != nil && (curRef == nil || oldRef.UID != curRef.UID) {
		if o, ok := c.ownerOf(old.Namespace, oldRef); ok {
			c.enqueue(o)
		}
	}
	if curRef != nil {
		if o, ok := c.ownerOf(cur.Namespace, curRef); ok {
			c.enqueue(o)
			// A pod that just became ready becomes available after minReadySeconds:
			// look again then.
			if mrs := c.kind.MinReadySeconds(o); mrs > 0 && !podcontrol.ReadySince(old).Ready && podcontrol.ReadySince(cur).Ready {
				c.loop.Queue.AddAfter(cache.MetaNamespaceKey(o), time.Duration(mrs)*time.Second+time.Second)
			}
		}
		return
	}
	if labelsChanged(old, cur) || oldRef != nil {
		for _, o := range c.matchingOwners(cur) {
			c.enqueue(o)
		}
	}
}

func labelsChanged(a, b *corev1.Pod) bool {
	return !labels.Equals(a.Labels, b.Labels)
}

func (c *Controller[T]) deletePod(pod *corev1.Pod) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return
	}
	o, ok := c.ownerOf(pod.Namespace, ref)
	if !ok {
		return
	}
	key := cache.MetaNamespaceKey(o)
	c.exp.DeletionObserved(key, cache.MetaNamespaceKey(pod))
	c.loop.Queue.Add(key)
}

// event records an event about the owner, when there is a recorder.
func (c *Controller[T]) event(o T, typ, reason, format string, args ...any) {
	if c.recorder != nil {
		c.recorder.Eventf(o, typ, reason, format, args...)
	}
}
