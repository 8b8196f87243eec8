package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	// Named so as not to clash with this package's reconcile (reconciler.go).
	workers "github.com/kplane/kplane/reconcile"
	"github.com/kplane/kplane/workqueue"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "endpointslice"

// Entry registers the controller with the controller manager.
var Entry = controller.Entry{
	Name:    "endpointslice-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentServiceEndpointSyncs: Services synced at once, 1–50
	// (--concurrent-service-endpoint-syncs, 5).
	ConcurrentServiceEndpointSyncs int
	// MaxEndpointsPerSlice: endpoints in one EndpointSlice, 1–1000 (--max-endpoints-per-slice,
	// 100).
	MaxEndpointsPerSlice int
	// EndpointSliceUpdatesBatchPeriod delays the sync after a pod change, so that a burst of
	// changes becomes one write (--endpointslice-updates-batch-period, 0: no delay).
	EndpointSliceUpdatesBatchPeriod time.Duration
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options {
	return &Options{ConcurrentServiceEndpointSyncs: 5, MaxEndpointsPerSlice: 100}
}

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentServiceEndpointSyncs, "concurrent-service-endpoint-syncs", o.ConcurrentServiceEndpointSyncs, "workers of the EndpointSlice controller (1–50)")
	fs.IntVar(&o.MaxEndpointsPerSlice, "max-endpoints-per-slice", o.MaxEndpointsPerSlice, "endpoints in one EndpointSlice (1–1000)")
	fs.DurationVar(&o.EndpointSliceUpdatesBatchPeriod, "endpointslice-updates-batch-period", o.EndpointSliceUpdatesBatchPeriod, "delay before syncing a service's slices after a pod change")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConcurrentServiceEndpointSyncs < 1 || o.ConcurrentServiceEndpointSyncs > 50 {
		errs = append(errs, errors.New("--concurrent-service-endpoint-syncs must be between 1 and 50"))
	}
	if o.MaxEndpointsPerSlice < 1 || o.MaxEndpointsPerSlice > 1000 {
		errs = append(errs, errors.New("--max-endpoints-per-slice must be between 1 and 1000"))
	}
	if o.EndpointSliceUpdatesBatchPeriod < 0 {
		errs = append(errs, errors.New("--endpointslice-updates-batch-period must not be negative"))
	}
	return errs
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

	loop     *controller.Loop
	tracker  *sliceTracker
	triggers *controller.TriggerTimes
	metrics  *metrics
	recorder *events.Recorder
	logged   *onceLog

	maxEndpointsPerSlice int
	// batchPeriod delays syncs caused by pod changes, so that a burst becomes one write.
	batchPeriod time.Duration
}

// New builds the controller over ctx's informers and registers its event handlers; Run starts it.
// Invalid settings are refused here too, for callers that build it without the manager.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("endpointslice: %w", errors.Join(errs...))
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
		loop: controller.NewLoop(ctx, Name,
			controller.WithWorkers(o.ConcurrentServiceEndpointSyncs), controller.WithQueueName("endpoint_slice"),
			controller.WithRateLimiter(workqueue.NewMaxOfRateLimiter(
				workqueue.NewItemExponentialFailureRateLimiter[string](minRetryDelay, maxRetryDelay),
				workqueue.NewBucketRateLimiter[string](10, 100), // for all Services together
			)),
			// The Services' resync retries a Service whose key was dropped after too many
			// failures.
			controller.WithResync(ctx.ResyncPeriod())),
		tracker:              newSliceTracker(),
		triggers:             controller.NewTriggerTimes(),
		metrics:              m,
		logged:               newOnceLog(),
		maxEndpointsPerSlice: o.MaxEndpointsPerSlice,
		batchPeriod:          o.EndpointSliceUpdatesBatchPeriod,
	}
	if ctx.Recorder != nil {
		c.recorder = ctx.Recorder.For(eventSource)
	}
	controller.For(c.loop, serviceInf)
	// Pod, Node and slice events queue Services only for the changes that matter to them, and
	// mostly after a delay (handlers.go).
	controller.Watch(c.loop, podInf, cache.Handler[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod, _ bool) { c.podAdded(p) },
		OnUpdate: c.podUpdated,
		OnDelete: func(p *corev1.Pod, _ bool) { c.podAdded(p) },
	}, 0)
	controller.Watch(c.loop, nodeInf, cache.Handler[*corev1.Node]{
		OnAdd:    c.nodeAdded,
		OnUpdate: c.nodeUpdated,
		OnDelete: func(n *corev1.Node, _ bool) { c.queueServicesOnNode(n.Name) },
	}, 0)
	controller.Watch(c.loop, sliceInf, cache.Handler[*discoveryv1.EndpointSlice]{
		OnAdd:    func(s *discoveryv1.EndpointSlice, _ bool) { c.sliceAdded(s) },
		OnUpdate: c.sliceUpdated,
		OnDelete: func(s *discoveryv1.EndpointSlice, _ bool) { c.sliceDeleted(s) },
	}, 0)
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
func (c *Controller) Name() string { return Name }

// Run waits for the informers' caches and its handlers, then syncs Services until ctx is
// cancelled. When it returns, its goroutines have ended and its event handlers are removed.
// Run must be called once.
func (c *Controller) Run(ctx context.Context) error {
	// The loop logs its workers; the settings that shape the slices are logged here.
	slog.Info("endpointslice settings", "maxEndpointsPerSlice", c.maxEndpointsPerSlice, "batchPeriod", c.batchPeriod)
	c.loop.Run(ctx, workers.Ignore(c.sync))
	return nil
}
