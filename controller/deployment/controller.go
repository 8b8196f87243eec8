// Package deployment runs the Deployment controller: each Deployment owns ReplicaSets, one
// per pod template it has had (named <deployment>-<pod-template-hash>), and moves pods from
// the old ones to the current one by its strategy: a rolling update bounded by maxSurge and
// maxUnavailable, or Recreate. It numbers templates with revisions, prunes old ReplicaSets
// beyond revisionHistoryLimit, and writes the status kubectl rollout status reads.
//
// Pods are the ReplicaSet controller's business; this controller only sizes ReplicaSets and
// reads their status.
//
// TODO(deployment): not yet done: the revision annotation on the Deployment itself (and
// change-cause / revision-history annotations), proportional scaling of several active
// ReplicaSets when replicas change mid-rollout or while paused, status.terminatingReplicas,
// copying the Deployment's own annotations onto its ReplicaSets.
package deployment

import (
	"context"
	"fmt"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/workqueue"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the controller's name in --controllers.
const Name = "deployment"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    Name,
	Workers: func(c controller.Config) int { return c.Defaults().ConcurrentDeploymentSyncs },
	New:     func(ctx *controller.Context) (controller.Controller, error) { return New(ctx) },
}

var (
	deploymentKind = appsv1.SchemeGroupVersion.WithKind("Deployment")
)

// Controller syncs Deployments; its queue holds Deployment keys ("ns/name").
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	metrics  *controller.SyncMetrics

	deployments *cache.Informer[*appsv1.Deployment]
	rss         *cache.Informer[*appsv1.ReplicaSet]
	handlers    []cache.Registration

	queue *workqueue.RateLimitingQueue[string]
	now   func() time.Time
}

// New builds the controller on ctx's shared informers and registers its handlers; the
// caller starts the informers, then calls Run.
func New(ctx *controller.Context) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, fmt.Errorf("deployment controller: the context needs a client and informers")
	}
	c := &Controller{
		client:      ctx.Client,
		metrics:     ctx.Syncs,
		deployments: cache.For[*appsv1.Deployment](ctx.Informers, "deployments"),
		rss:         cache.For[*appsv1.ReplicaSet](ctx.Informers, "replicasets"),
		queue: workqueue.NewRateLimited[string](workqueue.DefaultControllerRateLimiter[string](),
			workqueue.WithName(Name), workqueue.WithMetrics(ctx.QueueMetrics)),
		now: time.Now,
	}
	if ctx.Recorder != nil {
		c.recorder = ctx.Recorder.For("deployment-controller")
	}
	c.handlers = []cache.Registration{
		c.deployments.AddHandler(cache.Handler[*appsv1.Deployment]{
			OnAdd:    func(d *appsv1.Deployment, _ bool) { c.enqueue(d) },
			OnUpdate: func(_, d *appsv1.Deployment) { c.enqueue(d) },
			OnDelete: func(d *appsv1.Deployment, _ bool) { c.enqueue(d) },
		}, ctx.ResyncPeriod()),
		c.rss.AddHandler(cache.Handler[*appsv1.ReplicaSet]{
			OnAdd:    func(rs *appsv1.ReplicaSet, _ bool) { c.rsChanged(nil, rs) },
			OnUpdate: func(old, rs *appsv1.ReplicaSet) { c.rsChanged(old, rs) },
			OnDelete: func(rs *appsv1.ReplicaSet, _ bool) { c.rsChanged(nil, rs) },
		}, 0),
	}
	return c, nil
}

// Name is the controller's name in --controllers.
func (c *Controller) Name() string { return Name }

func (c *Controller) enqueue(d *appsv1.Deployment) { c.queue.Add(cache.MetaNamespaceKey(d)) }

// Run waits for the caches and syncs with workers goroutines until ctx is cancelled.
func (c *Controller) Run(ctx context.Context, workers int) error {
	controller.Workers{Name: Name, Queue: c.queue, Count: workers, Sync: c.sync, Metrics: c.metrics,
		Synced: []func() bool{c.deployments.HasSynced, c.rss.HasSynced}, Handlers: c.handlers}.Run(ctx)
	return nil
}

// rsChanged queues the deployment that controls rs (before or after the change), or, for an
// orphan, every deployment that could adopt it.
func (c *Controller) rsChanged(old, rs *appsv1.ReplicaSet) {
	if old != nil && old.ResourceVersion == rs.ResourceVersion {
		return
	}
	queued := false
	for _, x := range []*appsv1.ReplicaSet{old, rs} {
		if x == nil {
			continue
		}
		if ref := metav1.GetControllerOf(x); ref != nil {
			if d := c.ownerOf(x.Namespace, ref); d != nil {
				c.enqueue(d)
				queued = true
			}
		}
	}
	if queued || metav1.GetControllerOf(rs) != nil {
		return
	}
	for _, d := range c.deployments.Lister().Namespace(rs.Namespace).List(labels.Everything()) {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(rs.Labels)) {
			c.enqueue(d)
		}
	}
}

func (c *Controller) ownerOf(ns string, ref *metav1.OwnerReference) *appsv1.Deployment {
	if ref.Kind != deploymentKind.Kind || ref.APIVersion != deploymentKind.GroupVersion().String() {
		return nil
	}
	d, err := c.deployments.Lister().Namespace(ns).Get(ref.Name)
	if err != nil || d.UID != ref.UID {
		return nil
	}
	return d
}

func (c *Controller) event(d *appsv1.Deployment, typ, reason, format string, args ...any) {
	if c.recorder != nil {
		c.recorder.Eventf(d, typ, reason, format, args...)
	}
}
