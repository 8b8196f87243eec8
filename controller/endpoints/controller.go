package endpoints

import (
	"context"
	"errors"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/workqueue"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the controller's name in --controllers, as in kube-controller-manager.
const Name = "endpoint"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    Name,
	Workers: func(c controller.Config) int { return c.ConcurrentEndpointSyncs },
	New: func(ctx *controller.Context) (controller.Controller, error) {
		c, err := New(ctx)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
}

// Controller keeps the Endpoints of every service with a selector in step with its pods.
// The work queue holds service keys ("ns/name"); pod, service and Endpoints events only ever
// queue keys, and sync does all the work.
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	metrics  *controller.SyncMetrics

	pods     *cache.Informer[*corev1.Pod]
	services *cache.Informer[*corev1.Service]
	matcher  *controller.ServiceMatcher
	// podSelector lists the pods a service selects.
	podSelector *controller.PodSelector
	endpoints   *cache.Informer[*corev1.Endpoints]
	handlers    []cache.Registration

	queue *workqueue.RateLimitingQueue[string]
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
func New(ctx *controller.Context) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("endpoints controller: the context needs a client and informers")
	}
	var recorder *events.Recorder
	if ctx.Recorder != nil {
		recorder = ctx.Recorder.For(ControllerName)
	}
	// Retries as Kubernetes' controllers pace them: per key 5 ms doubling up to 1000 s, and at
	// most 10 a second after a burst of 100 overall, whichever waits longer.
	limiter := workqueue.DefaultControllerRateLimiter[string]()
	c := &Controller{
		client:      ctx.Client,
		recorder:    recorder,
		metrics:     ctx.Syncs,
		pods:        cache.For[*corev1.Pod](ctx.Informers, "pods"),
		services:    cache.For[*corev1.Service](ctx.Informers, "services"),
		endpoints:   cache.For[*corev1.Endpoints](ctx.Informers, "endpoints"),
		queue:       workqueue.NewRateLimited[string](limiter, workqueue.WithName(Name), workqueue.WithMetrics(ctx.QueueMetrics)),
		batchPeriod: ctx.Config.EndpointUpdatesBatchPeriod,
		triggers:    controller.NewTriggerTimes(),
		stale:       newStaleVersions(),
		problems:    newProblemLog(),
	}
	c.matcher = controller.NewServiceMatcher(c.services.Indexer())
	c.podSelector = controller.NewPodSelector(c.pods.Indexer())
	queueService := func(svc *corev1.Service) { c.queue.Add(cache.MetaNamespaceKey(svc)) }
	c.handlers = []cache.Registration{
		// Services resync: that is what retries a service whose key was dropped after too
		// many failures. Pod resyncs would only repeat that, so pods get none.
		c.services.AddHandler(cache.Handler[*corev1.Service]{
			OnAdd:    func(svc *corev1.Service, _ bool) { queueService(svc) },
			OnUpdate: func(_, svc *corev1.Service) { queueService(svc) },
			OnDelete: func(svc *corev1.Service, _ bool) { queueService(svc) },
		}, ctx.ResyncPeriod()),
		c.pods.AddHandler(cache.Handler[*corev1.Pod]{
			OnAdd:    func(pod *corev1.Pod, _ bool) { c.onPodEvent(nil, pod) },
			OnUpdate: c.onPodEvent,
			OnDelete: func(pod *corev1.Pod, _ bool) { c.onPodEvent(pod, nil) },
		}, 0),
		// Only a deletion of Endpoints matters: the service is synced and recreates them
		// if it still wants them. Other changes by others are not fought over until the
		// service or its pods change.
		c.endpoints.AddHandler(cache.Handler[*corev1.Endpoints]{
			OnDelete: func(ep *corev1.Endpoints, _ bool) { c.queue.Add(cache.MetaNamespaceKey(ep)) },
		}, 0),
	}
	return c, nil
}

// Name is the controller's name in --controllers.
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
		c.queue.AddAfter(key, c.batchPeriod)
	}
}

// Run waits for the caches, queues every existing Endpoints object once so that those whose
// service was deleted while no controller ran get deleted too, and syncs with workers
// goroutines until ctx is cancelled. It returns nil once every goroutine it started has ended.
func (c *Controller) Run(ctx context.Context, workers int) error {
	controller.Workers{Name: Name, Queue: c.queue, Count: workers, Sync: c.sync, Metrics: c.metrics,
		Synced: []func() bool{c.pods.HasSynced, c.services.HasSynced, c.endpoints.HasSynced}, Handlers: c.handlers,
		Ready: c.queueLeftovers}.Run(ctx)
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
		c.queue.Add(cache.MetaNamespaceKey(ep))
	}
}
