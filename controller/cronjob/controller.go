// Package cronjob is the CronJob controller: it starts a Job for each time of a CronJob's
// schedule (five cron fields or a macro such as @hourly, in spec.timeZone or else the
// controller's own zone), and keeps the CronJob's status (the active Jobs, the last schedule
// and success times) and its Job history.
//
// Each sync looks only at the most recent schedule time not yet started, never at every
// missed one: a CronJob that missed several (the controller was down) gets one Job, late,
// unless that time is more than startingDeadlineSeconds ago; then it is skipped
// (MissSchedule). The Job is named <cronjob>-<scheduled time in minutes since the epoch>, so
// that a second attempt for the same time finds the first (AlreadyExists) instead of starting
// it twice. concurrencyPolicy decides what happens while an earlier Job runs: Allow starts the
// new one anyway; Forbid does not (JobAlreadyActive), and the time stays unmet, so the sync
// that sees the earlier Job finish starts it, if still within the deadline; Replace deletes
// the running Jobs first. A suspended CronJob starts nothing. Finished Jobs beyond
// successfulJobsHistoryLimit and failedJobsHistoryLimit are deleted, oldest first.
//
// There is no polling: a sync asks to run again just after the next schedule time, and Job
// and CronJob changes queue the CronJob in between. A change of the schedule or time zone
// queues it for the new schedule's next time, not at once, as Kubernetes does, so that the
// change alone does not start a Job for a time the new schedule had in the past.
//
// Where this differs from kube-controller-manager v1.36, on purpose: the skip past the
// deadline is reported (v1.36 means to, but never does: kubernetes/kubernetes#111223); the
// most recent time of a schedule with uneven gaps (30 6-16/4 * * 1-5) is found even when the
// controller was down across several of them (v1.36's estimate can overshoot it and start
// nothing); a listed Job found gone while replacing it is dropped (MissingJob) instead of
// failing the sync; and a CronJob whose Job name is taken by someone else's Job is looked at
// again at its next time rather than only on its next change.
package cronjob

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
	"github.com/kplane/kplane/internal/metricreg"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's and queue's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "cronjob"

// eventSource is the component its events name, as in Kubernetes.
const eventSource = "cronjob-controller"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "cronjob-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentCronJobSyncs: CronJobs synced at once (--concurrent-cron-job-syncs, 5).
	ConcurrentCronJobSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentCronJobSyncs: 5} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentCronJobSyncs, "concurrent-cron-job-syncs", o.ConcurrentCronJobSyncs, "workers of the CronJob controller")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	if o.ConcurrentCronJobSyncs < 1 {
		return []error{errors.New("--concurrent-cron-job-syncs must be at least 1")}
	}
	return nil
}

var cronJobKind = batchv1.SchemeGroupVersion.WithKind("CronJob")

// Controller syncs CronJobs; its loop's queue holds CronJob keys ("ns/name").
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	cronJobs *cache.Informer[*batchv1.CronJob]
	jobs     *cache.Informer[*batchv1.Job]
	loop     *controller.Loop
	// skew is Kubernetes' cronjob_controller_job_creation_skew_duration_seconds: how late
	// Jobs are created after their schedule time.
	skew prometheus.Histogram

	// now is the clock every schedule decision reads; tests replace it so as not to wait
	// for real minutes. Requeue delays are real time either way.
	now func() time.Time
	// local is the zone of schedules without spec.timeZone: the controller's own, as in
	// Kubernetes.
	local *time.Location
}

// New builds the controller on ctx's shared informers (cronjobs, jobs) and registers its
// handlers; the caller starts the informers, then calls Run.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("cronjob controller: %w", errors.Join(errs...))
	}
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("cronjob controller: the context needs a client and informers")
	}
	reg := ctx.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var errs []error
	skew := metricreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "cronjob_controller", Name: "job_creation_skew_duration_seconds",
		Help:    "Time between when a cronjob is scheduled to be run, and when the corresponding job is created",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10),
	}), &errs)
	if len(errs) > 0 {
		slog.Warn("cronjob controller: metrics not registered", "err", errors.Join(errs...))
	}
	c := &Controller{
		client:   ctx.Client,
		cronJobs: cache.For[*batchv1.CronJob](ctx.Informers, "cronjobs"),
		jobs:     cache.For[*batchv1.Job](ctx.Informers, "jobs"),
		loop:     controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentCronJobSyncs)),
		skew:     skew,
		now:      time.Now,
		local:    time.Local,
	}
	if ctx.Recorder != nil {
		c.recorder = ctx.Recorder.For(eventSource)
	}
	// Not For: a change of the schedule is queued for the new schedule's next time.
	controller.Watch(c.loop, c.cronJobs, cache.Handler[*batchv1.CronJob]{
		OnAdd:    func(cj *batchv1.CronJob, _ bool) { c.loop.Queue.Add(cache.MetaNamespaceKey(cj)) },
		OnUpdate: c.cronJobChanged,
		OnDelete: func(cj *batchv1.CronJob, _ bool) { c.loop.Queue.Add(cache.MetaNamespaceKey(cj)) },
	}, ctx.ResyncPeriod())
	// A Job of a CronJob started, finished or went away: its status and history change.
	controller.Owns(c.loop, c.jobs, cronJobKind)
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}

// cronJobChanged queues a changed CronJob: at once, unless its schedule or time zone changed,
// then at the new schedule's next time, so that the sync that happens then starts that
// time's Job rather than one for a time the new schedule had before now.
func (c *Controller) cronJobChanged(old, cj *batchv1.CronJob) {
	key := cache.MetaNamespaceKey(cj)
	if old.Spec.Schedule == cj.Spec.Schedule && sameZone(old.Spec.TimeZone, cj.Spec.TimeZone) {
		c.loop.Queue.Add(key)
		return
	}
	zone, _, err := zones(cj, c.local)
	if err != nil {
		zone = c.local // the sync reports the zone (UnknownTimeZone)
	}
	s, err := parseSchedule(cj.Spec.Schedule, zone)
	if err != nil {
		// Not queued: nothing but another change of the schedule can mend it.
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "UnParseableCronJobSchedule", "unparseable schedule for cronjob: %s", cj.Spec.Schedule)
		return
	}
	if d := requeueAfter(s, cj, c.now()); d > 0 {
		c.loop.Queue.AddAfter(key, d)
		return
	}
	c.loop.Queue.Add(key)
}

func sameZone(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
