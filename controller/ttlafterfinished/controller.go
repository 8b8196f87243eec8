// Package ttlafterfinished is the TTL-after-finished controller: it deletes a finished Job
// (its Complete or Failed condition True) once spec.ttlSecondsAfterFinished have passed since
// it finished, so that finished Jobs do not pile up. The deletion is in the foreground (the
// Job stays, marked, until the garbage collector has deleted its pods) and carries the Job's
// UID as a precondition, so that a new Job of the same name is never taken for the old one.
//
// The TTL may change while a Job waits: before deleting, the controller reads the Job again
// from the API server, not from its cache, and deletes only if that copy is due too. A Job
// not yet due is looked at again when it is (no polling).
package ttlafterfinished

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/metricreg"
	"github.com/kplane/kplane/reconcile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "ttl-after-finished"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "ttl-after-finished-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentTTLSyncs: Jobs looked at at once (--concurrent-ttl-after-finished-syncs, 5).
	ConcurrentTTLSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentTTLSyncs: 5} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentTTLSyncs, "concurrent-ttl-after-finished-syncs", o.ConcurrentTTLSyncs, "workers of the TTL-after-finished controller")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	if o.ConcurrentTTLSyncs < 1 {
		return []error{errors.New("--concurrent-ttl-after-finished-syncs must be at least 1")}
	}
	return nil
}

// queueName is the name Kubernetes gives this controller's queue in the workqueue metrics.
const queueName = "ttl_jobs_to_delete"

// Controller deletes expired finished Jobs; its loop's queue holds Job keys ("ns/name").
type Controller struct {
	client *client.Client
	jobs   *cache.Informer[*batchv1.Job]
	loop   *controller.Loop
	// deletion is Kubernetes' ttl_after_finished_controller_job_deletion_duration_seconds:
	// how long after it was due each Job was deleted.
	deletion prometheus.Histogram
	// now is the clock expiry is judged by (tests replace it).
	now func() time.Time
}

// New builds the controller on ctx's shared Job informer and registers its handler; the
// caller starts the informers, then calls Run.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("ttl-after-finished controller: %w", errors.Join(errs...))
	}
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("ttl-after-finished controller: the context needs a client and informers")
	}
	reg := ctx.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var errs []error
	deletion := metricreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "ttl_after_finished_controller", Name: "job_deletion_duration_seconds",
		Help:    "The time it took to delete the job since it became eligible for deletion",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 14),
	}), &errs)
	if len(errs) > 0 {
		slog.Warn("ttl-after-finished controller: metrics not registered", "err", errors.Join(errs...))
	}
	c := &Controller{
		client:   ctx.Client,
		jobs:     cache.For[*batchv1.Job](ctx.Informers, "jobs"),
		loop:     controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentTTLSyncs), controller.WithQueueName(queueName)),
		deletion: deletion,
		now:      time.Now,
	}
	// Only Jobs that may be due are queued; a deleted Job needs nothing more.
	queue := func(j *batchv1.Job) {
		if _, ok, _ := expiresAt(j); ok {
			c.loop.Queue.Add(cache.MetaNamespaceKey(j))
		}
	}
	controller.Watch(c.loop, c.jobs, cache.Handler[*batchv1.Job]{
		OnAdd:    func(j *batchv1.Job, _ bool) { queue(j) },
		OnUpdate: func(_, j *batchv1.Job) { queue(j) },
	}, ctx.ResyncPeriod())
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the cache and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}

// sync deletes the Job if it is due, by the cache and then by the server; a Job not yet due is
// looked at again when it will be.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil // not a key of ours: retrying will not mend it
	}
	cached, err := c.jobs.Lister().Namespace(ns).Get(name)
	if client.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if res, due, err := c.due(cached); !due || err != nil {
		return res, err
	}
	// The cache says it is due, but the TTL may have changed since (or the Job been replaced):
	// the server's copy decides.
	jobs := client.Resource[*batchv1.Job](c.client, "jobs").Namespace(ns)
	fresh, err := jobs.Get(ctx, name)
	if client.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	res, due, err := c.due(fresh)
	if !due || err != nil {
		return res, err
	}
	uid := fresh.UID
	err = jobs.Delete(ctx, name, metav1.DeleteOptions{
		PropagationPolicy: new(metav1.DeletePropagationForeground),
		Preconditions:     &metav1.Preconditions{UID: &uid},
	})
	if client.IsNotFound(err) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		// A failed UID precondition means another Job took the name: the retry judges that one.
		return reconcile.Result{}, err
	}
	at, _, _ := expiresAt(fresh)
	c.deletion.Observe(c.now().Sub(at).Seconds())
	return reconcile.Result{}, nil
}

// due reports whether j is to be deleted now; if it is not yet, the Result waits until it is.
func (c *Controller) due(j *batchv1.Job) (reconcile.Result, bool, error) {
	at, ok, err := expiresAt(j)
	if !ok || err != nil {
		return reconcile.Result{}, false, err
	}
	now := c.now()
	if finished, _ := finishTime(j); finished.After(now) {
		slog.Warn("ttl-after-finished: job finished in the future, clocks may be skewed; its deletion waits", "job", j.Namespace+"/"+j.Name, "finished", finished)
	}
	if left := at.Sub(now); left > 0 {
		return reconcile.After(left), false, nil
	}
	return reconcile.Result{}, true, nil
}

// expiresAt returns when j is to be deleted; ok is false for a Job this controller leaves
// alone: without a TTL, not finished, or being deleted already. An error means the Job is
// finished but does not say when.
func expiresAt(j *batchv1.Job) (at time.Time, ok bool, err error) {
	ttl := j.Spec.TTLSecondsAfterFinished
	if ttl == nil || j.DeletionTimestamp != nil {
		return time.Time{}, false, nil
	}
	finished, done := finishTime(j)
	if !done {
		return time.Time{}, false, nil
	}
	if finished.IsZero() {
		return time.Time{}, true, fmt.Errorf("job %s/%s finished, but neither its condition nor its completion time says when", j.Namespace, j.Name)
	}
	return finished.Add(time.Duration(*ttl) * time.Second), true, nil
}

// finishTime returns when j finished: the lastTransitionTime of its True Complete or Failed
// condition, or, if a status writer left that out, status.completionTime; done is false while
// it has not finished.
func finishTime(j *batchv1.Job) (at time.Time, done bool) {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			if !c.LastTransitionTime.IsZero() {
				return c.LastTransitionTime.Time, true
			}
			if t := j.Status.CompletionTime; t != nil {
				return t.Time, true
			}
			return time.Time{}, true
		}
	}
	return time.Time{}, false
}
