package cronjob

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The schedule arithmetic and the decision of what one sync does, as pure functions of a
// CronJob and the time: the sync (sync.go) reads and writes the API around them.

// requeueDelta is added to the wait for the next schedule time, so that a clock a little
// behind the apiserver's (or a timer firing a moment early) still wakes after it, not just
// before and then a whole period later.
const requeueDelta = 100 * time.Millisecond

// tooManyMissed: more missed schedule times than this since the last Job is reported
// (TooManyMissedTimes): the cause is more likely a clock or a controller down for long than
// a schedule meant to catch up.
const tooManyMissed = 100

// missed is how many schedule times passed unmet, as far as the events care.
type missed int

const (
	noneMissed missed = iota
	fewMissed
	manyMissed
)

func (m missed) String() string {
	switch m {
	case noneMissed:
		return "none"
	case fewMissed:
		return "few"
	case manyMissed:
		return "many"
	}
	return fmt.Sprintf("missed(%d)", int(m))
}

// parseSchedule reads a schedule (five fields, or a macro such as @hourly) in zone. A
// schedule carrying its own TZ= or CRON_TZ= prefix keeps that zone. robfig/cron panics on
// some malformed input (a bad TZ= prefix); that is an error here, not a crashed worker.
func parseSchedule(spec string, zone *time.Location) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("parsing %q: %v", spec, r)
		}
	}()
	s, err = cron.ParseStandard(spec)
	if err != nil {
		return nil, err
	}
	if ss, ok := s.(*cron.SpecSchedule); ok && ss.Location == time.Local && zone != nil {
		return inZone{ss, zone}, nil
	}
	return s, nil
}

// inZone is a schedule parsed without a zone, run in loc. robfig/cron runs such a schedule
// (its Location is time.Local) in the zone of the time Next is given, which would make the
// result depend on where a time came from (decoded from the apiserver, or the clock).
type inZone struct {
	s   cron.Schedule
	loc *time.Location
}

func (z inZone) Next(t time.Time) time.Time { return z.s.Next(t.In(z.loc)) }

// earliest is the time a CronJob's schedule counts from: its last schedule time, else its
// creation; with withDeadline, no earlier than startingDeadlineSeconds before now, since no
// Job is started for anything older.
func earliest(cj *batchv1.CronJob, now time.Time, withDeadline bool) time.Time {
	t := cj.CreationTimestamp.Time
	if cj.Status.LastScheduleTime != nil {
		t = cj.Status.LastScheduleTime.Time
	}
	if d := cj.Spec.StartingDeadlineSeconds; withDeadline && d != nil {
		if limit := now.Add(-time.Duration(*d) * time.Second); limit.After(t) {
			t = limit
		}
	}
	return t
}

// mostRecent returns the latest time of s in (from, now], or nil if there is none, and how
// many times it missed. It does not walk every time since from: a controller that was down
// for months, or a clock off by years, would make that unbounded.
//
// The count is Kubernetes' estimate: the first gap of the schedule after from, fitted into
// the time since; one unmet time counts as none missed. An error means the schedule never
// fires or fires twice within a second (such as February 31st: it parses, but Next finds
// nothing).
func mostRecent(s cron.Schedule, from, now time.Time) (*time.Time, missed, error) {
	t1 := s.Next(from)
	if t1.IsZero() {
		return nil, noneMissed, fmt.Errorf("the schedule has no time within five years of %s", from.UTC().Format(time.RFC3339))
	}
	if now.Before(t1) {
		return nil, noneMissed, nil
	}
	t2 := s.Next(t1)
	if now.Before(t2) {
		return &t1, noneMissed, nil
	}
	if t2.IsZero() {
		return nil, noneMissed, fmt.Errorf("the schedule has no time within five years of %s", t1.UTC().Format(time.RFC3339))
	}
	gap := int64(t2.Sub(t1).Round(time.Second) / time.Second)
	if gap < 1 {
		return nil, noneMissed, fmt.Errorf("the schedule's times are less than a second apart")
	}
	count := int64(now.Sub(t1)/time.Second)/gap + 1
	kind := fewMissed
	if count > tooManyMissed {
		kind = manyMissed
	}
	// Start one gap before the estimated last time and walk forward. For a schedule whose
	// gaps differ (30 6-16/4 * * 1-5) the estimate can overshoot the last time; then start
	// further back, doubling, down to t1, which is known to be in range.
	back := int64(2)
	for {
		start := t1.Add(time.Duration(count-back) * time.Duration(gap) * time.Second)
		if !start.After(t1) {
			start = from
		}
		var last time.Time
		for t := s.Next(start); !t.IsZero() && !t.After(now); t = s.Next(t) {
			last = t
		}
		if !last.IsZero() {
			return &last, kind, nil
		}
		if !start.After(from) {
			return nil, kind, nil // cannot happen: t1 is in range
		}
		back *= 2
	}
}

// requeueAfter is how long to wait before looking at the CronJob again: until its next
// schedule time after the most recent one (met or not), plus requeueDelta. A schedule that
// never fires again gives a negative wait.
func requeueAfter(s cron.Schedule, cj *batchv1.CronJob, now time.Time) time.Duration {
	from := earliest(cj, now, false)
	recent, kind, err := mostRecent(s, from, now)
	switch {
	case err != nil:
		from = now
	case recent != nil:
		from = *recent
	case kind != noneMissed:
		from = now
	}
	next := s.Next(from)
	if next.IsZero() {
		return -1
	}
	return next.Add(requeueDelta).Sub(now)
}

// jobName is the name of the Job for one schedule time: the CronJob's name and the time in
// minutes since the epoch, the same for every attempt, so that the name is the lock against
// starting the same time twice.
func jobName(cj *batchv1.CronJob, scheduled time.Time) string {
	return fmt.Sprintf("%s-%d", cj.Name, scheduled.Unix()/60)
}

// event is one Event a sync records about the CronJob.
type event struct {
	typ, reason, message string
}

func warning(reason, format string, args ...any) event {
	return event{corev1.EventTypeWarning, reason, fmt.Sprintf(format, args...)}
}

func normal(reason, format string, args ...any) event {
	return event{corev1.EventTypeNormal, reason, fmt.Sprintf(format, args...)}
}

// plan is what one sync does about the schedule, once status.active is up to date.
type plan struct {
	events []event
	// start is the schedule time to start a Job for; nil: none.
	start *time.Time
	// replace: delete the active Jobs before starting (concurrencyPolicy Replace).
	replace bool
	// requeue, when set, is when to look again without a change; nil: only on a change (the
	// CronJob is suspended, being deleted or its schedule or zone is unusable, none of which
	// time mends).
	requeue *time.Duration
	// zone is where the scheduled-timestamp annotation of the Job is written: the CronJob's
	// timeZone, UTC without one.
	zone *time.Location
}

// zones returns the zone cj's schedule runs in (its timeZone, else local) and the zone its
// Jobs' scheduled-timestamp annotation is written in (its timeZone, else UTC).
func zones(cj *batchv1.CronJob, local *time.Location) (zone, stamp *time.Location, err error) {
	tz := cj.Spec.TimeZone
	if tz == nil {
		return local, time.UTC, nil
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		return nil, nil, err
	}
	return loc, loc, nil
}

// decide works out what a sync at now does about cj's schedule (cj's status.active already
// pruned of finished and missing Jobs). local is the zone of schedules without a timeZone.
func decide(cj *batchv1.CronJob, now time.Time, local *time.Location) plan {
	var p plan
	if cj.DeletionTimestamp != nil {
		return p
	}
	add := func(e event) { p.events = append(p.events, e) }
	// The zone is checked before suspend, as Kubernetes does, so a suspended CronJob is told too.
	zone, stamp, err := zones(cj, local)
	if err != nil {
		add(warning("UnknownTimeZone", "invalid timeZone: %q: %s", *cj.Spec.TimeZone, err))
		return p
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		return p
	}
	if strings.Contains(cj.Spec.Schedule, "TZ") {
		// Validation refuses TZ= in new schedules; old ones stored with it still run, in
		// their own zone.
		add(warning("UnsupportedSchedule", "CRON_TZ or TZ used in schedule %q is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details", cj.Spec.Schedule))
	}
	s, err := parseSchedule(cj.Spec.Schedule, zone)
	if err != nil {
		add(warning("UnparseableSchedule", "unparseable schedule: %q : %s", cj.Spec.Schedule, err))
		return p
	}
	p.zone = stamp
	scheduled, kind, err := mostRecent(s, earliest(cj, now, true), now)
	if err != nil {
		add(warning("InvalidSchedule", "invalid schedule: %s : %s", cj.Spec.Schedule, err))
		return p
	}
	wait := requeueAfter(s, cj, now)
	p.requeue = &wait
	if scheduled == nil {
		if cj.Spec.StartingDeadlineSeconds != nil {
			// Nothing unmet within the deadline; was something unmet before it? Kubernetes
			// means to say so (MissSchedule) but its window hides those times, so it never
			// does (kubernetes/kubernetes#111223); here the skip is reported.
			if late, _, err := mostRecent(s, earliest(cj, now, false), now); err == nil && late != nil {
				add(warning("MissSchedule", "Missed scheduled time to start a job: %s", late.UTC().Format(time.RFC1123Z)))
			}
		}
		return p
	}
	if kind == manyMissed {
		add(warning("TooManyMissedTimes", "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"))
	}
	name := jobName(cj, *scheduled)
	for _, ref := range cj.Status.Active {
		if ref.Name == name && ref.Namespace == cj.Namespace {
			return p // started already; the status update may not have reached the cache
		}
	}
	if last := cj.Status.LastScheduleTime; last != nil && last.Time.Equal(*scheduled) {
		return p
	}
	switch cj.Spec.ConcurrencyPolicy {
	case batchv1.ForbidConcurrent:
		if len(cj.Status.Active) > 0 {
			add(normal("JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid"))
			return p
		}
	case batchv1.ReplaceConcurrent:
		p.replace = len(cj.Status.Active) > 0
	}
	p.start = scheduled
	return p
}

// jobFor is the Job cj starts for scheduled: the template's labels, annotations and spec, the
// scheduled time as an annotation in the zone stamp, and cj as its controller.
func jobFor(cj *batchv1.CronJob, scheduled time.Time, stamp *time.Location) *batchv1.Job {
	t := &cj.Spec.JobTemplate
	labels := make(map[string]string, len(t.Labels))
	for k, v := range t.Labels {
		labels[k] = v
	}
	annotations := make(map[string]string, len(t.Annotations)+1)
	for k, v := range t.Annotations {
		annotations[k] = v
	}
	if stamp == nil {
		stamp = time.UTC
	}
	annotations[batchv1.CronJobScheduledTimestampAnnotation] = scheduled.In(stamp).Format(time.RFC3339)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            jobName(cj, scheduled),
			Namespace:       cj.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, cronJobKind)},
		},
	}
	t.Spec.DeepCopyInto(&job.Spec)
	return job
}
