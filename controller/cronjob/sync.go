package cronjob

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/reconcile"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// sync brings one CronJob's status and history up to date, starts the Job its schedule is
// due for, and asks to run again at the next schedule time.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil // not a key of ours: retrying will not mend it
	}
	cached, err := c.cronJobs.Lister().Namespace(ns).Get(name)
	if client.IsNotFound(err) {
		return reconcile.Result{}, nil // deleted: the garbage collector takes its Jobs
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	jobs := c.jobsOf(cached)
	cj := cached.DeepCopy()
	if untracked(cj, jobs) {
		// A running Job of ours that status.active does not list: most often the cache has
		// not yet seen the status write that listed it. The server's copy tells that apart
		// from a Job someone else made or a write that was lost.
		fresh, err := c.cronJobAPI(ns).Get(ctx, name)
		if client.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		cj = fresh
	}
	before := cj.Status.DeepCopy()

	c.deleteOldJobs(ctx, cj, jobs)
	c.trackJobs(cj, jobs)
	if err := c.dropMissingJobs(ctx, cj, jobs); err != nil {
		return reconcile.Result{}, err
	}
	p := decide(cj, c.now(), c.local)
	for _, e := range p.events {
		c.recorder.Eventf(cj, e.typ, e.reason, "%s", e.message)
	}
	var startErr error
	if p.start != nil {
		startErr = c.start(ctx, cj, p)
	}
	if !apiequality.Semantic.DeepEqual(before, &cj.Status) {
		if _, err := c.cronJobAPI(ns).UpdateStatus(ctx, cj); err != nil {
			// A Job started above is found again by name on the retry (AlreadyExists).
			return reconcile.Result{}, err
		}
	}
	if startErr != nil {
		return reconcile.Result{}, startErr
	}
	if p.requeue != nil && *p.requeue > 0 {
		return reconcile.After(*p.requeue), nil
	}
	return reconcile.Result{}, nil
}

func (c *Controller) cronJobAPI(ns string) *client.Typed[*batchv1.CronJob] {
	return client.Resource[*batchv1.CronJob](c.client, "cronjobs").Namespace(ns)
}

func (c *Controller) jobAPI(ns string) *client.Typed[*batchv1.Job] {
	return client.Resource[*batchv1.Job](c.client, "jobs").Namespace(ns)
}

// jobsOf returns the Jobs in cj's namespace whose controller is a CronJob of cj's name,
// whatever their labels: a Job keeps belonging to its CronJob when the template's labels
// change. The UID is not compared, as in Kubernetes: the Jobs of a deleted CronJob go with
// it (garbage collection), and until then a new namesake sees them.
func (c *Controller) jobsOf(cj *batchv1.CronJob) []*batchv1.Job {
	var out []*batchv1.Job
	for _, j := range c.jobs.Lister().Namespace(cj.Namespace).List(labels.Everything()) {
		ref := metav1.GetControllerOfNoCopy(j)
		if ref != nil && ref.Kind == cronJobKind.Kind && ref.Name == cj.Name && strings.HasPrefix(ref.APIVersion, cronJobKind.Group+"/") {
			out = append(out, j)
		}
	}
	return out
}

// finished reports whether a Job has finished, and how: JobComplete or JobFailed.
func finished(j *batchv1.Job) (bool, batchv1.JobConditionType) {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true, c.Type
		}
	}
	return false, ""
}

func isActive(cj *batchv1.CronJob, uid types.UID) bool {
	return slices.ContainsFunc(cj.Status.Active, func(r corev1.ObjectReference) bool { return r.UID == uid })
}

func removeActive(cj *batchv1.CronJob, uid types.UID) {
	cj.Status.Active = slices.DeleteFunc(cj.Status.Active, func(r corev1.ObjectReference) bool { return r.UID == uid })
}

// untracked reports whether a running Job of cj is missing from its status.active.
func untracked(cj *batchv1.CronJob, jobs []*batchv1.Job) bool {
	return slices.ContainsFunc(jobs, func(j *batchv1.Job) bool {
		done, _ := finished(j)
		return !done && !isActive(cj, j.UID)
	})
}

// jobRef is how status.active lists a Job.
func jobRef(j *batchv1.Job) corev1.ObjectReference {
	return corev1.ObjectReference{
		Kind: "Job", APIVersion: batchv1.SchemeGroupVersion.String(),
		Namespace: j.Namespace, Name: j.Name, UID: j.UID, ResourceVersion: j.ResourceVersion,
	}
}

// trackJobs updates status.active and status.lastSuccessfulTime from the Jobs: finished Jobs
// leave the active list (SawCompletedJob), and a running Job the list does not name is
// reported (UnexpectedJob) but not adopted: it may be someone else's.
func (c *Controller) trackJobs(cj *batchv1.CronJob, jobs []*batchv1.Job) {
	for _, j := range jobs {
		done, how := finished(j)
		active := isActive(cj, j.UID)
		switch {
		case !done && !active:
			c.recorder.Eventf(cj, corev1.EventTypeWarning, "UnexpectedJob", "Saw a job that the controller did not create or forgot: %s", j.Name)
		case done && active:
			removeActive(cj, j.UID)
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "SawCompletedJob", "Saw completed job: %s, condition: %v", j.Name, how)
		}
		// Any succeeded Job counts, listed or not.
		if done && how == batchv1.JobComplete && j.Status.CompletionTime != nil {
			if last := cj.Status.LastSuccessfulTime; last == nil || j.Status.CompletionTime.After(last.Time) {
				cj.Status.LastSuccessfulTime = j.Status.CompletionTime.DeepCopy()
			}
		}
	}
}

// dropMissingJobs removes from status.active the Jobs that no longer exist, asking the
// server about those the cache does not have (it may lag a creation), so that a vanished Job
// does not hold a Forbid CronJob forever.
func (c *Controller) dropMissingJobs(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) error {
	known := make(map[types.UID]bool, len(jobs))
	for _, j := range jobs {
		known[j.UID] = true
	}
	for _, ref := range slices.Clone(cj.Status.Active) {
		if known[ref.UID] {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = cj.Namespace
		}
		j, err := c.jobAPI(ns).Get(ctx, ref.Name)
		switch {
		case client.IsNotFound(err) || (err == nil && ref.UID != "" && j.UID != ref.UID):
			c.recorder.Eventf(cj, corev1.EventTypeNormal, "MissingJob", "Active job went missing: %v", ref.Name)
			removeActive(cj, ref.UID)
		case err != nil:
			return err
		}
	}
	return nil
}

// deleteOldJobs deletes the oldest finished Jobs beyond the history limits, succeeded and
// failed ones counted apart.
func (c *Controller) deleteOldJobs(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) {
	var succeeded, failed []*batchv1.Job
	for _, j := range jobs {
		switch done, how := finished(j); {
		case done && how == batchv1.JobComplete:
			succeeded = append(succeeded, j)
		case done && how == batchv1.JobFailed:
			failed = append(failed, j)
		}
	}
	if l := cj.Spec.SuccessfulJobsHistoryLimit; l != nil {
		for _, j := range beyondLimit(succeeded, int(*l)) {
			c.deleteJob(ctx, cj, j)
		}
	}
	if l := cj.Spec.FailedJobsHistoryLimit; l != nil {
		for _, j := range beyondLimit(failed, int(*l)) {
			c.deleteJob(ctx, cj, j)
		}
	}
}

// beyondLimit returns the oldest of jobs beyond the newest limit: by start time, Jobs never
// started counting as the newest, then by name.
func beyondLimit(jobs []*batchv1.Job, limit int) []*batchv1.Job {
	excess := len(jobs) - limit
	if excess <= 0 {
		return nil
	}
	jobs = slices.Clone(jobs)
	slices.SortFunc(jobs, func(a, b *batchv1.Job) int {
		as, bs := a.Status.StartTime, b.Status.StartTime
		switch {
		case as == nil && bs != nil:
			return 1
		case as != nil && bs == nil:
			return -1
		case as != nil && !as.Equal(bs):
			return as.Time.Compare(bs.Time)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return jobs[:excess]
}

// deleteJob deletes one of cj's Jobs (its pods go after it: background propagation) and
// drops it from status.active; it reports whether the Job is gone.
func (c *Controller) deleteJob(ctx context.Context, cj *batchv1.CronJob, j *batchv1.Job) bool {
	uid := j.UID
	err := c.jobAPI(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{
		PropagationPolicy: new(metav1.DeletePropagationBackground),
		Preconditions:     &metav1.Preconditions{UID: &uid},
	})
	switch {
	case client.IsNotFound(err):
		removeActive(cj, uid) // gone already: nothing to report
		return true
	case err != nil:
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "FailedDelete", "Deleted job: %v", err)
		slog.Warn("cronjob: could not delete job", "cronjob", cj.Namespace+"/"+cj.Name, "job", j.Name, "err", err)
		return false
	}
	removeActive(cj, uid)
	c.recorder.Eventf(cj, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted job %v", j.Name)
	return true
}

// start carries out p.start: for Replace it deletes the active Jobs, then creates the Job
// for the scheduled time and lists it in cj's status.
func (c *Controller) start(ctx context.Context, cj *batchv1.CronJob, p plan) error {
	jobs := c.jobAPI(cj.Namespace)
	if p.replace {
		for _, ref := range slices.Clone(cj.Status.Active) {
			j, err := jobs.Get(ctx, ref.Name)
			if client.IsNotFound(err) || (err == nil && ref.UID != "" && j.UID != ref.UID) {
				// Gone (or a namesake took its name): nothing to replace.
				c.recorder.Eventf(cj, corev1.EventTypeNormal, "MissingJob", "Active job went missing: %v", ref.Name)
				removeActive(cj, ref.UID)
				continue
			}
			if err != nil {
				c.recorder.Eventf(cj, corev1.EventTypeWarning, "FailedGet", "Get job: %v", err)
				return err
			}
			if !c.deleteJob(ctx, cj, j) {
				return fmt.Errorf("could not replace job %s/%s", j.Namespace, j.Name)
			}
		}
	}
	want := jobFor(cj, *p.start, p.zone)
	job, err := jobs.Create(ctx, want)
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return err // every creation fails until the namespace is gone; no event
	case client.IsAlreadyExists(err):
		// Either an earlier sync created it and its status write was lost (adopt it into
		// the active list), or someone else made a Job of that name (leave it be).
		existing, err := jobs.Get(ctx, want.Name)
		if err != nil {
			return err
		}
		if !metav1.IsControlledBy(existing, cj) || isActive(cj, existing.UID) {
			return nil
		}
		slog.Info("cronjob: job already exists, listing it as active", "cronjob", cj.Namespace+"/"+cj.Name, "job", existing.Name)
		job = existing
	case err != nil:
		c.recorder.Eventf(cj, corev1.EventTypeWarning, "FailedCreate", "Error creating job: %v", err)
		return err
	default:
		c.skew.Observe(job.CreationTimestamp.Sub(*p.start).Seconds())
		c.recorder.Eventf(cj, corev1.EventTypeNormal, "SuccessfulCreate", "Created job %v", job.Name)
	}
	cj.Status.Active = append(cj.Status.Active, jobRef(job))
	cj.Status.LastScheduleTime = &metav1.Time{Time: *p.start}
	return nil
}
