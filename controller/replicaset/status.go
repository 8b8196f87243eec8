package replicaset

import (
	"time"

	"github.com/kplane/kplane/controller/podcontrol"
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
		r := podcontrol.ReadySince(p)
		if !r.Ready {
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
func available(r podcontrol.ReadyTime, minReadySeconds int32, now time.Time) bool {
	if !r.Ready {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	return !r.At.IsZero() && !r.At.Add(time.Duration(minReadySeconds)*time.Second).After(now)
}
