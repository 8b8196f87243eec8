// Package resourcequota is the resource quota controller: it keeps every ResourceQuota's status
// true to the namespace it limits. status.hard follows spec.hard; status.used is recounted from
// the objects themselves (the pods, services, claims and counted objects in the quota's
// scopes), so that what the apiserver's quota admission charged is released when objects go
// away, and anything it over-counted is corrected.
//
// A quota is recounted when it is created or its spec changes, when an object it counts is
// deleted or stops using what it was charged for (a pod that finished, a service that is no
// longer a NodePort or LoadBalancer, a claim whose allocated storage changed), and every
// --resource-quota-sync-period. Creations are not watched: admission charged them already.
//
// Besides pods, services and claims (whose usage needs the whole object), it counts the objects
// of every namespaced resource discovery lists as creatable, listable, watchable and deletable
// (count/<resource>.<group>), asked for again every 30 seconds so that resources served later
// (custom resources) are counted from then on; those are watched through the typed informer
// other controllers share, or else one of the objects' metadata only.
package resourcequota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/quota"
	"github.com/kplane/kplane/reconcile"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "resourcequota"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "resourcequota-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentSyncs: quotas recounted at once (--concurrent-resource-quota-syncs, 5).
	ConcurrentSyncs int
	// SyncPeriod: every quota is recounted this often, whatever changed
	// (--resource-quota-sync-period, 5m; 0 turns the periodic recount off, as in Kubernetes).
	SyncPeriod time.Duration
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentSyncs: 5, SyncPeriod: 5 * time.Minute} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentSyncs, "concurrent-resource-quota-syncs", o.ConcurrentSyncs, "workers of the resource quota controller")
	fs.DurationVar(&o.SyncPeriod, "resource-quota-sync-period", o.SyncPeriod, "how often every quota's usage is recounted (0: only on changes)")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConcurrentSyncs < 1 {
		errs = append(errs, errors.New("--concurrent-resource-quota-syncs must be at least 1"))
	}
	if o.SyncPeriod < 0 {
		errs = append(errs, errors.New("--resource-quota-sync-period must not be negative"))
	}
	return errs
}

// Controller recounts quotas; its loop's queue holds quota keys ("ns/name").
type Controller struct {
	client    *client.Client
	informers *cache.Factory
	quotas    *cache.Informer[*corev1.ResourceQuota]
	loop      *controller.Loop
	// now is the clock pods' grace periods are judged by (tests replace it).
	now func() time.Time
	// serverResources is discovery (tests narrow it to show resources appearing).
	serverResources func(context.Context) ([]*metav1.APIResourceList, error)

	mu      sync.Mutex
	listers map[schema.GroupResource]quota.Lister // of every counted resource
	typed   map[schema.GroupResource]bool         // pods, services, claims: typed informers
	counted controller.Discovered[cache.Registration]
	started bool // the loop runs: new handlers are not waited for
}

// New builds the controller on ctx's shared informers: the quotas', and those of every
// resource it counts.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("resourcequota controller: %w", errors.Join(errs...))
	}
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("resourcequota controller: the context needs a client and informers")
	}
	c := &Controller{
		client:    ctx.Client,
		informers: ctx.Informers,
		quotas:    cache.For[*corev1.ResourceQuota](ctx.Informers, "resourcequotas"),
		listers:   map[schema.GroupResource]quota.Lister{},
		typed:     map[schema.GroupResource]bool{},
		loop:      controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentSyncs), controller.WithQueueName("resourcequota_primary")),
		now:       time.Now,
	}
	c.serverResources = c.client.ServerResources
	enqueue := func(q *corev1.ResourceQuota) { c.loop.Queue.Add(cache.MetaNamespaceKey(q)) }
	controller.Watch(c.loop, c.quotas, cache.Handler[*corev1.ResourceQuota]{
		OnAdd: func(q *corev1.ResourceQuota, _ bool) { enqueue(q) },
		// Status writes (this controller's, admission's charges) need no recount; a changed
		// spec does.
		OnUpdate: func(old, q *corev1.ResourceQuota) {
			if !apiequality.Semantic.DeepEqual(old.Spec, q.Spec) {
				enqueue(q)
			}
		},
	}, 0)
	watchTyped(c, ctx.Informers)
	if o.SyncPeriod > 0 {
		c.loop.Every(o.SyncPeriod, c.enqueueAll)
	}
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run discovers the resources to count, waits for the caches and recounts quotas until ctx
// is cancelled, discovering again every discoveryPeriod.
func (c *Controller) Run(ctx context.Context) error {
	c.rediscover(ctx)
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	defer c.stopCounting()
	c.loop.Every(discoveryPeriod, c.rediscover)
	c.loop.Run(ctx, reconcile.Ignore(c.sync))
	return nil
}

// enqueueAll queues every quota: the periodic full recount.
func (c *Controller) enqueueAll(context.Context) {
	for _, q := range c.quotas.Lister().List(labels.Everything()) {
		c.loop.Queue.Add(cache.MetaNamespaceKey(q))
	}
}

// replenish queues the quotas of ns that limit something objects of gr use: one of those
// objects went away or stopped using what it was charged for.
func (c *Controller) replenish(gr schema.GroupResource, ns string) {
	e := quota.For(gr)
	for _, q := range c.quotas.Lister().Namespace(ns).List(labels.Everything()) {
		if len(e.Matching(quota.Names(q.Status.Hard))) > 0 {
			c.loop.Queue.Add(cache.MetaNamespaceKey(q))
		}
	}
}

// sync recounts one quota and writes its status if it changed: status.hard is spec.hard,
// status.used the usage counted now for every resource the controller can count (the last
// written value for any other), for the names in spec.hard only.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return nil // not a key of ours: retrying will not mend it
	}
	q, err := c.quotas.Lister().Namespace(ns).Get(name)
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	hard := quota.Add(nil, q.Spec.Hard)
	used := quota.Add(nil, q.Status.Used)
	counted, countErr := quota.Calculate(ns, &q.Spec, hard, c.countingListers(), c.now())
	for name, v := range counted {
		used[name] = v
	}
	used = quota.Mask(used, quota.Names(hard))
	if apiequality.Semantic.DeepEqual(q.Spec.Hard, q.Status.Hard) && q.Status.Hard != nil && q.Status.Used != nil &&
		quota.Equal(used, q.Status.Used) {
		return countErr
	}
	next := q.DeepCopy()
	next.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
	// The write carries the resourceVersion counted from: a charge admission made since
	// makes it a conflict, and the retry counts again.
	_, err = client.Resource[*corev1.ResourceQuota](c.client, "resourcequotas").Namespace(ns).UpdateStatus(ctx, next)
	if client.IsNotFound(err) {
		err = nil
	}
	return errors.Join(countErr, err)
}
