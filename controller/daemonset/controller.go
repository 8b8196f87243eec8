// Package daemonset is the DaemonSet controller: one pod of each DaemonSet on every node it
// selects (nodeSelector, required node affinity, taints it tolerates with the daemon
// tolerations added), created pinned to its node by node affinity and bound by the scheduler;
// pods on nodes it no longer selects, failed pods and extra pods deleted; templates rolled out
// with RollingUpdate (maxUnavailable, maxSurge) or OnDelete; a ControllerRevision per template
// (kubectl rollout history and undo); status as kubectl rollout status reads it.
package daemonset

import (
	"context"
	"errors"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/events"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "daemonset"

// templateGenerationLabel carries, on a daemon pod, the template generation of the DaemonSet it
// was made from (extensions/v1beta1's name for it, still written by Kubernetes).
const templateGenerationLabel = "pod-template-generation"

// Kind is the kind of the daemon pods' owner references.
var Kind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "daemonset-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentSyncs: DaemonSets synced at once (--concurrent-daemonset-syncs, 2).
	ConcurrentSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentSyncs: 2} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentSyncs, "concurrent-daemonset-syncs", o.ConcurrentSyncs, "workers of the DaemonSet controller")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	if o.ConcurrentSyncs < 1 {
		return []error{errors.New("--concurrent-daemonset-syncs must be at least 1")}
	}
	return nil
}

// Controller syncs DaemonSets: the queue holds DaemonSet keys.
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	sets     *cache.Informer[*appsv1.DaemonSet]
	pods     *cache.Informer[*corev1.Pod]
	nodes    *cache.Informer[*corev1.Node]
	revs     *cache.Informer[*appsv1.ControllerRevision]
	loop     *controller.Loop
	exp      *podcontrol.Expectations
	failures *failedPods
	now      func() time.Time
}

// New builds the controller on ctx's shared informers.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("daemonset controller: the context needs a client and informers")
	}
	c := &Controller{
		client:   ctx.Client,
		recorder: ctx.Recorder.For("daemonset-controller"),
		sets:     cache.For[*appsv1.DaemonSet](ctx.Informers, "daemonsets"),
		pods:     cache.For[*corev1.Pod](ctx.Informers, "pods"),
		nodes:    cache.For[*corev1.Node](ctx.Informers, "nodes"),
		revs:     cache.For[*appsv1.ControllerRevision](ctx.Informers, "controllerrevisions"),
		loop:     controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentSyncs), controller.WithResync(ctx.ResyncPeriod())),
		exp:      podcontrol.NewExpectations(nil),
		failures: newFailedPods(),
		now:      time.Now,
	}
	controller.For(c.loop, c.sets)
	controller.Owns(c.loop, c.revs, Kind)
	podcontrol.WatchOwned(c.loop, c.pods, Kind, c.exp, 0)
	// A node that comes, goes or changes what selects it concerns every DaemonSet.
	all := func() {
		for _, ds := range c.sets.Lister().List(labels.Everything()) {
			c.loop.Queue.Add(cache.MetaNamespaceKey(ds))
		}
	}
	controller.Watch(c.loop, c.nodes, cache.Handler[*corev1.Node]{
		OnAdd: func(*corev1.Node, bool) { all() },
		OnUpdate: func(old, n *corev1.Node) {
			if nodeChanged(old, n) {
				all()
			}
		},
		OnDelete: func(*corev1.Node, bool) { all() },
	}, 0)
	return c, nil
}

// nodeChanged: what decides whether a daemon pod runs on a node changed.
func nodeChanged(old, n *corev1.Node) bool {
	return !labels.Equals(old.Labels, n.Labels) || old.Spec.Unschedulable != n.Spec.Unschedulable ||
		len(old.Spec.Taints) != len(n.Spec.Taints) || !sameTaints(old.Spec.Taints, n.Spec.Taints)
}

func sameTaints(a, b []corev1.Taint) bool {
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value || a[i].Effect != b[i].Effect {
			return false
		}
	}
	return true
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}
