package replicaset

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Status is what the controller writes into either kind's status.
type Status struct {
	Replicas             int32
	FullyLabeledReplicas int32
	ReadyReplicas        int32
	AvailableReplicas    int32
	ObservedGeneration   int64
	// TODO(replicaset): terminatingReplicas and the ReplicaFailure condition are not
	// maintained yet.
}

// calculateStatus counts the owner's active pods: all of them, those carrying every label
// of the template, the ready ones, and those ready for at least minReadySeconds at now.
func calculateStatus(pods []*corev1.Pod, templateLabels map[string]string, minReadySeconds int32, generation int64, now time.Time) Status {
	st := Status{ObservedGeneration: generation}
	full := labels.SelectorFromSet(templateLabels)
	for _, p := range pods {
		st.Replicas++
		if full.Matches(labels.Set(p.Labels)) {
			st.FullyLabeledReplicas++
		}
		r := readySince(p)
		if !r.ok {
			continue
		}
		st.ReadyReplicas++
		if available(r, minReadySeconds, now) {
			st.AvailableReplicas++
		}
	}
	return st
}

// available: ready, and for at least minReadySeconds (0: ready is enough).
func available(r readyTime, minReadySeconds int32, now time.Time) bool {
	if !r.ok {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	return !r.at.IsZero() && !r.at.Add(time.Duration(minReadySeconds)*time.Second).After(now)
}

// isActive: neither terminating nor finished.
func isActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}
