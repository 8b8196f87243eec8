package cronjob

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

func TestOptions(t *testing.T) {
	type oc = testserver.OptionsCase[*Options]
	testserver.CheckOptions(t, DefaultOptions,
		oc{Name: "defaults", Set: func(*Options) {}},
		oc{Name: "one worker", Set: func(o *Options) { o.ConcurrentCronJobSyncs = 1 }},
		oc{Name: "no workers", Set: func(o *Options) { o.ConcurrentCronJobSyncs = 0 }, Flag: "--concurrent-cron-job-syncs"},
	)
	o := DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if o.ConcurrentCronJobSyncs != 5 {
		t.Errorf("default workers %d, want 5", o.ConcurrentCronJobSyncs)
	}
	if err := fs.Parse([]string{"--concurrent-cron-job-syncs=9"}); err != nil || o.ConcurrentCronJobSyncs != 9 {
		t.Errorf("--concurrent-cron-job-syncs=9: %d, %v", o.ConcurrentCronJobSyncs, err)
	}
	o.ConcurrentCronJobSyncs = 0
	if _, err := New(&controller.Context{}, o); err == nil || !strings.Contains(err.Error(), "--concurrent-cron-job-syncs") {
		t.Errorf("New with no workers: %v", err)
	}
}

// fakeClock is the controller's clock in these tests: schedule times come when the test says,
// not after real minutes.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (k *fakeClock) Now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now
}

func (k *fakeClock) Add(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.now = k.now.Add(d)
}

// start runs a controller watching only ns, on a clock two minutes ahead of real time, so
// that a CronJob created now is already due for the minute the clock shows.
func start(t *testing.T, ns string) (*Controller, *fakeClock) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx.Informers = cache.NewFactory(c, ns)
	// Built as the manager builds it.
	built, err := Entry.Start(cctx)
	if err != nil {
		t.Fatal(err)
	}
	ctrl := built.(*Controller)
	clk := &fakeClock{now: time.Now().Add(2 * time.Minute)}
	ctrl.now = clk.Now
	testserver.RunControllers(t, cctx, ctrl)
	return ctrl, clk
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, what, 10*time.Second, cond)
}

func newCronJob(ns, name string, edit func(*batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.CronJobSpec{
			Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}, Annotations: map[string]string{"note": "from the template"}},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
				}}},
			},
		},
	}
	if edit != nil {
		edit(cj)
	}
	return cj
}

func create(t *testing.T, cj *batchv1.CronJob) *batchv1.CronJob {
	t.Helper()
	out, err := client.Resource[*batchv1.CronJob](c, "cronjobs").Namespace(cj.Namespace).Create(context.Background(), cj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func getCronJob(t *testing.T, ns, name string) *batchv1.CronJob {
	t.Helper()
	cj, err := client.Resource[*batchv1.CronJob](c, "cronjobs").Namespace(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return cj
}

// poke changes a label of the CronJob, which queues it at once: a sync at the fake clock's
// time without waiting for the real requeue.
func poke(t *testing.T, ns, name string) {
	t.Helper()
	cjs := client.Resource[*batchv1.CronJob](c, "cronjobs").Namespace(ns)
	for {
		cj := getCronJob(t, ns, name)
		if cj.Labels == nil {
			cj.Labels = map[string]string{}
		}
		cj.Labels["poked"] = fmt.Sprint(time.Now().UnixNano())
		_, err := cjs.Update(context.Background(), cj)
		if err == nil {
			return
		}
		if !client.IsConflict(err) {
			t.Fatal(err)
		}
	}
}

func jobNames(t *testing.T, ns string) []string {
	t.Helper()
	l, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range l.Items {
		if j.DeletionTimestamp == nil {
			out = append(out, j.Name)
		}
	}
	slices.Sort(out)
	return out
}

func getJob(t *testing.T, ns, name string) (*batchv1.Job, bool) {
	t.Helper()
	j, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Get(context.Background(), name)
	if client.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return j, true
}

// finish writes what a Job controller would when a Job ends: its start and completion
// times and a Complete or Failed condition.
func finish(t *testing.T, ns, name string, how batchv1.JobConditionType, started time.Time) {
	t.Helper()
	jobs := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns)
	j, err := jobs.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	end := metav1.NewTime(started.Add(30 * time.Second))
	j.Status.StartTime = &metav1.Time{Time: started}
	if how == batchv1.JobComplete {
		j.Status.CompletionTime = &end
		j.Status.Succeeded = 1
	} else {
		j.Status.Failed = 1
	}
	j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: how, Status: corev1.ConditionTrue, LastTransitionTime: end})
	if _, err := jobs.UpdateStatus(context.Background(), j); err != nil {
		t.Fatal(err)
	}
}

// hasEvent reports whether the controller recorded an event of reason about the CronJob
// whose message contains text.
func hasEvent(t *testing.T, ns, cronJob, reason, text string) bool {
	t.Helper()
	l, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(l.Items, func(e *corev1.Event) bool {
		return e.InvolvedObject.Kind == "CronJob" && e.InvolvedObject.Name == cronJob && e.Reason == reason &&
			e.Source.Component == eventSource && strings.Contains(e.Message, text)
	})
}

func activeNames(cj *batchv1.CronJob) []string {
	var out []string
	for _, r := range cj.Status.Active {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

// TestCreatesScheduledJob: a CronJob due at the clock's minute gets the Job named after that
// minute, with the template's metadata and spec, the scheduled time in the CronJob's zone and
// the CronJob as controller, listed in its status. A listed Job that vanishes leaves the list
// (MissingJob) without a new Job for the same time.
func TestCreatesScheduledJob(t *testing.T) {
	ns := testserver.Namespace(t, c, "cronjob-create-")
	_, clk := start(t, ns)
	cj := create(t, newCronJob(ns, "tick", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Asia/Tokyo") }))
	scheduled := clk.Now().Truncate(time.Minute)
	name := fmt.Sprintf("tick-%d", scheduled.Unix()/60)

	var job *batchv1.Job
	waitFor(t, "the scheduled Job", func() bool {
		var ok bool
		job, ok = getJob(t, ns, name)
		return ok
	})
	tokyo := zone(t, "Asia/Tokyo")
	if got, want := job.Annotations[batchv1.CronJobScheduledTimestampAnnotation], scheduled.In(tokyo).Format(time.RFC3339); got != want || !strings.HasSuffix(got, "+09:00") {
		t.Errorf("scheduled timestamp %q, want %q", got, want)
	}
	if job.Labels["app"] != "tick" || job.Annotations["note"] != "from the template" {
		t.Errorf("labels %v, annotations %v: not the template's", job.Labels, job.Annotations)
	}
	if ref := metav1.GetControllerOf(job); ref == nil || ref.UID != cj.UID || ref.Kind != "CronJob" || ref.APIVersion != "batch/v1" {
		t.Errorf("controller reference %+v, want the CronJob", ref)
	}
	if job.Spec.Template.Spec.Containers[0].Image != "busybox" {
		t.Errorf("job spec %+v: not the template's", job.Spec)
	}
	waitFor(t, "the Job in the CronJob's status", func() bool {
		cj := getCronJob(t, ns, "tick")
		return slices.Equal(activeNames(cj), []string{name}) && cj.Status.Active[0].UID == job.UID &&
			cj.Status.LastScheduleTime != nil && cj.Status.LastScheduleTime.Time.Equal(scheduled)
	})
	waitFor(t, "the SuccessfulCreate event", func() bool { return hasEvent(t, ns, "tick", "SuccessfulCreate", name) })

	// The Job goes away: the CronJob no longer lists it, and does not start the same time again.
	if err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the vanished Job to leave the active list", func() bool { return len(getCronJob(t, ns, "tick").Status.Active) == 0 })
	waitFor(t, "the MissingJob event", func() bool { return hasEvent(t, ns, "tick", "MissingJob", name) })
	poke(t, ns, "tick")
	time.Sleep(300 * time.Millisecond)
	if got := jobNames(t, ns); len(got) != 0 {
		t.Errorf("jobs %v after the Job of the same time went away, want none", got)
	}
}

// TestConcurrencyPolicies: the next minute comes while the first Job runs. Allow starts the
// second beside it; Forbid skips the time (JobAlreadyActive) and starts it once the first
// finishes; Replace deletes the first, then starts the second.
func TestConcurrencyPolicies(t *testing.T) {
	for _, policy := range []batchv1.ConcurrencyPolicy{batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent} {
		t.Run(string(policy), func(t *testing.T) {
			ns := testserver.Namespace(t, c, "cronjob-"+strings.ToLower(string(policy))+"-")
			_, clk := start(t, ns)
			create(t, newCronJob(ns, "cj", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = policy }))
			first := fmt.Sprintf("cj-%d", clk.Now().Unix()/60)
			waitFor(t, "the first Job, listed", func() bool {
				return slices.Equal(activeNames(getCronJob(t, ns, "cj")), []string{first})
			})

			clk.Add(time.Minute)
			second := fmt.Sprintf("cj-%d", clk.Now().Unix()/60)
			poke(t, ns, "cj")
			switch policy {
			case batchv1.AllowConcurrent:
				waitFor(t, "both Jobs, listed", func() bool {
					return slices.Equal(activeNames(getCronJob(t, ns, "cj")), []string{first, second})
				})
			case batchv1.ForbidConcurrent:
				waitFor(t, "the JobAlreadyActive event", func() bool { return hasEvent(t, ns, "cj", "JobAlreadyActive", "Forbid") })
				if got := jobNames(t, ns); !slices.Equal(got, []string{first}) {
					t.Fatalf("jobs %v while the first runs, want only %s", got, first)
				}
				finish(t, ns, first, batchv1.JobComplete, clk.Now().Add(-time.Minute))
				waitFor(t, "the second Job once the first finished", func() bool {
					cj := getCronJob(t, ns, "cj")
					return slices.Equal(activeNames(cj), []string{second}) && cj.Status.LastSuccessfulTime != nil
				})
				waitFor(t, "the SawCompletedJob event", func() bool { return hasEvent(t, ns, "cj", "SawCompletedJob", first+", condition: Complete") })
			case batchv1.ReplaceConcurrent:
				waitFor(t, "the second Job alone, listed", func() bool {
					return slices.Equal(activeNames(getCronJob(t, ns, "cj")), []string{second})
				})
				if _, ok := getJob(t, ns, first); ok {
					t.Errorf("the first Job %s is still there", first)
				}
				waitFor(t, "the SuccessfulDelete event", func() bool { return hasEvent(t, ns, "cj", "SuccessfulDelete", first) })
			}
		})
	}
}

// TestHistoryLimits: finished Jobs beyond the limits go, oldest first, succeeded and failed
// counted apart; a running Job stays (and, not started by the controller, is reported), and
// a suspended CronJob starts nothing even when due.
func TestHistoryLimits(t *testing.T) {
	ns := testserver.Namespace(t, c, "cronjob-history-")
	start(t, ns)
	cj := create(t, newCronJob(ns, "hist", func(cj *batchv1.CronJob) {
		cj.Spec.Suspend = new(true)
		cj.Spec.SuccessfulJobsHistoryLimit = new(int32(1))
		cj.Spec.FailedJobsHistoryLimit = new(int32(1))
	}))
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	jobs := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns)
	for _, name := range []string{"ok-1", "ok-2", "ok-3", "failed-1", "failed-2", "running"} {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, cronJobKind)}},
			Spec:       cj.Spec.JobTemplate.Spec,
		}
		if _, err := jobs.Create(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	// Written newest first, so that each write changes which are the oldest.
	finish(t, ns, "ok-3", batchv1.JobComplete, t0.Add(3*time.Minute))
	finish(t, ns, "failed-2", batchv1.JobFailed, t0.Add(2*time.Minute))
	finish(t, ns, "ok-2", batchv1.JobComplete, t0.Add(2*time.Minute))
	finish(t, ns, "ok-1", batchv1.JobComplete, t0.Add(time.Minute))
	finish(t, ns, "failed-1", batchv1.JobFailed, t0.Add(time.Minute))
	want := []string{"failed-2", "ok-3", "running"}
	waitFor(t, "the old Jobs to go", func() bool { return slices.Equal(jobNames(t, ns), want) })
	for _, name := range []string{"ok-1", "ok-2", "failed-1"} {
		waitFor(t, "SuccessfulDelete of "+name, func() bool { return hasEvent(t, ns, "hist", "SuccessfulDelete", "Deleted job "+name) })
	}
	waitFor(t, "the UnexpectedJob event", func() bool { return hasEvent(t, ns, "hist", "UnexpectedJob", "running") })
	waitFor(t, "the last success time", func() bool {
		st := getCronJob(t, ns, "hist").Status
		return st.LastSuccessfulTime != nil && st.LastSuccessfulTime.Time.Equal(t0.Add(3*time.Minute+30*time.Second))
	})
	time.Sleep(300 * time.Millisecond)
	if got := jobNames(t, ns); !slices.Equal(got, want) {
		t.Errorf("jobs %v, want %v: a suspended CronJob started one", got, want)
	}
}

// TestScheduleChangeWaits: a change of the schedule queues the CronJob for the new schedule's
// next time, not at once; other changes queue it at once; an unparseable new schedule (which
// validation would refuse) queues nothing.
func TestScheduleChangeWaits(t *testing.T) {
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(cctx, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.loop.Queue.ShutDown()
	old := cronJob("0 * * * *", time.Now().Add(-time.Hour))
	for _, tc := range []struct {
		name   string
		change func(*batchv1.CronJob)
		queued int
	}{
		{"label", func(cj *batchv1.CronJob) { cj.Labels = map[string]string{"a": "b"} }, 1},
		{"schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "30 * * * *" }, 0},
		{"time zone", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Asia/Tokyo") }, 0},
		{"unparseable schedule", func(cj *batchv1.CronJob) { cj.Spec.Schedule = "whenever" }, 0},
	} {
		cj := old.DeepCopy()
		tc.change(cj)
		ctrl.cronJobChanged(old, cj)
		if got := ctrl.loop.Queue.Len(); got != tc.queued {
			t.Errorf("%s: %d keys queued now, want %d", tc.name, got, tc.queued)
		}
		for ctrl.loop.Queue.Len() > 0 {
			k, _ := ctrl.loop.Queue.Get()
			ctrl.loop.Queue.Done(k)
		}
	}
}
