// Package job is the Job controller: it runs each Job's pods to completion. It creates pods
// from the template up to parallelism (no more than the completions left; for an Indexed Job,
// one per pending index, with the index in an annotation, a label, the hostname and
// JOB_COMPLETION_INDEX), waits after failures (10 s doubling to 6 min), deletes pods while the
// Job is suspended, and ends the Job: Complete when enough pods succeeded (or its
// successPolicy is met), Failed past backoffLimit, activeDeadlineSeconds, the per-index limits,
// or a FailJob rule of its podFailurePolicy. The interim SuccessCriteriaMet or FailureTarget
// condition comes first; the terminal one once every pod has stopped.
//
// Counting is finalizer-based, as in Kubernetes: every pod carries
// batch.kubernetes.io/job-tracking until its end is counted. A sync writes the UIDs of newly
// finished pods into status.uncountedTerminatedPods, then removes their finalizers, then moves
// them into status.succeeded/failed: no pod is counted twice or lost, even if the controller
// stops between the steps or the pod is deleted meanwhile.
package job

import (
	"context"
	"errors"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/workqueue"
	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "job"

// Kind is the kind of the Jobs' pods' owner references.
var Kind = batchv1.SchemeGroupVersion.WithKind("Job")

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "job-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentSyncs: Jobs synced at once (--concurrent-job-syncs, 5).
	ConcurrentSyncs int
	// BatchPeriod: a pod change syncs its Job this long after, so that the changes of many
	// pods finishing together become one status write (1s, as in Kubernetes; no flag).
	BatchPeriod time.Duration
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentSyncs: 5, BatchPeriod: time.Second} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentSyncs, "concurrent-job-syncs", o.ConcurrentSyncs, "workers of the Job controller")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConcurrentSyncs < 1 {
		errs = append(errs, errors.New("--concurrent-job-syncs must be at least 1"))
	}
	if o.BatchPeriod < 0 {
		errs = append(errs, errors.New("the Job controller's batch period must not be negative"))
	}
	return errs
}

// Failed syncs are retried after 1 s doubling to a minute (Kubernetes' Job API backoff).
const (
	retryBase = time.Second
	retryMax  = time.Minute
)

// Controller syncs Jobs: the queue holds Job keys ("ns/name").
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	jobs     *cache.Informer[*batchv1.Job]
	pods     *cache.Informer[*corev1.Pod]
	loop     *controller.Loop
	exp      *podcontrol.Expectations
	batch    time.Duration
	backoff  backoff
	now      func() time.Time
}

// New builds the controller on ctx's shared informers.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("job controller: the context needs a client and informers")
	}
	c := &Controller{
		client:   ctx.Client,
		recorder: ctx.Recorder.For("job-controller"),
		jobs:     cache.For[*batchv1.Job](ctx.Informers, "jobs"),
		pods:     cache.For[*corev1.Pod](ctx.Informers, "pods"),
		loop: controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentSyncs),
			controller.WithRateLimiter(workqueue.NewItemExponentialFailureRateLimiter[string](retryBase, retryMax))),
		exp:     podcontrol.NewExpectations(nil),
		batch:   o.BatchPeriod,
		backoff: defaultBackoff,
		now:     time.Now,
	}
	controller.Watch(c.loop, c.jobs, cache.Handler[*batchv1.Job]{
		OnAdd: func(j *batchv1.Job, _ bool) { c.loop.Queue.Add(cache.MetaNamespaceKey(j)) },
		OnUpdate: func(old, j *batchv1.Job) {
			// A status write of our own comes back as an update: batch it with the pod
			// changes it followed; a spec change (parallelism, suspend) acts at once.
			if old.Generation == j.Generation && old.DeletionTimestamp.Equal(j.DeletionTimestamp) {
				c.loop.Queue.AddAfter(cache.MetaNamespaceKey(j), c.batch)
				return
			}
			c.loop.Queue.Add(cache.MetaNamespaceKey(j))
		},
		OnDelete: func(j *batchv1.Job, _ bool) {
			c.exp.Forget(cache.MetaNamespaceKey(j))
			c.loop.Queue.Add(cache.MetaNamespaceKey(j))
		},
	}, ctx.ResyncPeriod())
	podcontrol.WatchOwned(c.loop, c.pods, Kind, c.exp, c.batch)
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}
