package endpointslice

import (
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ControllerName is the managed-by label value of the slices this controller owns; slices with
// another value belong to someone else and are never touched.
const ControllerName = "endpointslice-controller.k8s.io"

// isReservedLabel reports whether a label key is the controller's to set on slices, whatever
// the Service's own labels say.
func isReservedLabel(key string) bool {
	return key == discoveryv1.LabelServiceName || key == discoveryv1.LabelManagedBy || key == corev1.IsHeadlessService
}

// sliceLabels returns the labels a slice of svc should have, and whether its current labels
// differ from them in a way that calls for a write. Only the labels copied from the Service are
// compared: the reserved ones are what the slice was found by (service name, managed-by) or
// follow the ClusterIP, which never changes for a live Service.
func sliceLabels(current map[string]string, svc *corev1.Service) (map[string]string, bool) {
	have := map[string]string{}
	for k, v := range current {
		if !isReservedLabel(k) {
			have[k] = v
		}
	}
	want := map[string]string{}
	for k, v := range svc.Labels {
		if !isReservedLabel(k) {
			want[k] = v
		}
	}
	changed := !maps.Equal(have, want)
	if !hasClusterIP(svc) {
		want[corev1.IsHeadlessService] = ""
	}
	want[discoveryv1.LabelServiceName] = svc.Name
	want[discoveryv1.LabelManagedBy] = ControllerName
	return want, changed
}

// reservedLabelProblems notes each reserved label a Service carries: it is ignored on slices.
func reservedLabelProblems(svc *corev1.Service, probs problems) {
	for k, v := range svc.Labels {
		if isReservedLabel(k) {
			probs.add("label/"+svc.Namespace+"/"+svc.Name+"/"+k,
				fmt.Sprintf("service %s/%s uses the reserved EndpointSlice label %s=%q; it is not copied to its slices", svc.Namespace, svc.Name, k, v))
		}
	}
}

// ownerRef is the controller reference a slice of svc carries, so that the garbage collector
// removes the slices with the Service.
func ownerRef(svc *corev1.Service) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         "v1",
		Kind:               "Service",
		Name:               svc.Name,
		UID:                svc.UID,
		Controller:         new(true),
		BlockOwnerDeletion: new(true),
	}
}

// ownedBy reports whether a slice names svc (this very object, by UID) among its owners. A
// slice left by an earlier Service of the same name is not owned and is never reused.
func ownedBy(s *discoveryv1.EndpointSlice, svc *corev1.Service) bool {
	for _, o := range s.OwnerReferences {
		if o.UID == svc.UID && o.Kind == "Service" && o.APIVersion == "v1" {
			return true
		}
	}
	return false
}

// newSlice returns an empty slice of svc for the given ports and address type, named by the
// server from the Service's name.
func newSlice(svc *corev1.Service, ports []discoveryv1.EndpointPort, at discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	labels, _ := sliceLabels(nil, svc)
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    namePrefix(svc.Name),
			Namespace:       svc.Namespace,
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef(svc)},
		},
		AddressType: at,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
}

// namePrefix is "<service>-", or the bare name when the dash would make it invalid.
func namePrefix(service string) string {
	if p := service + "-"; len(apimachineryvalidation.NameIsDNSSubdomain(p, true)) == 0 {
		return p
	}
	return service
}

// placeholderFor is the slice a Service with no endpoints of an address type still gets, so that
// readers can tell "no endpoints" from "not processed yet".
func placeholderFor(svc *corev1.Service, at discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	return newSlice(svc, []discoveryv1.EndpointPort{}, at)
}

// samePlaceholder reports whether an existing slice is the placeholder p already: same
// namespace, labels, owners, address type, and neither ports nor endpoints. Other metadata
// (name, annotations, resourceVersion) does not matter.
func samePlaceholder(existing, p *discoveryv1.EndpointSlice) bool {
	return existing.Namespace == p.Namespace &&
		maps.Equal(existing.Labels, p.Labels) &&
		apiequality.Semantic.DeepEqual(existing.OwnerReferences, p.OwnerReferences) &&
		existing.AddressType == p.AddressType &&
		len(existing.Ports) == 0 && len(p.Ports) == 0 &&
		len(existing.Endpoints) == 0 && len(p.Endpoints) == 0
}

// setTriggerTime records on a slice about to be written when the change that caused the write
// happened; a zero time removes a stale value.
func setTriggerTime(s *discoveryv1.EndpointSlice, t time.Time) {
	if t.IsZero() {
		delete(s.Annotations, corev1.EndpointsLastChangeTriggerTime)
		return
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = t.UTC().Format(time.RFC3339Nano)
}
