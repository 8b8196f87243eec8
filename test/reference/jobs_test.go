//go:build linux

package reference

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestJobsMatchReference runs the reference kube-controller-manager's job controller and then
// kplane's, each on its own namespace of the same kplane apiserver holding the same Jobs, with
// the test playing the node by the same rules (see nodeRule), and requires the Jobs they end
// with to be the same: counts, conditions with their reasons and messages, completed and failed
// indexes, and the pods' phases. Pod names (random suffixes) are masked in messages.
//
//	KPLANE_REFERENCE_KCM=/path/to/kube-controller-manager go test -count=1 -v -run TestJobsMatchReference ./test/reference/
func TestJobsMatchReference(t *testing.T) {
	refKCM := os.Getenv("KPLANE_REFERENCE_KCM")
	if refKCM == "" {
		t.Skip("KPLANE_REFERENCE_KCM does not name a reference kube-controller-manager binary; this differential test needs one")
	}
	bin := buildKplane(t)
	logDir := keptLogDir(t)
	kubeconfig := startAPIServer(t, bin, logDir)
	c, err := client.FromKubeconfig(kubeconfig, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig", kubeconfig, "--controllers", "job", "--leader-elect=false", "--secure-port", "0"}
	ref := runJobs(t, c, logDir, "reference", exec.Command(refKCM, append(args, "--v", "2")...))
	got := runJobs(t, c, logDir, "kplane", exec.Command(bin, append([]string{"controller-manager"}, args...)...))
	var diffs []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range ref {
			if !yield(k) {
				return
			}
		}
	}) {
		if ref[name] != got[name] {
			diffs = append(diffs, fmt.Sprintf("job %s:\n- %s\n+ %s", name, ref[name], got[name]))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("kplane's Jobs differ from the reference's (- reference, + kplane):\n%s", strings.Join(diffs, "\n"))
	}
}

// jobFixture are the Jobs each controller runs; nodeRule says what their pods do.
func jobFixture() []*batchv1.Job {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	job := func(name string, change func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: batchv1.JobSpec{Template: *tmpl.DeepCopy()}}
		change(j)
		return j
	}
	indexed := func(j *batchv1.Job, n int32) {
		j.Spec.Completions, j.Spec.Parallelism, j.Spec.CompletionMode = new(n), new(n), new(batchv1.IndexedCompletion)
	}
	return []*batchv1.Job{
		job("complete", func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = new(int32(3)), new(int32(2)) }),
		job("indexed", func(j *batchv1.Job) { indexed(j, 3) }),
		job("backoff", func(j *batchv1.Job) { j.Spec.BackoffLimit = new(int32(1)) }),
		job("policy", func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}}}}
		}),
		job("suspended", func(j *batchv1.Job) { j.Spec.Suspend = new(true) }),
		job("deadline", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds, j.Spec.Parallelism = new(int64(2)), new(int32(2)) }),
		job("leader", func(j *batchv1.Job) {
			indexed(j, 3)
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: new("0")}}}
		}),
	}
}

// nodeRule is what a pod of a Job does: exit with a code (-1: keep running).
func nodeRule(job string, index string) int32 {
	switch job {
	case "backoff":
		return 1
	case "policy":
		return 42
	case "deadline":
		return -1
	case "leader":
		if index == "0" {
			return 0
		}
		return -1
	}
	return 0
}

// runJobs creates the fixture in namespace "jobs-<name>", runs cmd and plays the node until
// every Job has come to rest, and returns each Job's normalised outcome.
func runJobs(t *testing.T, c *client.Client, logDir, name string, cmd *exec.Cmd) map[string]string {
	t.Helper()
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, which the informer waits for
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "jobs-" + name
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	jobs := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns)
	for _, j := range jobFixture() {
		if _, err := jobs.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	inf := cache.NewInformer[*corev1.Pod]("ref-pods", pods)
	play := func(p *corev1.Pod) {
		if p.Status.Phase != "" && p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
			return
		}
		code := nodeRule(p.Labels[batchv1.JobNameLabel], p.Annotations[batchv1.JobCompletionIndexAnnotation])
		p = p.DeepCopy()
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		if code >= 0 {
			p.Status.Phase = map[bool]corev1.PodPhase{true: corev1.PodSucceeded, false: corev1.PodFailed}[code == 0]
			state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now}}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: state}}
		_, _ = pods.UpdateStatus(ctx, p) // a pod deleted meanwhile needs nothing
	}
	// A pod being deleted is gone once its containers stop: the kubelet's part, with grace 0
	// (the finalizer, if still there, keeps it until the controller counts it).
	reap := func(p *corev1.Pod) {
		if p.DeletionTimestamp != nil {
			_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		}
	}
	inf.AddHandler(cache.Handler[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod, _ bool) { play(p); reap(p) },
		OnUpdate: func(_, p *corev1.Pod) { reap(p) },
	}, 0)
	wg.Go(func() { inf.Run(ctx) })

	logs, err := os.Create(filepath.Join(logDir, name+"-jobs.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopProcess(cmd)
	// At rest: every Job but the suspended one has Complete or Failed, and the suspended one
	// says so; then a few seconds more, for late writes.
	deadline := time.Now().Add(90 * time.Second)
	for {
		l, err := jobs.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rest := 0
		var moving []string
		for _, j := range l.Items {
			moving = append(moving, j.Name)
			for _, cond := range j.Status.Conditions {
				if cond.Status == corev1.ConditionTrue && (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed || cond.Type == batchv1.JobSuspended) {
					rest++
					moving = moving[:len(moving)-1]
					break
				}
			}
		}
		if rest == len(l.Items) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: jobs %v not at rest after 90s; log: %s", name, moving, tail(logs.Name()))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(stableFor)
	return jobOutcomes(t, c, ns)
}

// jobOutcomes renders each Job's end state without what differs between runs by nature:
// times, names of pods (masked in messages), UIDs.
func jobOutcomes(t *testing.T, c *client.Client, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	l, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, j := range l.Items {
		st := j.Status
		var conds []string
		for _, cond := range st.Conditions {
			msg := cond.Message
			for _, p := range pl.Items {
				msg = strings.ReplaceAll(msg, p.Name, "<pod>")
			}
			conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", cond.Type, cond.Status, cond.Reason, strings.ReplaceAll(msg, ns, "<ns>")))
		}
		phases := map[string]int{}
		tracked := 0
		for _, p := range pl.Items {
			if p.Labels[batchv1.JobNameLabel] != j.Name {
				continue
			}
			ph := string(p.Status.Phase)
			if p.DeletionTimestamp != nil {
				ph += "/deleting"
			}
			phases[ph]++
			if slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
				tracked++
			}
		}
		var ps []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range phases {
				if !yield(k) {
					return
				}
			}
		}) {
			ps = append(ps, fmt.Sprintf("%s:%d", k, phases[k]))
		}
		failedIndexes := "<nil>"
		if st.FailedIndexes != nil {
			failedIndexes = *st.FailedIndexes
		}
		out[j.Name] = fmt.Sprintf("active=%d succeeded=%d failed=%d ready=%d terminating=%d completed=%q failedIndexes=%s started=%v completionTime=%v conditions=%v pods=%v tracked=%d",
			st.Active, st.Succeeded, st.Failed, deref(st.Ready), deref(st.Terminating), st.CompletedIndexes, failedIndexes,
			st.StartTime != nil, st.CompletionTime != nil, conds, ps, tracked)
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
