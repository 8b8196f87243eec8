package job

import (
	"slices"
	"time"

	"github.com/kplane/kplane/controller/podcontrol"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The pure part of a sync: what the Job's pods and status say, and what follows from them.

// Condition reasons and messages, Kubernetes'.
const (
	reasonBackoffLimit    = "BackoffLimitExceeded"
	reasonDeadline        = "DeadlineExceeded"
	reasonPolicy          = "PodFailurePolicy"
	reasonMaxFailedIndex  = "MaxFailedIndexesExceeded"
	reasonFailedIndexes   = "FailedIndexes"
	reasonSuccessPolicy   = "SuccessPolicy"
	reasonCompletions     = "CompletionsReached"
	messageBackoffLimit   = "Job has reached the specified backoff limit"
	messageDeadline       = "Job was active longer than specified deadline"
	messageCompletions    = "Reached expected number of succeeded pods"
	messageMaxFailedIndex = "Job has exceeded the specified maximal number of failed indexes"
	messageFailedIndexes  = "Job has failed indexes"
)

// state is what one sync knows of a Job: its pods sorted by what they are doing, and the
// counts that include what the status has not counted yet.
type state struct {
	job         *batchv1.Job
	pods        []*corev1.Pod // the Job's pods
	active      []*corev1.Pod // running or to run: neither finished nor terminating
	terminating int32         // being deleted, not finished
	ready       int32         // active and Ready

	// uncounted are the pods the status lists as finished but not yet counted.
	uncountedSucceeded, uncountedFailed map[types.UID]bool
	// newSucceeded and newFailed are finished pods still holding the tracking finalizer
	// that the status does not list yet; newFailed only those whose failure counts.
	newSucceeded, newFailed []*corev1.Pod

	succeeded, failed int32 // everything counted so far, the new pods included
	// doneIndexes and failedIndexes are an Indexed Job's indexes that succeeded and that
	// failed for good (with a per-index backoff limit).
	doneIndexes, failedIndexes indexSet
}

func newState(job *batchv1.Job, pods []*corev1.Pod) *state {
	s := &state{job: job, pods: pods, uncountedSucceeded: map[types.UID]bool{}, uncountedFailed: map[types.UID]bool{}}
	if u := job.Status.UncountedTerminatedPods; u != nil {
		for _, uid := range u.Succeeded {
			s.uncountedSucceeded[uid] = true
		}
		for _, uid := range u.Failed {
			s.uncountedFailed[uid] = true
		}
	}
	completions := int(deref(job.Spec.Completions))
	var newDone []int
	for _, p := range pods {
		switch {
		case podcontrol.IsActive(p):
			s.active = append(s.active, p)
			if podReady(p) {
				s.ready++
			}
		case p.DeletionTimestamp != nil && !finished(p):
			s.terminating++
		}
		if !tracked(p) || s.uncountedSucceeded[p.UID] || s.uncountedFailed[p.UID] {
			continue
		}
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			if isIndexed(job) {
				if i := completionIndex(p); i != noIndex && i < completions {
					newDone = append(newDone, i)
				}
				continue
			}
			s.newSucceeded = append(s.newSucceeded, p)
		case isFailed(p, job):
			if judgeFailure(job.Spec.PodFailurePolicy, p).counts() {
				s.newFailed = append(s.newFailed, p)
			}
		}
	}
	s.succeeded = job.Status.Succeeded + int32(len(s.uncountedSucceeded)+len(s.newSucceeded))
	s.failed = job.Status.Failed + int32(len(s.uncountedFailed)+len(s.newFailed))
	if isIndexed(job) {
		s.doneIndexes = parseIndexSet(job.Status.CompletedIndexes, completions).with(newDone...)
		s.succeeded = int32(s.doneIndexes.total())
		if job.Spec.BackoffLimitPerIndex != nil {
			s.failedIndexes = failedIndexes(job, pods, completions)
		}
	}
	return s
}

// finishedCondition returns the condition the Job ends with, if it has come to an end now:
// FailureTarget or SuccessCriteriaMet (the Failed or Complete condition follows once its pods
// are gone). Checked in Kubernetes' order: what an earlier sync decided, the pod failure
// policy, the backoff limit, the deadline, the per-index limits, the success policy. The
// plain count of completions is checked after pods are managed (complete).
func (s *state) finishedCondition(now time.Time) *batchv1.JobCondition {
	j := s.job
	if c := condition(j, batchv1.JobSuccessCriteriaMet); c != nil && c.Status == corev1.ConditionTrue {
		return c
	}
	if c := condition(j, batchv1.JobFailureTarget); c != nil && c.Status == corev1.ConditionTrue {
		return c
	}
	if msg := s.failJobMessage(); msg != "" {
		return newCondition(batchv1.JobFailureTarget, reasonPolicy, msg, now)
	}
	if s.failed > deref(j.Spec.BackoffLimit) || s.pastBackoffLimitOnFailure() {
		return newCondition(batchv1.JobFailureTarget, reasonBackoffLimit, messageBackoffLimit, now)
	}
	if s.deadlineLeft(now) < 0 {
		return newCondition(batchv1.JobFailureTarget, reasonDeadline, messageDeadline, now)
	}
	if !isIndexed(j) {
		return nil
	}
	completions := int(deref(j.Spec.Completions))
	if j.Spec.BackoffLimitPerIndex != nil {
		failed := s.failedIndexes.total()
		switch {
		case j.Spec.MaxFailedIndexes != nil && failed > int(*j.Spec.MaxFailedIndexes):
			return newCondition(batchv1.JobFailureTarget, reasonMaxFailedIndex, messageMaxFailedIndex, now)
		case failed > 0 && failed+s.doneIndexes.total() >= completions:
			return newCondition(batchv1.JobFailureTarget, reasonFailedIndexes, messageFailedIndexes, now)
		}
	}
	if msg := successPolicyMet(j.Spec.SuccessPolicy, completions, s.doneIndexes); msg != "" {
		return newCondition(batchv1.JobSuccessCriteriaMet, reasonSuccessPolicy, msg, now)
	}
	return nil
}

// complete reports whether the Job has all the completions it wants, with active pods left.
func (s *state) complete(active int32) bool {
	if c := s.job.Spec.Completions; c != nil {
		return s.succeeded >= *c && active == 0
	}
	// Without completions, one success means the work is done once the others stop.
	return s.succeeded > 0 && active == 0
}

// failJobMessage is the message of the first FailJob rule a failed pod matches.
func (s *state) failJobMessage() string {
	if s.job.Spec.PodFailurePolicy == nil {
		return ""
	}
	for _, p := range s.pods {
		if tracked(p) && isFailed(p, s.job) {
			if v := judgeFailure(s.job.Spec.PodFailurePolicy, p); v.failJob != "" {
				return v.failJob
			}
		}
	}
	return ""
}

// pastBackoffLimitOnFailure: pods that restart in place (restartPolicy OnFailure) never fail,
// so their containers' restarts count against the backoff limit instead.
func (s *state) pastBackoffLimitOnFailure() bool {
	if s.job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	var restarts int32
	for _, p := range s.pods {
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for _, cs := range list {
				restarts += cs.RestartCount
			}
		}
	}
	if limit := deref(s.job.Spec.BackoffLimit); limit > 0 {
		return restarts >= limit
	}
	return restarts > 0
}

// deadlineLeft is how long the Job may still run under activeDeadlineSeconds: a large value
// when it has no deadline or is not running (suspended, not started), negative when past.
func (s *state) deadlineLeft(now time.Time) time.Duration {
	j := s.job
	if j.Spec.ActiveDeadlineSeconds == nil || j.Status.StartTime == nil || deref(j.Spec.Suspend) {
		return time.Duration(1<<63 - 1)
	}
	left := time.Duration(*j.Spec.ActiveDeadlineSeconds)*time.Second - now.Sub(j.Status.StartTime.Time)
	if left <= 0 {
		return -1
	}
	return left
}

// wantActive is how many pods should run: parallelism, but no more than the completions
// left; without completions, none once one pod succeeded (but the running ones stay).
func (s *state) wantActive(active int32) int32 {
	j := s.job
	parallelism := deref(j.Spec.Parallelism)
	if j.Spec.Completions == nil {
		if s.succeeded > 0 {
			return active
		}
		return parallelism
	}
	return max(min(*j.Spec.Completions-s.succeeded, parallelism), 0)
}

// failedIndexes are the indexes of an Indexed Job with a per-index backoff limit that failed
// for good: the status's, and those whose latest failed pod used up the index's limit or
// matched a FailIndex rule.
func failedIndexes(j *batchv1.Job, pods []*corev1.Pod, completions int) indexSet {
	var out []int
	if j.Status.FailedIndexes != nil {
		out = parseIndexSet(*j.Status.FailedIndexes, completions).list()
	}
	for _, p := range pods {
		i := completionIndex(p)
		if i == noIndex || i >= completions || !tracked(p) || !isFailed(p, j) {
			continue
		}
		if judgeFailure(j.Spec.PodFailurePolicy, p).action == batchv1.PodFailurePolicyActionFailIndex ||
			indexFailures(p)+1 > deref(j.Spec.BackoffLimitPerIndex) {
			out = append(out, i)
		}
	}
	return newIndexSet(out)
}

// indexFailures is how many earlier pods of the pod's index failed, from its annotation.
func indexFailures(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Annotations[batchv1.JobIndexFailureCountAnnotation] {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int32(c-'0')
	}
	return n
}

// isFailed: the pod failed, or (unless the Job replaces only failed pods) it is being deleted
// before it finished, which counts as a failure: an orphan being deleted might never reach
// the Failed phase.
func isFailed(p *corev1.Pod, j *batchv1.Job) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if deref(j.Spec.PodReplacementPolicy) == batchv1.Failed {
		return false
	}
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// tracked reports whether the pod still holds the Job's tracking finalizer: whether its end
// remains to be counted.
func tracked(p *corev1.Pod) bool { return slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func isIndexed(j *batchv1.Job) bool {
	return deref(j.Spec.CompletionMode) == batchv1.IndexedCompletion
}

// finishedJob reports whether the Job has its Complete or Failed condition.
func finishedJob(j *batchv1.Job) bool {
	for _, t := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		if c := condition(j, t); c != nil && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func condition(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if j.Status.Conditions[i].Type == t {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}

func newCondition(t batchv1.JobConditionType, reason, message string, now time.Time) *batchv1.JobCondition {
	ts := metav1.NewTime(now)
	return &batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastProbeTime: ts, LastTransitionTime: ts}
}

// setCondition sets a condition's status, reason and message, returning whether it changed;
// the transition time moves only when the status does.
func setCondition(j *batchv1.Job, t batchv1.JobConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) bool {
	ts := metav1.NewTime(now)
	c := condition(j, t)
	if c == nil {
		if status == corev1.ConditionFalse {
			return false // a condition that never held is not written as false
		}
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: t, Status: status,
			Reason: reason, Message: message, LastProbeTime: ts, LastTransitionTime: ts})
		return true
	}
	if c.Status == status && c.Reason == reason && c.Message == message {
		return false
	}
	if c.Status != status {
		c.LastTransitionTime = ts
	}
	c.Status, c.Reason, c.Message, c.LastProbeTime = status, reason, message, ts
	return true
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
