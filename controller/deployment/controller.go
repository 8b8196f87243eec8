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
	"errors"
	"fmt"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "deployment"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "deployment-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentDeploymentSyncs: Deployments synced at once (--concurrent-deployment-syncs, 5).
	ConcurrentDeploymentSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentDeploymentSyncs: 5} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentDeploymentSyncs, "concurrent-deployment-syncs", o.ConcurrentDeploymentSyncs, "workers of the Deployment controller")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	if o.ConcurrentDeploymentSyncs < 1 {
		return []error{errors.New("--concurrent-deployment-syncs must be at least 1")}
	}
	return nil
}

var (
	deploymentKind = appsv1.SchemeGroupVersion.WithKind("Deployment")
)

// Controller syncs Deployments; its loop's queue holds Deployment keys ("ns/name").
type Controller struct {
	client   *client.Client
	recorder *events.Recorder

	deployments *cache.Informer[*appsv1.Deployment]
	rss         *cache.Informer[*appsv1.ReplicaSet]

	loop *controller.Loop
	now  func() time.Time
}

// New builds the controller on ctx's shared informers and registers its handlers; the
// caller starts the informers, then calls Run.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, fmt.Errorf("deployment controller: the context needs a client and informers")
	}
	c := &Controller{
		client:      ctx.Client,
		deployments: cache.For[*appsv1.Deployment](ctx.Informers, "deployments"),
		rss:         cache.For[*appsv1.ReplicaSet](ctx.Informers, "replicasets"),
		loop: controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentDeploymentSyncs),
			controller.WithResync(ctx.ResyncPeriod())),
		now: time.Now,
	}
	if ctx.Recorder != nil {
		c.recorder = ctx.Recorder.For("deployment-controller")
	}
	controller.For(c.loop, c.deployments)
	// Not Owns: a ReplicaSet's owner must be the Deployment of that UID, an orphan queues the
	// Deployments that may adopt it, and resyncs are left out.
	controller.Watch(c.loop, c.rss, cache.Handler[*appsv1.ReplicaSet]{
		OnAdd:    func(rs *appsv1.ReplicaSet, _ bool) { c.rsChanged(nil, rs) },
		OnUpdate: func(old, rs *appsv1.ReplicaSet) { c.rsChanged(old, rs) },
		OnDelete: func(rs *appsv1.ReplicaSet, _ bool) { c.rsChanged(nil, rs) },
	}, 0)
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

func (c *Controller) enqueue(d *appsv1.Deployment) { c.loop.Queue.Add(cache.MetaNamespaceKey(d)) }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
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
