package node

import (
	corev1 "k8s.io/api/core/v1"
)

// restartPolicy is the policy that applies to c: the pod's, except that an init container
// runs to completion, so it is restarted only on failure even under Always.
func restartPolicy(pod *corev1.Pod, c *container) corev1.RestartPolicy {
	if c.init && pod.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		return corev1.RestartPolicyOnFailure
	}
	return pod.Spec.RestartPolicy
}

// completed says whether an init container ran to completion successfully.
func (c *container) completed() bool {
	return c.finished && c.last != nil && c.last.ExitCode == 0
}

// initialized says whether every init container completed.
func (w *podWorker) initialized() bool {
	for _, c := range w.containers[:w.nInit] {
		if !c.completed() {
			return false
		}
	}
	return true
}

// advance starts what comes next: the first init container that has not completed, if it
// has never run (one running, waiting for its restart, or failed for good holds the rest
// back), or, once all completed, the pod's containers.
func (w *podWorker) advance(pod *corev1.Pod) {
	for i, c := range w.containers[:w.nInit] {
		if c.completed() {
			continue
		}
		if c.cmd == nil && c.last == nil && c.nextStart.IsZero() && !c.finished {
			w.startContainer(pod, i)
		}
		return
	}
	if w.mainStarted {
		return
	}
	w.mainStarted = true
	for i := w.nInit; i < len(w.containers); i++ {
		w.startContainer(pod, i)
	}
}
