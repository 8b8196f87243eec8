package endpointslice

import (
	"context"
	"fmt"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/workqueue"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Entry registers the controller with the controller manager.
var Entry = controller.Entry{
	Name:    "endpointslice",
	Workers: func(c controller.Config) int { return c.Defaults().ConcurrentServiceEndpointSyncs },
	New:     func(ctx *controller.Context) (controller.Controller, error) { return New(ctx) },
}

const (
	// eventSource names the controller in the Events it records, as Kubernetes does.
	eventSource = "endpoint-slice-controller"
	// sliceServiceIndex indexes slices by "namespace/service" from their service-name label.
	sliceServiceIndex = "endpointslice-controller/service"
	// minSliceChangeDelay is the least delay before a Service is synced after someone else
	// changed one of its slices: changes to several slices are often made together.
	minSliceChangeDelay = time.Second
	// Retries of a failing Service wait 1s, 2s, 4s, … up to this; the first is longer than the
	// usual controller's 5ms because a sync may write many slices.
	minRetryDelay, maxRetryDelay = time.Second, 1000 * time.Second
)

// Controller keeps the EndpointSlices of every Service with a selector.
type Controller struct {
	client   *client.Client
	services cache.Lister[*corev1.Service]
	matcher  *controller.ServiceMatcher
	// podSelector lists the pods a Service selects.
	podSelector *controller.PodSelector
	pods        cache.Lister[*corev1.Pod]
	nodes       cache.Lister[*corev1.Node]
	slices      *cache.Indexer[*discoveryv1.EndpointSlice]
	synced      []func() bool
	handlers    []cache.Registration

	queue    *workqueue.RateLimitingQueue[string]
	tracker  *sliceTracker
	triggers *controller.TriggerTimes
	metrics  *metrics
	syncs    *controller.SyncMetrics
	recorder *events.Recorder
	logged   *onceLog

	maxEndpointsPerSlice int
	// batchPeriod delays syncs caused by pod changes, so that a burst becomes one write.
	batchPeriod time.Duration
}

// New builds the controller over ctx's informers and registers its event handlers; Run starts it.
func New(ctx *controller.Context) (*Controller, error) {
	cfg := ctx.Config.Defaults()
	if cfg.MaxEndpointsPerSlice < 1 || cfg.MaxEndpointsPerSlice > 1000 {
		return nil, fmt.Errorf("endpointslice: max endpoints per slice must be between 1 and 1000, not %d", cfg.MaxEndpointsPerSlice)
	}
	if cfg.EndpointSliceUpdatesBatchPeriod < 0 {
		return nil, fmt.Errorf("endpointslice: the updates batch period must not be negative, not %v", cfg.EndpointSliceUpdatesBatchPeriod)
	}
	reg := ctx.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("endpointslice: metrics: %w", err)
	}

	serviceInf := cache.For[*corev1.Service](ctx.Informers, "services")
	podInf := cache.For[*corev1.Pod](ctx.Informers, "pods")
	nodeInf := cache.For[*corev1.Node](ctx.Informers, "nodes")
	sliceInf := cache.For[*discoveryv1.EndpointSlice](ctx.Informers, "endpointslices")
	// The informer is shared, so it may exist already: add the index rather than pass it as an
	// option. A conflict means another instance of this controller added it first.
	_ = sliceInf.Indexer().AddIndexers(cache.Indexers[*discoveryv1.EndpointSlice]{sliceServiceIndex: indexByService})

	c := &Controller{
		client:      ctx.Client,
		services:    serviceInf.Lister(),
		matcher:     controller.NewServiceMatcher(serviceInf.Indexer()),
		podSelector: controller.NewPodSelector(podInf.Indexer()),
		pods:        podInf.Lister(),
		nodes:       nodeInf.Lister(),
		slices:      sliceInf.Indexer(),
		synced:      []func() bool{serviceInf.HasSynced, podInf.HasSynced, nodeInf.HasSynced, sliceInf.HasSynced},
		queue: workqueue.NewRateLimited[string](
			workqueue.NewMaxOfRateLimiter(
				workqueue.NewItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay),
				workqueue.NewBucketRateLimiter[string](10, 100), // for all Services together
			),
			workqueue.WithName("endpoint_slice"), workqueue.WithMetrics(ctx.QueueMetrics)),
		tracker:              newSliceTracker(),
		triggers:             controller.NewTriggerTimes(),
		metrics:              m,
		syncs:                ctx.Syncs,
		logged:               newOnceLog(),
		maxEndpointsPerSlice: cfg.MaxEndpointsPerSlice,
		batchPeriod:          cfg.EndpointSliceUpdatesBatchPeriod,
	}
	if ctx.Recorder != nil {
		c.recorder = ctx.Recorder.For(eventSource)
	}
	c.handlers = []cache.Registration{
		serviceInf.AddHandler(cache.Handler[*corev1.Service]{
			OnAdd:    func(s *corev1.Service, _ bool) { c.queueService(s) },
			OnUpdate: func(_, s *corev1.Service) { c.queueService(s) },
			OnDelete: func(s *corev1.Service, _ bool) { c.queueService(s) },
		}, ctx.ResyncPeriod()),
		podInf.AddHandler(cache.Handler[*corev1.Pod]{
			OnAdd:    func(p *corev1.Pod, _ bool) { c.podAdded(p) },
			OnUpdate: c.podUpdated,
			OnDelete: func(p *corev1.Pod, _ bool) { c.podAdded(p) },
		}, 0),
		nodeInf.AddHandler(cache.Handler[*corev1.Node]{
			OnAdd:    c.nodeAdded,
			OnUpdate: c.nodeUpdated,
			OnDelete: func(n *corev1.Node, _ bool) { c.queueServicesOnNode(n.Name) },
		}, 0),
		sliceInf.AddHandler(cache.Handler[*discoveryv1.EndpointSlice]{
			OnAdd:    func(s *discoveryv1.EndpointSlice, _ bool) { c.sliceAdded(s) },
			OnUpdate: c.sliceUpdated,
			OnDelete: func(s *discoveryv1.EndpointSlice, _ bool) { c.sliceDeleted(s) },
		}, 0),
	}
	return c, nil
}

// indexByService files a slice under the Service its service-name label names.
func indexByService(s *discoveryv1.EndpointSlice) ([]string, error) {
	if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
		return []string{s.Namespace + "/" + name}, nil
	}
	return nil, nil
}

// Name implements controller.Controller.
func (c *Controller) Name() string { return Entry.Name }

// Run waits for the informers' caches and its handlers, then syncs Services on workers goroutines until ctx is
// cancelled. When it returns, its goroutines have ended and its event handlers are removed.
// Run must be called once.
func (c *Controller) Run(ctx context.Context, workers int) error {
	controller.Workers{Name: Entry.Name, Queue: c.queue, Count: workers, Sync: c.sync, Metrics: c.syncs,
		Synced: c.synced, Handlers: c.handlers, Log: []any{"maxEndpointsPerSlice", c.maxEndpointsPerSlice}}.Run(ctx)
	return nil
}
