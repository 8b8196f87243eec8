package node

import corev1 "k8s.io/api/core/v1"

// event records an Event about pod from the "kubelet" component, as kubectl describe pod
// shows them. It never blocks: the agent's recorder writes on its own goroutine.
func (w *podWorker) event(pod *corev1.Pod, eventType, reason, format string, args ...any) {
	w.a.events.Eventf(pod, eventType, reason, format, args...)
}

// killing records that the pod's running containers are being stopped because the pod is
// being deleted.
func (w *podWorker) killing(pod *corev1.Pod) {
	for _, c := range w.containers {
		if c.cmd != nil {
			w.event(pod, corev1.EventTypeNormal, "Killing", "Stopping container %s", c.spec.Name)
		}
	}
}
