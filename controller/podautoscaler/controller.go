// Package podautoscaler is the horizontal pod autoscaler: every sync period it sets the
// replica count of each HorizontalPodAutoscaler's target (any kind with a scale subresource)
// from its pods' resource usage, as Kubernetes v1.36's controller does.
//
// A sync reads the target's scale, lists the pods its selector selects, reads their usage from
// the resource metrics API (metrics.k8s.io, through the apiserver), computes the count each
// metric asks for (replicas.go), takes the highest, stabilizes and limits it (behavior.go),
// writes it to the target's scale, and records the outcome in the HPA's status (current and
// desired replicas, current metrics, last scale time) and conditions: AbleToScale (could the
// scale be read and written, and is a stabilization holding the count back), ScalingActive
// (could a count be computed from the metrics; not while the target has 0 replicas) and
// ScalingLimited (did minReplicas, maxReplicas or a scaling policy bound it).
//
// Resource and ContainerResource metrics are supported. Pods, Object and External metrics
// need the custom and external metrics APIs, which kplane does not serve: such a metric fails
// (FailedGetPodsMetric, FailedGetObjectMetric, FailedGetExternalMetric) and is left out of
// the decision, as Kubernetes leaves out a metric it cannot read. HPAScaleToZero (alpha, off)
// is not offered: the API refuses minReplicas 0.
//
// Where this differs from kube-controller-manager v1.36, on purpose: a new HPA, and an HPA
// whose spec changed, is synced at once rather than a sync period later, so that `kubectl get
// hpa` shows its targets without waiting; a status write that conflicts with a change of the
// HPA is dropped when the spec changed (the sync that change queued writes the status) and
// retried on the fresh object otherwise, rather than recorded as FailedUpdateStatus; the
// pods' metrics are read once per sync for all of an HPA's metrics rather than once per
// metric; and the controller's own Prometheus metrics (horizontal_pod_autoscaler_controller_*)
// are not exported.
package podautoscaler

import (
	"context"
	"errors"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/spf13/pflag"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
)

// Name is the controller's short name (kube-controller-manager's alias for it), which
// --controllers also takes; Entry.Name is v1.36's name.
const Name = "horizontalpodautoscaling"

// eventSource is the component its events name, as in Kubernetes.
const eventSource = "horizontal-pod-autoscaler"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "horizontal-pod-autoscaler-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// SyncPeriod: how often each HPA is synced (--horizontal-pod-autoscaler-sync-period, 15s).
	SyncPeriod time.Duration
	// Tolerance: usage ratios within 1±Tolerance leave the count as it is
	// (--horizontal-pod-autoscaler-tolerance, 0.1); spec.behavior may set its own per direction.
	Tolerance float64
	// DownscaleStabilization: a scale down takes the highest recommendation of this long
	// (--horizontal-pod-autoscaler-downscale-stabilization, 5m), unless spec.behavior says.
	DownscaleStabilization time.Duration
	// InitialReadinessDelay: a pod's readiness changes within this long after its start count
	// as its initial readiness (--horizontal-pod-autoscaler-initial-readiness-delay, 30s).
	InitialReadinessDelay time.Duration
	// CPUInitializationPeriod: after a pod's start, its CPU samples are left out while it is
	// not ready or was not yet ready when they began (--horizontal-pod-autoscaler-cpu-
	// initialization-period, 5m).
	CPUInitializationPeriod time.Duration
	// ConcurrentSyncs: HPAs synced at once (--concurrent-horizontal-pod-autoscaler-syncs, 5).
	ConcurrentSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options {
	return &Options{SyncPeriod: 15 * time.Second, Tolerance: 0.1, DownscaleStabilization: 5 * time.Minute,
		InitialReadinessDelay: 30 * time.Second, CPUInitializationPeriod: 5 * time.Minute, ConcurrentSyncs: 5}
}

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.SyncPeriod, "horizontal-pod-autoscaler-sync-period", o.SyncPeriod, "how often the horizontal pod autoscaler syncs each HorizontalPodAutoscaler")
	fs.Float64Var(&o.Tolerance, "horizontal-pod-autoscaler-tolerance", o.Tolerance, "the smallest change of the usage-to-target ratio (from 1.0) the horizontal pod autoscaler acts on")
	fs.DurationVar(&o.DownscaleStabilization, "horizontal-pod-autoscaler-downscale-stabilization", o.DownscaleStabilization, "how far back the horizontal pod autoscaler looks for a higher recommendation before it scales down")
	fs.DurationVar(&o.InitialReadinessDelay, "horizontal-pod-autoscaler-initial-readiness-delay", o.InitialReadinessDelay, "how long after a pod's start its readiness changes count as its initial readiness")
	fs.DurationVar(&o.CPUInitializationPeriod, "horizontal-pod-autoscaler-cpu-initialization-period", o.CPUInitializationPeriod, "how long after a pod's start its CPU samples may be left out")
	fs.IntVar(&o.ConcurrentSyncs, "concurrent-horizontal-pod-autoscaler-syncs", o.ConcurrentSyncs, "HorizontalPodAutoscalers synced at once")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.SyncPeriod <= 0 {
		errs = append(errs, errors.New("--horizontal-pod-autoscaler-sync-period must be positive"))
	}
	if o.Tolerance < 0 {
		errs = append(errs, errors.New("--horizontal-pod-autoscaler-tolerance must not be negative"))
	}
	if o.DownscaleStabilization < 0 {
		errs = append(errs, errors.New("--horizontal-pod-autoscaler-downscale-stabilization must not be negative"))
	}
	if o.InitialReadinessDelay < 0 {
		errs = append(errs, errors.New("--horizontal-pod-autoscaler-initial-readiness-delay must not be negative"))
	}
	if o.CPUInitializationPeriod < 0 {
		errs = append(errs, errors.New("--horizontal-pod-autoscaler-cpu-initialization-period must not be negative"))
	}
	if o.ConcurrentSyncs < 1 {
		errs = append(errs, errors.New("--concurrent-horizontal-pod-autoscaler-syncs must be at least 1"))
	}
	return errs
}

// Controller syncs HPAs; its loop's queue holds HPA keys ("ns/name").
type Controller struct {
	client    *client.Client
	recorder  *events.Recorder
	hpas      *cache.Informer[*autoscalingv2.HorizontalPodAutoscaler]
	pods      *cache.Informer[*corev1.Pod]
	loop      *controller.Loop
	scales    *scaleClient
	history   *history
	selectors *selectorIndex
	o         Options

	// metrics is where usage comes from; tests replace it (the node agents that measure
	// usage do not run there).
	metrics MetricsSource
	// now is the clock of every decision (stabilization windows, policy periods, pod start-up
	// periods, condition and scale times); tests replace it so as not to wait for minutes.
	// The sync period is real time either way.
	now func() time.Time
}

// New builds the controller on ctx's shared informers (horizontalpodautoscalers, pods).
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("horizontal pod autoscaler: the context needs a client and informers")
	}
	c := &Controller{
		client: ctx.Client,
		hpas:   cache.For[*autoscalingv2.HorizontalPodAutoscaler](ctx.Informers, "horizontalpodautoscalers"),
		pods:   cache.For[*corev1.Pod](ctx.Informers, "pods"),
		// Kubernetes' queue name; every key is looked at again a sync period after its last
		// sync, whether that failed or not, and never dropped (fixedInterval).
		loop: controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentSyncs), controller.WithQueueName("horizontalpodautoscaler"),
			controller.WithRateLimiter(fixedInterval(o.SyncPeriod))),
		history:   newHistory(o.DownscaleStabilization),
		selectors: &selectorIndex{byKey: map[string]selectorOf{}},
		o:         *o,
		metrics:   resourceMetricsAPI{client: ctx.Client},
		now:       time.Now,
	}
	// Rediscovery is paced in real time: it bounds the load on discovery, not a decision.
	c.scales = &scaleClient{client: ctx.Client, now: time.Now}
	if ctx.Recorder != nil {
		c.recorder = ctx.Recorder.For(eventSource)
	}
	add := func(h *autoscalingv2.HorizontalPodAutoscaler) { c.loop.Queue.Add(cache.MetaNamespaceKey(h)) }
	controller.Watch(c.loop, c.hpas, cache.Handler[*autoscalingv2.HorizontalPodAutoscaler]{
		OnAdd: func(h *autoscalingv2.HorizontalPodAutoscaler, _ bool) { add(h) },
		OnUpdate: func(old, h *autoscalingv2.HorizontalPodAutoscaler) {
			// The controller's own status writes come back as updates: they must not sync
			// the HPA again (the next sync is a period after this one). A spec change is
			// acted on at once, as is the informer's periodic resync (nothing changed: a
			// key somehow lost from the queue is found again).
			if old.Generation != h.Generation || old.ResourceVersion == h.ResourceVersion {
				add(h)
			}
		},
		// Deleted: the sync finds it gone and forgets its history.
		OnDelete: func(h *autoscalingv2.HorizontalPodAutoscaler, _ bool) { add(h) },
	}, ctx.ResyncPeriod())
	c.loop.Reads(c.pods.HasSynced)
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}

// fixedInterval is the queue's retry pacing: a failed sync is retried a sync period later,
// like a successful one is repeated, and a key is never given up on (NumRequeues stays 0): an
// HPA whose target is missing is looked at every period until it appears.
type fixedInterval time.Duration

func (f fixedInterval) When(string) time.Duration { return time.Duration(f) }
func (f fixedInterval) Forget(string)             {}
func (f fixedInterval) NumRequeues(string) int    { return 0 }
