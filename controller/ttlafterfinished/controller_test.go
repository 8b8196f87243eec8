package ttlafterfinished

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/garbagecollector"
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
		oc{Name: "no workers", Set: func(o *Options) { o.ConcurrentTTLSyncs = 0 }, Flag: "--concurrent-ttl-after-finished-syncs"},
	)
	o := DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if o.ConcurrentTTLSyncs != 5 {
		t.Errorf("default workers %d, want 5", o.ConcurrentTTLSyncs)
	}
	if err := fs.Parse([]string{"--concurrent-ttl-after-finished-syncs=2"}); err != nil || o.ConcurrentTTLSyncs != 2 {
		t.Errorf("--concurrent-ttl-after-finished-syncs=2: %d, %v", o.ConcurrentTTLSyncs, err)
	}
	o.ConcurrentTTLSyncs = -1
	if _, err := New(&controller.Context{}, o); err == nil || !strings.Contains(err.Error(), "--concurrent-ttl-after-finished-syncs") {
		t.Errorf("New with no workers: %v", err)
	}
}

func TestExpiresAt(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	cond := func(typ batchv1.JobConditionType, status corev1.ConditionStatus, at time.Time) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: status, LastTransitionTime: metav1.NewTime(at)}
	}
	for _, tc := range []struct {
		name   string
		ttl    *int32
		conds  []batchv1.JobCondition
		done   *time.Time // status.completionTime
		delete bool
		want   time.Time
		ok     bool
		err    bool
	}{
		{"no ttl", nil, []batchv1.JobCondition{cond(batchv1.JobComplete, corev1.ConditionTrue, t0)}, nil, false, time.Time{}, false, false},
		{"running", new(int32(0)), nil, nil, false, time.Time{}, false, false},
		{"suspended", new(int32(0)), []batchv1.JobCondition{cond(batchv1.JobSuspended, corev1.ConditionTrue, t0)}, nil, false, time.Time{}, false, false},
		{"about to fail", new(int32(0)), []batchv1.JobCondition{cond(batchv1.JobFailureTarget, corev1.ConditionTrue, t0)}, nil, false, time.Time{}, false, false},
		{"complete false", new(int32(0)), []batchv1.JobCondition{cond(batchv1.JobComplete, corev1.ConditionFalse, t0)}, nil, false, time.Time{}, false, false},
		{"complete, ttl 0", new(int32(0)), []batchv1.JobCondition{cond(batchv1.JobComplete, corev1.ConditionTrue, t0)}, nil, false, t0, true, false},
		{"complete, ttl 100", new(int32(100)), []batchv1.JobCondition{
			cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, t0.Add(-time.Second)),
			cond(batchv1.JobComplete, corev1.ConditionTrue, t0),
		}, nil, false, t0.Add(100 * time.Second), true, false},
		{"failed", new(int32(5)), []batchv1.JobCondition{cond(batchv1.JobFailed, corev1.ConditionTrue, t0)}, nil, false, t0.Add(5 * time.Second), true, false},
		{"condition without time", new(int32(5)), []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}, &t0, false, t0.Add(5 * time.Second), true, false},
		{"no time at all", new(int32(5)), []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}, nil, false, time.Time{}, true, true},
		{"being deleted", new(int32(0)), []batchv1.JobCondition{cond(batchv1.JobComplete, corev1.ConditionTrue, t0)}, nil, true, time.Time{}, false, false},
	} {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j"}}
		j.Spec.TTLSecondsAfterFinished = tc.ttl
		j.Status.Conditions = tc.conds
		if tc.done != nil {
			j.Status.CompletionTime = &metav1.Time{Time: *tc.done}
		}
		if tc.delete {
			j.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		at, ok, err := expiresAt(j)
		if !at.Equal(tc.want) || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("%s: %s, %v, %v; want %s, %v, error %v", tc.name, at, ok, err, tc.want, tc.ok, tc.err)
		}
	}
}

// TestDue: a Job due by the clock is deleted now; one not yet due waits exactly until it is.
func TestDue(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	j := &batchv1.Job{}
	j.Spec.TTLSecondsAfterFinished = new(int32(60))
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}}
	for _, tc := range []struct {
		now  time.Time
		due  bool
		wait time.Duration
	}{
		{t0, false, time.Minute},
		{t0.Add(-time.Hour), false, time.Hour + time.Minute}, // finished in the future: skew
		{t0.Add(59 * time.Second), false, time.Second},
		{t0.Add(time.Minute), true, 0},
		{t0.Add(time.Hour), true, 0},
	} {
		ctrl := &Controller{now: func() time.Time { return tc.now }}
		res, due, err := ctrl.due(j)
		if err != nil || due != tc.due || res.After != tc.wait {
			t.Errorf("at %s: due %v, wait %v, %v; want %v, %v", tc.now, due, res.After, err, tc.due, tc.wait)
		}
	}
}

func newJob(t *testing.T, ns, name string, ttl *int32) *batchv1.Job {
	t.Helper()
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			TTLSecondsAfterFinished: ttl,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
			}},
		},
	}
	out, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Create(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// complete writes what a Job controller would when the Job succeeds.
func complete(t *testing.T, ns, name string) {
	t.Helper()
	jobs := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns)
	j, err := jobs.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &now, &now, 1
	j.Status.Conditions = append(j.Status.Conditions,
		batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now})
	if _, err := jobs.UpdateStatus(context.Background(), j); err != nil {
		t.Fatal(err)
	}
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

// start runs the controller over ns only.
func start(t *testing.T, ns string) *Controller {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx.Informers = cache.NewFactory(c, ns)
	// Built as the manager builds it.
	ctrl, err := Entry.Start(cctx)
	if err != nil {
		t.Fatal(err)
	}
	testserver.RunControllers(t, cctx, ctrl)
	return ctrl.(*Controller)
}

// TestDeletesExpiredJobs: finished Jobs with a TTL of 0 and of 1 second are deleted in the
// foreground (marked, with the garbage collector's foregroundDeletion finalizer), the second
// not before its second is up; with the garbage collector running they are then gone. A
// running Job, a finished Job without TTL and one whose TTL is far off stay, until that TTL
// is lowered.
func TestDeletesExpiredJobs(t *testing.T) {
	ns := testserver.Namespace(t, c, "ttl-")
	start(t, ns)
	newJob(t, ns, "ttl-0", new(int32(0)))
	newJob(t, ns, "ttl-1", new(int32(1)))
	newJob(t, ns, "running", new(int32(0)))
	newJob(t, ns, "no-ttl", nil)
	newJob(t, ns, "ttl-hour", new(int32(3600)))
	for _, name := range []string{"ttl-0", "no-ttl", "ttl-hour"} {
		complete(t, ns, name)
	}
	complete(t, ns, "ttl-1")

	marked := func(name string) func() bool {
		return func() bool {
			j, ok := getJob(t, ns, name)
			return !ok || j.DeletionTimestamp != nil
		}
	}
	testserver.Eventually(t, "ttl-0 to be deleted", 10*time.Second, marked("ttl-0"))
	if j, ok := getJob(t, ns, "ttl-0"); !ok || !slices.Contains(j.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Errorf("ttl-0 not deleted in the foreground: %+v", j)
	}
	testserver.Eventually(t, "ttl-1 to be deleted", 10*time.Second, marked("ttl-1"))
	// Both times are whole seconds: the deletion is stamped no earlier than a second after
	// the completion.
	if j, ok := getJob(t, ns, "ttl-1"); ok && j.DeletionTimestamp.Time.Before(j.Status.Conditions[1].LastTransitionTime.Add(time.Second)) {
		t.Errorf("ttl-1 deleted at %s, completed at %s: before its TTL", j.DeletionTimestamp, j.Status.Conditions[1].LastTransitionTime)
	}

	// The TTL lowered on a waiting Job is honoured.
	jobs := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns)
	j, _ := getJob(t, ns, "ttl-hour")
	j.Spec.TTLSecondsAfterFinished = new(int32(0))
	if _, err := jobs.Update(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "ttl-hour to be deleted once its TTL is 0", 10*time.Second, marked("ttl-hour"))

	for _, name := range []string{"running", "no-ttl"} {
		if j, ok := getJob(t, ns, name); !ok || j.DeletionTimestamp != nil {
			t.Errorf("%s deleted", name)
		}
	}

	// The garbage collector finishes the foreground deletions.
	testserver.StartControllers(t, c, garbagecollector.Entry)
	for _, name := range []string{"ttl-0", "ttl-1", "ttl-hour"} {
		testserver.Eventually(t, name+" to be gone", 10*time.Second, func() bool { _, ok := getJob(t, ns, name); return !ok })
	}
}

// TestRereadsBeforeDeleting: a cache that still shows a Job as due does not get it deleted
// when the server's copy has a longer TTL by now; the sync waits for the new expiry instead.
func TestRereadsBeforeDeleting(t *testing.T) {
	ns := testserver.Namespace(t, c, "ttl-reread-")
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx.Informers = cache.NewFactory(c, ns)
	ctrl, err := New(cctx, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.loop.Queue.ShutDown()
	newJob(t, ns, "j", new(int32(0)))
	complete(t, ns, "j")

	// The cache sees the finished Job with TTL 0, then stops following the server.
	ctx, cancel := context.WithCancel(context.Background())
	cctx.Informers.Start(ctx)
	testserver.Eventually(t, "the cache to see the finished Job", 10*time.Second, func() bool {
		j, err := ctrl.jobs.Lister().Namespace(ns).Get("j")
		return err == nil && len(j.Status.Conditions) > 0
	})
	cancel()
	cctx.Informers.Shutdown()

	j, _ := getJob(t, ns, "j")
	j.Spec.TTLSecondsAfterFinished = new(int32(3600))
	if _, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Update(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	res, err := ctrl.sync(context.Background(), ns+"/j")
	if err != nil {
		t.Fatal(err)
	}
	if res.After < 3590*time.Second || res.After > time.Hour {
		t.Errorf("wait %v, want about an hour", res.After)
	}
	if j, ok := getJob(t, ns, "j"); !ok || j.DeletionTimestamp != nil {
		t.Error("the Job was deleted on the cache's stale TTL")
	}
}
