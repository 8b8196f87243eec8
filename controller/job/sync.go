package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/reconcile"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// MaxPodChangesPerSync bounds the pods one sync creates or deletes, as Kubernetes does, so that
// one large Job does not hold a worker for long; the rest follow in the next sync.
const MaxPodChangesPerSync = 500

// maxUncounted bounds the finished pods one sync moves into the status (and the size of
// status.uncountedTerminatedPods).
const maxUncounted = 500

// sync brings one Job's pods and status in step with its spec.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil // not a key of ours: nothing will ever make it one
	}
	shared, err := c.jobs.Lister().Namespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.exp.Forget(key)
		return reconcile.Result{}, c.releaseOrphans(ctx, ns, name)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if m := shared.Spec.ManagedBy; m != nil && *m != batchv1.JobControllerName {
		return reconcile.Result{}, nil // another controller's Job
	}
	job := shared.DeepCopy()
	if finishedJob(job) {
		// Every pod was counted before the Job finished; one left with the finalizer (a
		// write that failed) must not stay undeletable.
		var left []*corev1.Pod
		for _, p := range c.pods.Lister().Namespace(ns).List(labels.Everything()) {
			if tracked(p) && metav1.IsControlledBy(p, job) {
				left = append(left, p)
			}
		}
		return reconcile.Result{}, c.removeFinalizers(ctx, left)
	}
	pods, err := c.podsOf(ctx, job)
	if err != nil {
		return reconcile.Result{}, err
	}
	satisfied := c.exp.Satisfied(key)
	now := c.now()
	s := newState(job, pods)
	statusChanged := false
	if job.Status.StartTime == nil && !deref(job.Spec.Suspend) {
		job.Status.StartTime, statusChanged = &metav1.Time{Time: now}, true
	}
	var after time.Duration
	done := s.finishedCondition(now)
	if done == nil {
		if left := s.deadlineLeft(now); left < time.Duration(1<<63-1) {
			after = left
		}
	}
	active := int32(len(s.active))
	var manageErr error
	if done != nil {
		// The Job has come to its end: stop its pods, keeping their finalizers so that they
		// are counted as they go.
		deleted, err := c.deletePods(ctx, job, key, s.active, false)
		manageErr = err
		if int32(deleted) != active || !satisfied {
			done = nil // pods remain, or the cache lags: finish in a later sync
		}
		active -= int32(deleted)
		s.terminating += int32(deleted)
	} else {
		managed := false
		if satisfied && job.DeletionTimestamp == nil {
			var wait time.Duration
			active, wait, manageErr = c.manage(ctx, job, key, s, now)
			after = minPositive(after, wait)
			managed = true
		}
		if s.complete(active) {
			done = newCondition(batchv1.JobSuccessCriteriaMet, reasonCompletions, messageCompletions, now)
		} else if managed {
			statusChanged = c.setSuspended(job, now) || statusChanged
		}
	}
	ready := s.ready
	statusChanged = statusChanged || active != job.Status.Active || deref(job.Status.Ready) != ready ||
		deref(job.Status.Terminating) != s.terminating
	job.Status.Active, job.Status.Ready, job.Status.Terminating = active, &ready, &s.terminating
	if err := c.track(ctx, s, done, statusChanged, now); err != nil {
		return reconcile.Result{}, errors.Join(fmt.Errorf("tracking status: %w", err), manageErr)
	}
	if manageErr != nil {
		return reconcile.Result{}, manageErr
	}
	return reconcile.After(after), nil
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// podsOf returns the Job's pods: those it controls, plus orphans its selector matches, which it
// adopts (with the tracking finalizer, so that their end is counted).
func (c *Controller) podsOf(ctx context.Context, job *batchv1.Job) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of job %s/%s: %w", job.Namespace, job.Name, err)
	}
	candidates := c.pods.Lister().Namespace(job.Namespace).List(labels.Everything())
	owner := podcontrol.Owner{Object: job, GVK: Kind, Finalizer: batchv1.JobTrackingFinalizer,
		Fresh: func(ctx context.Context) (metav1.Object, error) {
			return client.Resource[*batchv1.Job](c.client, "jobs").Namespace(job.Namespace).Get(ctx, job.Name)
		}}
	pods, err := podcontrol.Claim(ctx, c.client, owner, sel, candidates)
	for i, p := range pods {
		if !tracked(p) && adoptedNow(p, candidates) {
			pods[i] = p.DeepCopy()
			pods[i].Finalizers = append(pods[i].Finalizers, batchv1.JobTrackingFinalizer)
		}
	}
	return pods, err
}

// adoptedNow reports whether p was an orphan among the listed pods: adopted in this sync, with
// the finalizer the patch added but the cache does not show yet.
func adoptedNow(p *corev1.Pod, listed []*corev1.Pod) bool {
	for _, l := range listed {
		if l.UID == p.UID {
			return metav1.GetControllerOfNoCopy(l) == nil
		}
	}
	return false
}

// manage deletes and creates pods so that the Job runs what it should: none while suspended,
// wantActive otherwise (not before the backoff after failures has passed). It returns the
// active count after its writes and how long until a backoff ends.
func (c *Controller) manage(ctx context.Context, job *batchv1.Job, key string, s *state, now time.Time) (int32, time.Duration, error) {
	active := int32(len(s.active))
	var errs []error
	if deref(job.Spec.Suspend) {
		n, err := c.deletePods(ctx, job, key, s.active, true)
		s.terminating += int32(n)
		return active - int32(n), 0, err
	}
	want := s.wantActive(active)
	if surplus := int(active - want); surplus > 0 {
		victims := c.surplus(job, s, surplus, now)
		n, err := c.deletePods(ctx, job, key, victims, true)
		active -= int32(n)
		s.terminating += int32(n)
		errs = append(errs, err)
	}
	missing := want - active
	if deref(job.Spec.PodReplacementPolicy) == batchv1.Failed {
		missing -= s.terminating // replacements wait until the pods they replace are gone
	}
	if missing <= 0 {
		return active, 0, errors.Join(errs...)
	}
	if wait := c.backoff.remaining(s.pods, now); wait > 0 && job.Spec.BackoffLimitPerIndex == nil {
		return active, wait, errors.Join(errs...)
	}
	missing = min(missing, MaxPodChangesPerSync)
	var indexes []int
	if isIndexed(job) {
		running := map[int]bool{}
		for _, p := range s.active {
			running[completionIndex(p)] = true
		}
		indexes = pendingIndexes(int(missing), int(deref(job.Spec.Completions)), s.doneIndexes, s.failedIndexes, running)
		missing = int32(len(indexes))
	}
	if missing == 0 {
		return active, 0, errors.Join(errs...)
	}
	c.exp.ExpectCreations(key, int(missing))
	var mu sync.Mutex
	next := 0
	made, err := podcontrol.SlowStart(int(missing), func() error {
		index := noIndex
		if indexes != nil {
			mu.Lock()
			index, next = indexes[next], next+1
			mu.Unlock()
		}
		return c.createPod(ctx, job, index, s)
	})
	for range int(missing) - made {
		c.exp.CreationObserved(key) // never made: never observed
	}
	return active + int32(made), 0, errors.Join(append(errs, err)...)
}

// surplus picks n active pods to delete: of an Indexed Job, first those running an index
// another pod runs too or one beyond completions, then the cheapest to lose.
func (c *Controller) surplus(job *batchv1.Job, s *state, n int, now time.Time) []*corev1.Pod {
	var first, rest []*corev1.Pod
	if isIndexed(job) {
		seen := map[int]bool{}
		completions := int(deref(job.Spec.Completions))
		for _, p := range s.active {
			i := completionIndex(p)
			if i == noIndex || i >= completions || seen[i] || s.doneIndexes.has(i) {
				first = append(first, p)
				continue
			}
			seen[i] = true
			rest = append(rest, p)
		}
	} else {
		rest = s.active
	}
	if len(first) >= n {
		return first[:n]
	}
	return append(first, podcontrol.PodsToDelete(rest, s.active, n-len(first), now)...)
}

// createPod makes one pod from the Job's template: controlled by the Job, with the tracking
// finalizer, and for an Indexed Job its index (annotation, label, hostname, environment).
func (c *Controller) createPod(ctx context.Context, job *batchv1.Job, index int, s *state) error {
	tmpl := job.Spec.Template.DeepCopy()
	tmpl.Finalizers = append(tmpl.Finalizers, batchv1.JobTrackingFinalizer)
	generateName := job.Name + "-"
	if index != noIndex {
		ix := strconv.Itoa(index)
		tmpl.Annotations = withEntry(tmpl.Annotations, batchv1.JobCompletionIndexAnnotation, ix)
		tmpl.Labels = withEntry(tmpl.Labels, batchv1.JobCompletionIndexAnnotation, ix)
		if job.Spec.BackoffLimitPerIndex != nil {
			tmpl.Annotations[batchv1.JobIndexFailureCountAnnotation] = strconv.Itoa(int(failuresOfIndex(s.pods, index)))
		}
		tmpl.Spec.Hostname = job.Name + "-" + ix
		generateName = job.Name + "-" + ix + "-"
		addIndexEnv(&tmpl.Spec)
	}
	pod := podcontrol.NewPod(job, Kind, tmpl, generateName)
	created, err := client.Resource[*corev1.Pod](c.client, "pods").Namespace(job.Namespace).Create(ctx, pod)
	if err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil // the namespace, and the Job with it, are going away
		}
		c.recorder.Eventf(job, corev1.EventTypeWarning, "FailedCreate", "Error creating: %v", err)
		return err
	}
	c.recorder.Eventf(job, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %s", created.Name)
	return nil
}

func withEntry(m map[string]string, k, v string) map[string]string {
	m = maps.Clone(m)
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// failuresOfIndex is how many pods of an index have failed: the most any of its pods knew of,
// plus its own failure.
func failuresOfIndex(pods []*corev1.Pod, index int) int32 {
	var n int32
	for _, p := range pods {
		if completionIndex(p) != index {
			continue
		}
		f := indexFailures(p)
		if p.Status.Phase == corev1.PodFailed || (p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded) {
			f++
		}
		n = max(n, f)
	}
	return n
}

// addIndexEnv gives every container JOB_COMPLETION_INDEX, from the pod's index annotation.
func addIndexEnv(spec *corev1.PodSpec) {
	env := corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: fmt.Sprintf("metadata.annotations['%s']", batchv1.JobCompletionIndexAnnotation)}}}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			if !slices.ContainsFunc(list[i].Env, func(e corev1.EnvVar) bool { return e.Name == env.Name }) {
				list[i].Env = append(list[i].Env, env)
			}
		}
	}
}

// deletePods deletes pods in parallel and returns how many it deleted. release removes the
// tracking finalizer first: a pod the Job no longer wants (suspended, surplus) ends uncounted;
// a pod stopped because the Job ended keeps it, and counts as failed.
func (c *Controller) deletePods(ctx context.Context, job *batchv1.Job, key string, pods []*corev1.Pod, release bool) (int, error) {
	pods = pods[:min(len(pods), MaxPodChangesPerSync)]
	if len(pods) == 0 {
		return 0, nil
	}
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = cache.MetaNamespaceKey(p)
	}
	c.exp.ExpectDeletions(key, keys)
	api := client.Resource[*corev1.Pod](c.client, "pods").Namespace(job.Namespace)
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() {
			var err error
			if release && tracked(p) {
				err = removeFinalizer(ctx, api, p)
			}
			if err == nil {
				err = api.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			}
			switch {
			case err == nil:
				c.recorder.Eventf(job, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: %s", p.Name)
			case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
				c.exp.DeletionObserved(key, keys[i]) // gone already: no event will come
			default:
				c.exp.DeletionObserved(key, keys[i])
				c.recorder.Eventf(job, corev1.EventTypeWarning, "FailedDelete", "Error deleting: %v", err)
				errs[i] = err
			}
		})
	}
	wg.Wait()
	deleted := 0
	for _, err := range errs {
		if err == nil {
			deleted++
		}
	}
	return deleted, errors.Join(errs...)
}

// finalizerPatch removes the tracking finalizer and nothing else; the UID makes it fail if
// the name now belongs to another pod.
var finalizerPatch = func(uid types.UID) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"$deleteFromPrimitiveList/finalizers": []string{batchv1.JobTrackingFinalizer}, "uid": uid}})
	return b
}

func removeFinalizer(ctx context.Context, api *client.Typed[*corev1.Pod], p *corev1.Pod) error {
	_, err := api.Patch(ctx, p.Name, types.StrategicMergePatchType, finalizerPatch(p.UID), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// removeFinalizers removes the tracking finalizer from pods in parallel.
func (c *Controller) removeFinalizers(ctx context.Context, pods []*corev1.Pod) error {
	_, err := c.removeFinalizersOf(ctx, pods)
	return err
}

// removeFinalizersOf is removeFinalizers returning the UIDs whose finalizer came off.
func (c *Controller) removeFinalizersOf(ctx context.Context, pods []*corev1.Pod) (map[types.UID]bool, error) {
	done := map[types.UID]bool{}
	if len(pods) == 0 {
		return done, nil
	}
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() {
			errs[i] = removeFinalizer(ctx, client.Resource[*corev1.Pod](c.client, "pods").Namespace(p.Namespace), p)
		})
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] == nil {
			done[p.UID] = true
		}
	}
	return done, errors.Join(errs...)
}

// releaseOrphans removes the tracking finalizer from the pods a deleted Job (ns/name) left:
// nothing will count them now, and they must be deletable.
func (c *Controller) releaseOrphans(ctx context.Context, ns, name string) error {
	var left []*corev1.Pod
	for _, p := range c.pods.Lister().Namespace(ns).List(labels.Everything()) {
		ref := metav1.GetControllerOfNoCopy(p)
		if tracked(p) && ref != nil && ref.Kind == Kind.Kind && ref.Name == name && ref.APIVersion == Kind.GroupVersion().String() {
			left = append(left, p)
		}
	}
	return c.removeFinalizers(ctx, left)
}

// setSuspended keeps the Suspended condition in step with spec.suspend, with its events; a
// resumed Job starts its deadline anew. It reports whether the status changed.
func (c *Controller) setSuspended(job *batchv1.Job, now time.Time) bool {
	if deref(job.Spec.Suspend) {
		if !setCondition(job, batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended", now) {
			return false
		}
		c.recorder.Eventf(job, corev1.EventTypeNormal, "Suspended", "Job suspended")
		return true
	}
	if !setCondition(job, batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "Job resumed", now) {
		return false
	}
	c.recorder.Eventf(job, corev1.EventTypeNormal, "Resumed", "Job resumed")
	job.Status.StartTime = &metav1.Time{Time: now}
	return true
}

// track counts finished pods into the status without ever counting one twice or losing one:
// it first writes their UIDs (or indexes) into the status, then removes their finalizers, then
// moves them into the counters; a crash between the steps leaves the UIDs listed, and the
// next sync carries on. When the Job has come to its end (done) and every pod is counted and
// gone, it writes the Complete or Failed condition.
func (c *Controller) track(ctx context.Context, s *state, done *batchv1.JobCondition, changed bool, now time.Time) error {
	job := s.job
	uncounted := job.Status.UncountedTerminatedPods
	if uncounted == nil {
		uncounted = &batchv1.UncountedTerminatedPods{}
		job.Status.UncountedTerminatedPods = uncounted
	}
	withFinalizer := map[types.UID]bool{}
	for _, p := range s.pods {
		if tracked(p) {
			withFinalizer[p.UID] = true
		}
	}
	// UIDs listed earlier whose pods have lost their finalizer (or are gone) are counted now.
	if moveCounted(job, withFinalizer) {
		changed = true
	}
	// Pods to release: finished ones, every one when the Job ends in failure or is being
	// deleted. Succeeded pods of an Indexed Job are counted by index, not by UID.
	var release []*corev1.Pod
	var newIndexes []int
	ending := done != nil && done.Type == batchv1.JobFailureTarget
	completions := int(deref(job.Spec.Completions))
	for _, p := range s.pods {
		if !tracked(p) {
			continue
		}
		// Once the Job has come to its end every pod is released; those still running when
		// it did (stopped by this sync) count as failed only if it ended in failure, as in
		// Kubernetes: a successPolicy's leftover pods are not failures.
		failed := isFailed(p, job)
		if !(p.Status.Phase == corev1.PodSucceeded || failed || done != nil || job.DeletionTimestamp != nil) {
			continue
		}
		release = append(release, p)
		switch {
		case s.uncountedSucceeded[p.UID] || s.uncountedFailed[p.UID]:
		case p.Status.Phase == corev1.PodSucceeded:
			if isIndexed(job) {
				if i := completionIndex(p); i != noIndex && i < completions && !s.doneIndexes.has(i) {
					newIndexes = append(newIndexes, i)
				}
				continue
			}
			uncounted.Succeeded = append(uncounted.Succeeded, p.UID)
			changed = true
		case failed || ending:
			if isIndexed(job) && (completionIndex(p) == noIndex || completionIndex(p) >= completions) {
				continue
			}
			if judgeFailure(job.Spec.PodFailurePolicy, p).counts() {
				uncounted.Failed = append(uncounted.Failed, p.UID)
				changed = true
			}
		}
		if len(release) >= maxUncounted {
			break // the rest next time: the status stays small, other Jobs get their turn
		}
	}
	if isIndexed(job) {
		s.doneIndexes = s.doneIndexes.with(newIndexes...)
		job.Status.Succeeded = int32(s.doneIndexes.total())
		if str := s.doneIndexes.String(); str != job.Status.CompletedIndexes {
			job.Status.CompletedIndexes, changed = str, true
		}
		if job.Spec.BackoffLimitPerIndex != nil {
			str := s.failedIndexes.String()
			if job.Status.FailedIndexes == nil || *job.Status.FailedIndexes != str {
				job.Status.FailedIndexes, changed = &str, true
			}
		}
	}
	// The interim condition goes in with the UIDs, before any finalizer comes off.
	if done != nil && condition(job, done.Type) == nil {
		job.Status.Conditions = append(job.Status.Conditions, *done)
		changed = true
	}
	if changed {
		if err := c.writeStatus(ctx, job); err != nil {
			return err
		}
	}
	removed, removeErr := c.removeFinalizersOf(ctx, release)
	for uid := range removed {
		delete(withFinalizer, uid)
	}
	changed = moveCounted(job, withFinalizer)
	if c.finish(job, done, now) {
		changed = true
	}
	if changed {
		if err := c.writeStatus(ctx, job); err != nil {
			return errors.Join(err, removeErr)
		}
	}
	return removeErr
}

// moveCounted moves the UIDs of the status's uncounted lists whose pods no longer hold the
// finalizer into the counters; it reports whether anything moved.
func moveCounted(job *batchv1.Job, withFinalizer map[types.UID]bool) bool {
	u := job.Status.UncountedTerminatedPods
	moved := false
	keep := func(list []types.UID, counter *int32) []types.UID {
		out := list[:0]
		for _, uid := range list {
			if withFinalizer[uid] {
				out = append(out, uid)
				continue
			}
			*counter++
			moved = true
		}
		return out
	}
	u.Succeeded = keep(u.Succeeded, &job.Status.Succeeded)
	u.Failed = keep(u.Failed, &job.Status.Failed)
	return moved
}

// finish adds the terminal condition once every pod is counted and none is still stopping:
// Complete after SuccessCriteriaMet, Failed after FailureTarget, each with its reason.
func (c *Controller) finish(job *batchv1.Job, done *batchv1.JobCondition, now time.Time) bool {
	u := job.Status.UncountedTerminatedPods
	if done == nil || len(u.Succeeded)+len(u.Failed) > 0 || deref(job.Status.Terminating) > 0 || job.Status.Active > 0 {
		return false
	}
	final := *newCondition(batchv1.JobComplete, done.Reason, done.Message, now)
	if done.Type == batchv1.JobFailureTarget {
		final.Type = batchv1.JobFailed
	}
	if condition(job, final.Type) != nil {
		return false
	}
	job.Status.Conditions = append(job.Status.Conditions, final)
	if final.Type == batchv1.JobComplete {
		job.Status.CompletionTime = &final.LastTransitionTime
		c.recorder.Eventf(job, corev1.EventTypeNormal, "Completed", "Job completed")
	} else {
		c.recorder.Eventf(job, corev1.EventTypeWarning, final.Reason, "%s", final.Message)
	}
	return true
}

// writeStatus writes job's status and keeps the written resourceVersion for the next write.
func (c *Controller) writeStatus(ctx context.Context, job *batchv1.Job) error {
	written, err := client.Resource[*batchv1.Job](c.client, "jobs").Namespace(job.Namespace).UpdateStatus(ctx, job)
	if err != nil {
		return err
	}
	job.ResourceVersion = written.ResourceVersion
	return nil
}
