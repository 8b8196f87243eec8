package deployment

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition reasons, with Kubernetes' spelling: kubectl rollout status looks for
// ProgressDeadlineExceeded.
const (
	ReasonMinimumReplicasAvailable   = "MinimumReplicasAvailable"
	ReasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	ReasonNewRSCreated               = "NewReplicaSetCreated"
	ReasonRSUpdated                  = "ReplicaSetUpdated"
	ReasonNewRSAvailable             = "NewReplicaSetAvailable"
	ReasonProgressDeadlineExceeded   = "ProgressDeadlineExceeded"
	ReasonPaused                     = "DeploymentPaused"
)

// counts fills the replica counts of a status from the ReplicaSets (all includes newRS).
func counts(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, all []*appsv1.ReplicaSet, unavailable int32) appsv1.DeploymentStatus {
	st := appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		CollisionCount:     d.Status.CollisionCount,
		Conditions:         copyConditions(d.Status.Conditions),
	}
	for _, rs := range all {
		st.Replicas += rs.Status.Replicas
		st.ReadyReplicas += rs.Status.ReadyReplicas
		st.AvailableReplicas += rs.Status.AvailableReplicas
	}
	if newRS != nil {
		st.UpdatedReplicas = newRS.Status.Replicas
	}
	st.UnavailableReplicas = max(replicasOf(d)-st.AvailableReplicas, 0)
	if st.AvailableReplicas >= replicasOf(d)-unavailable {
		setCondition(&st, cond(appsv1.DeploymentAvailable, corev1.ConditionTrue, ReasonMinimumReplicasAvailable,
			"Deployment has minimum availability."), time.Time{})
	} else {
		setCondition(&st, cond(appsv1.DeploymentAvailable, corev1.ConditionFalse, ReasonMinimumReplicasUnavailable,
			"Deployment does not have minimum availability."), time.Time{})
	}
	return st
}

func copyConditions(cs []appsv1.DeploymentCondition) []appsv1.DeploymentCondition {
	if cs == nil {
		return nil
	}
	return append([]appsv1.DeploymentCondition(nil), cs...)
}

func cond(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, msg string) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: t, Status: s, Reason: reason, Message: msg}
}

// getCondition returns the status's condition of type t, or nil.
func getCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setCondition puts c into st. A condition with the same status and reason already there is
// left alone unless touch is set, in which case only its update time moves to now; a change
// of status moves the transition time too. A zero now means "leave as is" for the stamps of
// an unchanged condition and time.Now for a new one.
func setCondition(st *appsv1.DeploymentStatus, c appsv1.DeploymentCondition, now time.Time) {
	stamp := metav1.NewTime(now)
	if now.IsZero() {
		stamp = metav1.Now()
	}
	stamp = metav1.NewTime(stamp.Rfc3339Copy().Time)
	old := getCondition(st, c.Type)
	if old != nil && old.Status == c.Status && old.Reason == c.Reason {
		if !now.IsZero() {
			old.LastUpdateTime = stamp
			old.Message = c.Message
		}
		return
	}
	c.LastUpdateTime, c.LastTransitionTime = stamp, stamp
	if old != nil {
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		*old = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

// complete reports whether the rollout is done: every replica updated and available and no
// old pod left. kubectl rollout status waits for the same (with the generation observed).
func complete(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	n := replicasOf(d)
	return st.UpdatedReplicas == n && st.Replicas == n && st.AvailableReplicas == n && st.ObservedGeneration >= d.Generation
}

// progressed reports whether the new status shows any move forward from the old one.
func progressed(old, cur *appsv1.DeploymentStatus) bool {
	return cur.UpdatedReplicas > old.UpdatedReplicas || cur.ReadyReplicas > old.ReadyReplicas ||
		cur.AvailableReplicas > old.AvailableReplicas || cur.Replicas < old.Replicas
}

// progress sets the Progressing condition of st (computed from d's current status) at now
// and returns how long until the deadline should be checked again (0: no need).
func progress(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, st *appsv1.DeploymentStatus, now time.Time) time.Duration {
	if d.Spec.ProgressDeadlineSeconds == nil {
		return 0
	}
	cur := getCondition(st, appsv1.DeploymentProgressing)
	if d.Spec.Paused {
		setCondition(st, cond(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonPaused,
			"Deployment is paused"), time.Time{})
		return 0
	}
	if cur != nil && cur.Reason == ReasonProgressDeadlineExceeded && (newRS == nil || !complete(d, st)) {
		return 0 // stays failed until the template changes or it completes
	}
	name := ""
	if newRS != nil {
		name = newRS.Name
	}
	deadline := time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second
	switch {
	case newRS != nil && complete(d, st):
		setCondition(st, cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonNewRSAvailable,
			fmt.Sprintf("ReplicaSet %q has successfully progressed.", name)), time.Time{})
		return 0
	case progressed(&d.Status, st) || cur == nil || cur.Status != corev1.ConditionTrue || cur.Reason == ReasonNewRSAvailable:
		setCondition(st, cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonRSUpdated,
			fmt.Sprintf("ReplicaSet %q is progressing.", name)), now)
		return deadline + time.Second
	}
	left := cur.LastUpdateTime.Add(deadline).Sub(now)
	if left <= 0 {
		setCondition(st, cond(appsv1.DeploymentProgressing, corev1.ConditionFalse, ReasonProgressDeadlineExceeded,
			fmt.Sprintf("ReplicaSet %q has timed out progressing.", name)), now)
		return 0
	}
	return left + time.Second
}
