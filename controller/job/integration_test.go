package job

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// These tests run the controller against the real apiserver; no node agent runs, so each
// test plays the node: it writes the pods' status (Running, Succeeded, Failed).

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

// start runs a Job controller with a short batch period and backoff.
func start(t *testing.T) *Controller {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.BatchPeriod = 10 * time.Millisecond
	ctrl, err := New(cctx, o)
	if err != nil {
		t.Fatal(err)
	}
	ctrl.backoff = backoff{base: 50 * time.Millisecond, max: 200 * time.Millisecond}
	testserver.RunControllers(t, cctx, ctrl)
	return ctrl
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func newJob(ns, name string, change func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: batchv1.JobSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}},
	}}
	if change != nil {
		change(j)
	}
	return j
}

func create(t *testing.T, j *batchv1.Job) *batchv1.Job {
	t.Helper()
	out, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(j.Namespace).Create(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func getJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	j, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func podsOf(t *testing.T, ns string) []*corev1.Pod {
	t.Helper()
	l, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := append([]*corev1.Pod(nil), l.Items...)
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// running returns the pods that are neither finished nor being deleted.
func running(t *testing.T, ns string) []*corev1.Pod {
	return slices.DeleteFunc(podsOf(t, ns), func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
}

// finish plays the node: the pod's container ended with code (0: Succeeded).
func finish(t *testing.T, p *corev1.Pod, code int32) {
	t.Helper()
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodSucceeded
	if code != 0 {
		p.Status.Phase = corev1.PodFailed
	}
	now := metav1.Now()
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: now, StartedAt: now}}}}
	if _, err := client.Resource[*corev1.Pod](c, "pods").Namespace(p.Namespace).UpdateStatus(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last state: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitPods(t *testing.T, ns string, n int) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	waitFor(t, fmt.Sprintf("%d running pods", n), func() (bool, string) {
		pods = running(t, ns)
		return len(pods) == n, fmt.Sprintf("%d running", len(pods))
	})
	return pods
}

func hasCondition(j *batchv1.Job, typ batchv1.JobConditionType, reason string) bool {
	c := condition(j, typ)
	return c != nil && c.Status == corev1.ConditionTrue && (reason == "" || c.Reason == reason)
}

func waitCondition(t *testing.T, ns, name string, typ batchv1.JobConditionType, reason string) *batchv1.Job {
	t.Helper()
	var j *batchv1.Job
	waitFor(t, fmt.Sprintf("condition %s (%s)", typ, reason), func() (bool, string) {
		j = getJob(t, ns, name)
		return hasCondition(j, typ, reason), fmt.Sprintf("%+v", j.Status)
	})
	return j
}

func conditionTypes(j *batchv1.Job) []batchv1.JobConditionType {
	var out []batchv1.JobConditionType
	for _, c := range j.Status.Conditions {
		out = append(out, c.Type)
	}
	return out
}

// TestCompletions: completions 3 at parallelism 2 runs two pods, then the third; each pod's
// end is counted once, its finalizer removed; the Job ends SuccessCriteriaMet then Complete.
func TestCompletions(t *testing.T) {
	start(t)
	ns := namespace(t)
	create(t, newJob(ns, "work", func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = new(int32(3)), new(int32(2)) }))
	pods := waitPods(t, ns, 2)
	for _, p := range pods {
		if !tracked(p) || !metav1.IsControlledBy(p, getJob(t, ns, "work")) || !strings.HasPrefix(p.Name, "work-") {
			t.Errorf("pod %s: finalizers %v, owners %v", p.Name, p.Finalizers, p.OwnerReferences)
		}
		if p.Labels[batchv1.JobNameLabel] != "work" {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
	}
	finish(t, pods[0], 0)
	waitFor(t, "one success counted and a replacement", func() (bool, string) {
		j := getJob(t, ns, "work")
		return j.Status.Succeeded == 1 && len(running(t, ns)) == 2, fmt.Sprintf("%+v", j.Status)
	})
	for _, p := range running(t, ns) {
		finish(t, p, 0)
	}
	j := waitCondition(t, ns, "work", batchv1.JobComplete, reasonCompletions)
	if j.Status.Succeeded != 3 || j.Status.Failed != 0 || j.Status.Active != 0 || j.Status.CompletionTime == nil ||
		len(j.Status.UncountedTerminatedPods.Succeeded)+len(j.Status.UncountedTerminatedPods.Failed) != 0 {
		t.Errorf("status %+v", j.Status)
	}
	if got := conditionTypes(j); !slices.Equal(got, []batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete}) {
		t.Errorf("conditions %v", got)
	}
	for _, p := range podsOf(t, ns) {
		if tracked(p) {
			t.Errorf("pod %s still has the tracking finalizer", p.Name)
		}
	}
	if n := len(podsOf(t, ns)); n != 3 {
		t.Errorf("%d pods, want the 3 that ran", n)
	}
}

// TestBackoffLimit: with backoffLimit 1 the first failure is replaced (after the backoff), the
// second fails the Job: FailureTarget, then Failed with BackoffLimitExceeded.
func TestBackoffLimit(t *testing.T) {
	start(t)
	ns := namespace(t)
	create(t, newJob(ns, "flaky", func(j *batchv1.Job) { j.Spec.BackoffLimit = new(int32(1)) }))
	finish(t, waitPods(t, ns, 1)[0], 1)
	finish(t, waitPods(t, ns, 1)[0], 1)
	j := waitCondition(t, ns, "flaky", batchv1.JobFailed, reasonBackoffLimit)
	if j.Status.Failed != 2 || j.Status.Succeeded != 0 || j.Status.CompletionTime != nil {
		t.Errorf("status %+v", j.Status)
	}
	if got := conditionTypes(j); !slices.Equal(got, []batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed}) {
		t.Errorf("conditions %v", got)
	}
	if c := condition(j, batchv1.JobFailed); c.Message != messageBackoffLimit {
		t.Errorf("message %q", c.Message)
	}
}

// TestIndexed: each index gets one pod with its index in the annotation, label, hostname and
// environment; succeeded indexes show in completedIndexes.
func TestIndexed(t *testing.T) {
	start(t)
	ns := namespace(t)
	create(t, newJob(ns, "ix", func(j *batchv1.Job) {
		j.Spec.Completions, j.Spec.Parallelism = new(int32(3)), new(int32(3))
		j.Spec.CompletionMode = new(batchv1.IndexedCompletion)
	}))
	pods := waitPods(t, ns, 3)
	byIndex := map[int]*corev1.Pod{}
	for _, p := range pods {
		i := completionIndex(p)
		byIndex[i] = p
		ix := fmt.Sprint(i)
		env := p.Spec.Containers[0].Env
		if p.Labels[batchv1.JobCompletionIndexAnnotation] != ix || p.Spec.Hostname != "ix-"+ix || !strings.HasPrefix(p.Name, "ix-"+ix+"-") ||
			len(env) != 1 || env[0].Name != "JOB_COMPLETION_INDEX" || env[0].ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
			t.Errorf("pod %s: labels %v hostname %q env %+v", p.Name, p.Labels, p.Spec.Hostname, env)
		}
	}
	if len(byIndex) != 3 || byIndex[0] == nil || byIndex[2] == nil {
		t.Fatalf("indexes %v", byIndex)
	}
	finish(t, byIndex[2], 0)
	finish(t, byIndex[0], 0)
	waitFor(t, "indexes 0 and 2 done", func() (bool, string) {
		j := getJob(t, ns, "ix")
		return j.Status.CompletedIndexes == "0,2" && j.Status.Succeeded == 2, j.Status.CompletedIndexes
	})
	// A failed index is run again.
	finish(t, byIndex[1], 3)
	var again []*corev1.Pod
	waitFor(t, "index 1 again", func() (bool, string) {
		again = running(t, ns)
		return len(again) == 1 && completionIndex(again[0]) == 1, fmt.Sprint(len(again))
	})
	finish(t, again[0], 0)
	j := waitCondition(t, ns, "ix", batchv1.JobComplete, "")
	if j.Status.CompletedIndexes != "0-2" || j.Status.Succeeded != 3 || j.Status.Failed != 1 {
		t.Errorf("status %+v", j.Status)
	}
}

// TestSuspend: a suspended Job runs no pods and says so; resumed, it starts them; suspended
// again, its pods are deleted without counting as failures.
func TestSuspend(t *testing.T) {
	start(t)
	ns := namespace(t)
	create(t, newJob(ns, "later", func(j *batchv1.Job) { j.Spec.Suspend, j.Spec.Parallelism = new(true), new(int32(2)) }))
	j := waitCondition(t, ns, "later", batchv1.JobSuspended, "JobSuspended")
	if j.Status.StartTime != nil || len(podsOf(t, ns)) != 0 {
		t.Fatalf("suspended job started: %+v", j.Status)
	}
	setSuspend := func(v bool) {
		t.Helper()
		waitFor(t, "suspend written", func() (bool, string) {
			j := getJob(t, ns, "later")
			j.Spec.Suspend = new(v)
			_, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Update(context.Background(), j)
			return err == nil, fmt.Sprint(err)
		})
	}
	setSuspend(false)
	waitPods(t, ns, 2)
	// The pods are created before the status that says so is written.
	waitFor(t, "resumed", func() (bool, string) {
		j := getJob(t, ns, "later")
		cond := condition(j, batchv1.JobSuspended)
		return cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == "JobResumed" && j.Status.StartTime != nil, fmt.Sprintf("%+v", j.Status)
	})
	setSuspend(true)
	waitFor(t, "pods deleted", func() (bool, string) {
		n := len(podsOf(t, ns))
		return n == 0, fmt.Sprint(n)
	})
	j = waitCondition(t, ns, "later", batchv1.JobSuspended, "JobSuspended")
	if j.Status.Failed != 0 || j.Status.Active != 0 {
		t.Errorf("status after suspending %+v", j.Status)
	}
}

// TestPodFailurePolicy: exit code 42 matches a FailJob rule: the Job fails at once with the
// rule's message; exit code 3 matches an Ignore rule and is not counted.
func TestPodFailurePolicy(t *testing.T) {
	start(t)
	ns := namespace(t)
	create(t, newJob(ns, "strict", func(j *batchv1.Job) {
		j.Spec.BackoffLimit = new(int32(0))
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionIgnore, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3}}},
			{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
		}}
	}))
	first := waitPods(t, ns, 1)[0]
	finish(t, first, 3)
	var second *corev1.Pod
	waitFor(t, "a replacement for the ignored failure", func() (bool, string) {
		r := running(t, ns)
		if len(r) == 1 && r[0].Name != first.Name {
			second = r[0]
			return true, ""
		}
		return false, fmt.Sprint(len(r))
	})
	if j := getJob(t, ns, "strict"); j.Status.Failed != 0 || finishedJob(j) {
		t.Fatalf("ignored failure counted: %+v", j.Status)
	}
	finish(t, second, 42)
	j := waitCondition(t, ns, "strict", batchv1.JobFailed, reasonPolicy)
	want := fmt.Sprintf("Container main for pod %s/%s failed with exit code 42 matching FailJob rule at index 1", ns, second.Name)
	if msg := condition(j, batchv1.JobFailed).Message; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if j.Status.Failed != 1 {
		t.Errorf("failed %d, want 1 (the ignored failure not counted)", j.Status.Failed)
	}
}

// TestActiveDeadline: a Job running past activeDeadlineSeconds has its pods deleted and fails
// with DeadlineExceeded; the pods it stopped count as failed.
func TestActiveDeadline(t *testing.T) {
	start(t)
	ns := namespace(t)
	create(t, newJob(ns, "slow", func(j *batchv1.Job) {
		j.Spec.ActiveDeadlineSeconds, j.Spec.Parallelism = new(int64(1)), new(int32(2))
	}))
	waitPods(t, ns, 2)
	j := waitCondition(t, ns, "slow", batchv1.JobFailed, reasonDeadline)
	if j.Status.Failed != 2 || j.Status.Active != 0 {
		t.Errorf("status %+v", j.Status)
	}
	waitFor(t, "pods gone", func() (bool, string) {
		n := len(podsOf(t, ns))
		return n == 0, fmt.Sprint(n)
	})
}

// TestSuccessPolicy: an Indexed Job whose successPolicy needs index 0 succeeds when index 0
// does; the other pods are stopped.
func TestSuccessPolicy(t *testing.T) {
	start(t)
	ns := namespace(t)
	create(t, newJob(ns, "leader", func(j *batchv1.Job) {
		j.Spec.Completions, j.Spec.Parallelism = new(int32(3)), new(int32(3))
		j.Spec.CompletionMode = new(batchv1.IndexedCompletion)
		j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: new("0")}}}
	}))
	for _, p := range waitPods(t, ns, 3) {
		if completionIndex(p) == 0 {
			finish(t, p, 0)
		}
	}
	j := waitCondition(t, ns, "leader", batchv1.JobComplete, reasonSuccessPolicy)
	if j.Status.CompletedIndexes != "0" {
		t.Errorf("status %+v", j.Status)
	}
	if got := conditionTypes(j); !slices.Equal(got, []batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete}) {
		t.Errorf("conditions %v", got)
	}
}

// TestDeletedJobReleasesPods: pods of a Job deleted without its pods (orphan propagation)
// lose the tracking finalizer, so they can be deleted.
func TestDeletedJobReleasesPods(t *testing.T) {
	start(t)
	ns := namespace(t)
	create(t, newJob(ns, "gone", nil))
	waitPods(t, ns, 1)
	orphan := metav1.DeletePropagationOrphan
	if err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Delete(context.Background(), "gone",
		metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "finalizer removed", func() (bool, string) {
		pods := podsOf(t, ns)
		return len(pods) == 1 && !tracked(pods[0]), fmt.Sprint(len(pods))
	})
}

func TestOptions(t *testing.T) {
	type o = testserver.OptionsCase[*Options]
	testserver.CheckOptions(t, DefaultOptions,
		o{Name: "defaults", Set: func(*Options) {}},
		o{Name: "no workers", Set: func(o *Options) { o.ConcurrentSyncs = 0 }, Flag: "--concurrent-job-syncs"},
	)
}
