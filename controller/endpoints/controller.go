package endpoints

import (
	"context"
	"errors"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/reconcile"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "endpoint"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "endpoints-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentEndpointSyncs: services synced at once (--concurrent-endpoint-syncs, 5).
	ConcurrentEndpointSyncs int
	// EndpointUpdatesBatchPeriod delays the sync after a pod change, so that a burst of pod
	// changes (a rollout) becomes one write (--endpoint-updates-batch-period, 0: no delay).
	EndpointUpdatesBatchPeriod time.Duration
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentEndpointSyncs: 5} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentEndpointSyncs, "concurrent-endpoint-syncs", o.ConcurrentEndpointSyncs, "workers of the endpoints controller")
	fs.DurationVar(&o.EndpointUpdatesBatchPeriod, "endpoint-updates-batch-period", o.EndpointUpdatesBatchPeriod, "delay before syncing a service after a pod change, to batch changes")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConcurrentEndpointSyncs < 1 {
		errs = append(errs, errors.New("--concurrent-endpoint-syncs must be at least 1"))
	}
	if o.EndpointUpdatesBatchPeriod < 0 {
		errs = append(errs, errors.New("--endpoint-updates-batch-period must not be negative"))
	}
	return errs
}

// Controller keeps the Endpoints of every service with a selector in step with its pods.
// The work queue holds service keys ("ns/name"); pod, service and Endpoints events only ever
// queue keys, and sync does all the work.
type Controller struct {
	client   *client.Client
	recorder *events.Recorder

	pods     *cache.Informer[*corev1.Pod]
	services *cache.Informer[*corev1.Service]
	matcher  *controller.ServiceMatcher
	// podSelector lists the pods a service selects.
	podSelector *controller.PodSelector
	endpoints   *cache.Informer[*corev1.Endpoints]

	loop *controller.Loop
	// batchPeriod delays the sync after a pod change, so that a burst of pod changes (a
	// rollout) becomes one write.
	batchPeriod time.Duration

	triggers *controller.TriggerTimes
	stale    *staleVersions
	problems *problemLog
}

// New builds the controller on ctx's shared informers (pods, services, endpoints) and
// registers its event handlers; the caller starts the informers, then calls Run. ctx needs a
// Client and Informers; without a Recorder no events are written.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("endpoints controller: the context needs a client and informers")
	}
	var recorder *events.Recorder
	if ctx.Recorder != nil {
		recorder = ctx.Recorder.For(ControllerName)
	}
	c := &Controller{
		client:    ctx.Client,
		recorder:  recorder,
		pods:      cache.For[*corev1.Pod](ctx.Informers, "pods"),
		services:  cache.For[*corev1.Service](ctx.Informers, "services"),
		endpoints: cache.For[*corev1.Endpoints](ctx.Informers, "endpoints"),
		// Retries as Kubernetes' controllers pace them (the Loop's default limiter): per key
		// 5 ms doubling up to 1000 s, and at most 10 a second after a burst of 100 overall.
		// Services resync: that is what retries a service whose key was dropped after too
		// many failures. Pod resyncs would only repeat that, so pods get none.
		loop: controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentEndpointSyncs),
			controller.WithResync(ctx.ResyncPeriod())),
		batchPeriod: o.EndpointUpdatesBatchPeriod,
		triggers:    controller.NewTriggerTimes(),
		stale:       newStaleVersions(),
		problems:    newProblemLog(),
	}
	c.matcher = controller.NewServiceMatcher(c.services.Indexer())
	c.podSelector = controller.NewPodSelector(c.pods.Indexer())
	controller.For(c.loop, c.services)
	// Pod changes are queued after the batch period, and only for the services they concern.
	controller.Watch(c.loop, c.pods, cache.Handler[*corev1.Pod]{
		OnAdd:    func(pod *corev1.Pod, _ bool) { c.onPodEvent(nil, pod) },
		OnUpdate: c.onPodEvent,
		OnDelete: func(pod *corev1.Pod, _ bool) { c.onPodEvent(pod, nil) },
	}, 0)
	// Only a deletion of Endpoints matters: the service is synced and recreates them if it
	// still wants them. Other changes by others are not fought over until the service or its
	// pods change.
	controller.Watch(c.loop, c.endpoints, cache.Handler[*corev1.Endpoints]{
		OnDelete: func(ep *corev1.Endpoints, _ bool) { c.loop.Queue.Add(cache.MetaNamespaceKey(ep)) },
	}, 0)
	c.loop.OnReady(c.queueLeftovers)
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// onPodEvent queues, after the batch period, the services a pod event may concern (old nil:
// created; cur nil: deleted, a possibly stale last state if the deletion was missed).
func (c *Controller) onPodEvent(old, cur *corev1.Pod) {
	var ns string
	switch {
	case cur != nil:
		ns = cur.Namespace
	case old != nil:
		ns = old.Namespace
	default:
		return
	}
	matching := func(podLabels map[string]string) []*corev1.Service { return c.matcher.Matching(ns, podLabels) }
	for _, key := range servicesToSync(matching, old, cur) {
		c.loop.Queue.AddAfter(key, c.batchPeriod)
	}
}

// Run waits for the caches, queues every existing Endpoints object once so that those whose
// service was deleted while no controller ran get deleted too (queueLeftovers, run by the
// loop once ready), and syncs until ctx is cancelled. It returns nil once every goroutine it
// started has ended.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, reconcile.Ignore(c.sync))
	return nil
}

// queueLeftovers queues the key of every Endpoints object in the cache. Syncing the key of an
// Endpoints without a service deletes it; those marked as an old leader-election lock are
// not services' and are left alone.
func (c *Controller) queueLeftovers() {
	for _, ep := range c.endpoints.Lister().List(labels.Everything()) {
		if _, lock := ep.Annotations[leaderAnnotation]; lock {
			continue
		}
		c.loop.Queue.Add(cache.MetaNamespaceKey(ep))
	}
}
