package endpoints

import (
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// ControllerName is the event source and the managed-by label value of this controller.
	ControllerName = "endpoint-controller"
	// LabelManagedBy marks Endpoints written by this controller.
	LabelManagedBy = "endpoints.kubernetes.io/managed-by"
	// overCapacityTruncated is the over-capacity annotation's value on a truncated object.
	overCapacityTruncated = "truncated"
	// leaderAnnotation marks Endpoints that old leader election used as a lock. They have no
	// service and must survive the start-up sweep of orphans.
	leaderAnnotation = "control-plane.alpha.kubernetes.io/leader"
)

// serviceIPSet reports whether svc has a virtual IP; a service without one is headless.
func serviceIPSet(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

// endpointsLabels are the labels of svc's Endpoints: the service's own, plus the headless
// marker for a service without a virtual IP, plus managed-by. Labels someone put on the
// Endpoints object itself do not survive a write.
func endpointsLabels(svc *corev1.Service) map[string]string {
	labels := make(map[string]string, len(svc.Labels)+2)
	maps.Copy(labels, svc.Labels)
	if serviceIPSet(svc) {
		delete(labels, corev1.IsHeadlessService)
	} else {
		labels[corev1.IsHeadlessService] = ""
	}
	labels[LabelManagedBy] = ControllerName
	return labels
}

// labelsUpToDate reports whether stored labels need no rewrite for svc: managed-by is ours
// and every other label is the service's, and the other way round. The headless marker is
// not compared (it only changes with the ClusterIP, which does not change). Kubernetes
// compares the service's labels including the two reserved keys, so a service that carries
// one of them itself has its Endpoints rewritten on every sync; here reserved keys are left
// out on both sides.
func labelsUpToDate(stored map[string]string, svc *corev1.Service) bool {
	if stored[LabelManagedBy] != ControllerName {
		return false
	}
	return maps.EqualFunc(withoutReserved(stored), withoutReserved(svc.Labels), func(a, b string) bool { return a == b })
}

func withoutReserved(labels map[string]string) map[string]string {
	out := maps.Clone(labels)
	delete(out, corev1.IsHeadlessService)
	delete(out, LabelManagedBy)
	return out
}

// plan decides the write that brings svc's Endpoints to subsets (canonical, untruncated):
// the object to create (current nil) or update, or nil when current already says it all.
//
// Current is the stored object from the cache and is not modified; an update starts from a
// copy of it, so annotations and fields the controller does not own survive. An update is
// needed when the (truncated) subsets differ in meaning, the labels are wrong, or the
// over-capacity annotation does not match whether truncation happened. The trigger time
// alone never causes a write; when there is one, it is written (zero removes it).
//
// Kubernetes compares the untruncated subsets, so a truncated object is rewritten on every
// sync; comparing what would actually be written avoids that.
func plan(svc *corev1.Service, current *corev1.Endpoints, subsets []corev1.EndpointSubset, triggerTime time.Time) *corev1.Endpoints {
	kept, truncated := truncateSubsets(subsets, maxAddresses)
	if current != nil &&
		equalSubsets(current.Subsets, kept) &&
		labelsUpToDate(current.Labels, svc) &&
		overCapacityUpToDate(current.Annotations, truncated) {
		return nil
	}

	var next *corev1.Endpoints
	if current != nil {
		next = current.DeepCopy()
	} else {
		next = &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace}}
	}
	next.Subsets = kept
	next.Labels = endpointsLabels(svc)
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	if triggerTime.IsZero() {
		delete(next.Annotations, corev1.EndpointsLastChangeTriggerTime)
	} else {
		next.Annotations[corev1.EndpointsLastChangeTriggerTime] = triggerTime.UTC().Format(time.RFC3339Nano)
	}
	if truncated {
		next.Annotations[corev1.EndpointsOverCapacity] = overCapacityTruncated
	} else {
		delete(next.Annotations, corev1.EndpointsOverCapacity)
	}
	if len(next.Annotations) == 0 {
		next.Annotations = nil
	}
	return next
}

// overCapacityUpToDate: a truncated object says so with the annotation, any other carries no
// such annotation at all.
func overCapacityUpToDate(annotations map[string]string, truncated bool) bool {
	v, ok := annotations[corev1.EndpointsOverCapacity]
	if truncated {
		return v == overCapacityTruncated
	}
	return !ok
}
