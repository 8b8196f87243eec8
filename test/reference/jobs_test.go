//go:build linux

package reference

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

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
	runDifferential(t, scenario{
		prefix:      "jobs",
		controllers: "job",
		node:        jobNode,
		steps:       []step{{name: "creating the Jobs", act: createJobs, atRest: jobsAtRest}},
		outcomes:    jobOutcomes,
	})
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

func createJobs(ctx context.Context, c *client.Client, ns string) error {
	for _, j := range jobFixture() {
		if _, err := client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Create(ctx, j); err != nil {
			return err
		}
	}
	return nil
}

// jobNode runs a Job's pod as nodeRule says, and removes pods being deleted.
func jobNode(ctx context.Context, pods *client.Typed[*corev1.Pod]) cache.Handler[*corev1.Pod] {
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
	return cache.Handler[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod, _ bool) { play(p); reapDeleted(ctx, pods, p) },
		OnUpdate: func(_, p *corev1.Pod) { reapDeleted(ctx, pods, p) },
	}
}

// jobsAtRest: every Job but the suspended one has Complete or Failed, and the suspended one
// says so.
func jobsAtRest(ctx context.Context, c *client.Client, ns string) ([]string, error) {
	l, err := list[*batchv1.Job](ctx, c, "jobs", ns)
	if err != nil {
		return nil, err
	}
	var moving []string
	for _, j := range l {
		if !slices.ContainsFunc(j.Status.Conditions, func(cond batchv1.JobCondition) bool {
			return cond.Status == corev1.ConditionTrue && (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed || cond.Type == batchv1.JobSuspended)
		}) {
			moving = append(moving, j.Name)
		}
	}
	return moving, nil
}

// jobOutcomes renders each Job's end state without what differs between runs by nature:
// times, names of pods (masked in messages), UIDs.
func jobOutcomes(ctx context.Context, c *client.Client, ns string) (map[string]string, error) {
	l, pl, err := listWithPods[*batchv1.Job](ctx, c, "jobs", ns)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, j := range l {
		st := j.Status
		var conds []string
		for _, cond := range st.Conditions {
			msg := cond.Message
			for _, p := range pl {
				msg = strings.ReplaceAll(msg, p.Name, "<pod>")
			}
			conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", cond.Type, cond.Status, cond.Reason, strings.ReplaceAll(msg, ns, "<ns>")))
		}
		phases := map[string]int{}
		tracked := 0
		for _, p := range pl {
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
		failedIndexes := "<nil>"
		if st.FailedIndexes != nil {
			failedIndexes = *st.FailedIndexes
		}
		out[j.Name] = fmt.Sprintf("active=%d succeeded=%d failed=%d ready=%d terminating=%d completed=%q failedIndexes=%s started=%v completionTime=%v conditions=%v pods=%v tracked=%d",
			st.Active, st.Succeeded, st.Failed, deref(st.Ready), deref(st.Terminating), st.CompletedIndexes, failedIndexes,
			st.StartTime != nil, st.CompletionTime != nil, conds, sortedCounts(phases), tracked)
	}
	return out, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
