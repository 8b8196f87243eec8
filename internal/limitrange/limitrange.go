// Package limitrange applies a namespace's LimitRanges to pods and PersistentVolumeClaims as
// Kubernetes v1.36's LimitRanger admission plugin does: containers that do not say their
// requests or limits get the Container-type defaults (default, defaultRequest), then every
// container, every pod as a whole and every claim's storage must keep within the ranges' min,
// max and maxLimitRequestRatio. The functions are pure: the apiserver reads the ranges and
// turns a refusal into 403 Forbidden.
package limitrange

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kplane/kplane/internal/podresources"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// Annotation records on a pod which defaults it was given.
const Annotation = "kubernetes.io/limit-ranger"

// DefaultItem fills a Container-type item's defaults as Kubernetes does when it decodes one: a
// missing default limit is the max, a missing default request the default limit, else the min.
func DefaultItem(item *corev1.LimitRangeItem) {
	if item.Type != corev1.LimitTypeContainer {
		return
	}
	if item.Default == nil {
		item.Default = corev1.ResourceList{}
	}
	if item.DefaultRequest == nil {
		item.DefaultRequest = corev1.ResourceList{}
	}
	fill := func(dst, src corev1.ResourceList) {
		for name, q := range src {
			if _, ok := dst[name]; !ok {
				dst[name] = q.DeepCopy()
			}
		}
	}
	fill(item.Default, item.Max)
	fill(item.DefaultRequest, item.Default)
	fill(item.DefaultRequest, item.Min)
}

// sorted returns the ranges by name, the order they are applied in, so that a pod gets the
// same defaults and the same refusal whatever order the store lists them in.
func sorted(ranges []*corev1.LimitRange) []*corev1.LimitRange {
	out := slices.Clone(ranges)
	slices.SortFunc(out, func(a, b *corev1.LimitRange) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ApplyDefaults gives the containers of pod the requests and limits they lack from each
// range's Container-type defaults, and records what it set in the kubernetes.io/limit-ranger
// annotation (the last range that set something writes it, as in Kubernetes). It reports
// whether it changed the pod.
func ApplyDefaults(pod *corev1.Pod, ranges []*corev1.LimitRange) bool {
	changed := false
	for _, lr := range sorted(ranges) {
		requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypeContainer {
				continue
			}
			for n, q := range item.DefaultRequest {
				requests[n] = q.DeepCopy()
			}
			for n, q := range item.Default {
				limits[n] = q.DeepCopy()
			}
		}
		if len(requests) == 0 && len(limits) == 0 {
			continue
		}
		var notes []string
		for i := range pod.Spec.Containers {
			notes = fillContainer(&pod.Spec.Containers[i], requests, limits, "container", notes)
		}
		for i := range pod.Spec.InitContainers {
			notes = fillContainer(&pod.Spec.InitContainers[i], requests, limits, "init container", notes)
		}
		if len(notes) > 0 {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[Annotation] = "LimitRanger plugin set: " + strings.Join(notes, "; ")
			changed = true
		}
	}
	return changed
}

// fillContainer sets the requests and limits c lacks and appends notes saying which.
func fillContainer(c *corev1.Container, requests, limits corev1.ResourceList, what string, notes []string) []string {
	fill := func(dst *corev1.ResourceList, src corev1.ResourceList) []string {
		var set []string
		for n, q := range src {
			if _, ok := (*dst)[n]; ok {
				continue
			}
			if *dst == nil {
				*dst = corev1.ResourceList{}
			}
			(*dst)[n] = q.DeepCopy()
			set = append(set, string(n))
		}
		sort.Strings(set)
		return set
	}
	if set := fill(&c.Resources.Requests, requests); len(set) > 0 {
		notes = append(notes, fmt.Sprintf("%s request for %s %s", strings.Join(set, ", "), what, c.Name))
	}
	if set := fill(&c.Resources.Limits, limits); len(set) > 0 {
		notes = append(notes, fmt.Sprintf("%s limit for %s %s", strings.Join(set, ", "), what, c.Name))
	}
	return notes
}

// CheckPod returns why pod breaks a range, or nil: the first range (by name) it breaks, with
// every limit of that range it breaks (one message, or several in brackets).
func CheckPod(pod *corev1.Pod, ranges []*corev1.LimitRange) error {
	for _, lr := range sorted(ranges) {
		if err := checkPod(pod, lr); err != nil {
			return err
		}
	}
	return nil
}

func checkPod(pod *corev1.Pod, lr *corev1.LimitRange) error {
	var errs []error
	check := func(kind corev1.LimitType, item *corev1.LimitRangeItem, requests, limits corev1.ResourceList) {
		for _, n := range names(item.Min) {
			errs = appendErr(errs, minimum(kind, n, item.Min[n], requests, limits))
		}
		for _, n := range names(item.Max) {
			errs = appendErr(errs, maximum(kind, n, item.Max[n], requests, limits))
		}
		for _, n := range names(item.MaxLimitRequestRatio) {
			errs = appendErr(errs, ratio(kind, n, item.MaxLimitRequestRatio[n], requests, limits))
		}
	}
	for i := range lr.Spec.Limits {
		item := &lr.Spec.Limits[i]
		switch item.Type {
		case corev1.LimitTypeContainer:
			for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
				for _, c := range cs {
					check(item.Type, item, c.Resources.Requests, c.Resources.Limits)
				}
			}
		case corev1.LimitTypePod:
			requests, limits := podTotals(pod)
			check(item.Type, item, requests, limits)
		}
	}
	return utilerrors.NewAggregate(errs)
}

// podTotals sums a pod's requests and limits as LimitRanger does: like the scheduler, but
// without the pod's overhead and with only cpu and memory taken from pod-level resources.
func podTotals(pod *corev1.Pod) (requests, limits corev1.ResourceList) {
	p := *pod
	p.Spec.Overhead = nil
	if r := pod.Spec.Resources; r != nil {
		only := func(l corev1.ResourceList) corev1.ResourceList {
			out := corev1.ResourceList{}
			for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if q, ok := l[n]; ok {
					out[n] = q
				}
			}
			return out
		}
		p.Spec.Resources = &corev1.ResourceRequirements{Requests: only(r.Requests), Limits: only(r.Limits)}
	}
	limits, _, _ = podresources.Limits(&p)
	return podresources.Requests(&p), limits
}

// CheckClaim returns why a claim's requested storage breaks a range's
// PersistentVolumeClaim-type min or max, or nil. Claims get no defaults: their storage is
// required anyway.
func CheckClaim(claim *corev1.PersistentVolumeClaim, ranges []*corev1.LimitRange) error {
	for _, lr := range sorted(ranges) {
		var errs []error
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypePersistentVolumeClaim {
				continue
			}
			for _, n := range names(item.Min) {
				errs = appendErr(errs, minimum(item.Type, n, item.Min[n], claim.Spec.Resources.Requests, nil))
			}
			for _, n := range names(item.Max) {
				errs = appendErr(errs, maximumRequest(item.Type, n, item.Max[n], claim.Spec.Resources.Requests))
			}
		}
		if err := utilerrors.NewAggregate(errs); err != nil {
			return err
		}
	}
	return nil
}

func names(l corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func appendErr(errs []error, err error) []error {
	if err != nil {
		return append(errs, err)
	}
	return errs
}

// samePrecision returns request, limit and bound as integers of one precision: thousandths where
// none overflows, whole units otherwise.
func samePrecision(request, limit, bound resource.Quantity) (r, l, b int64) {
	r, l, b = request.Value(), limit.Value(), bound.Value()
	if r <= resource.MaxMilliValue && l <= resource.MaxMilliValue && b <= resource.MaxMilliValue {
		r, l, b = request.MilliValue(), limit.MilliValue(), bound.MilliValue()
	}
	return r, l, b
}

// The messages below are Kubernetes' (two spaces before "No ..." included), which users and
// tests written against real clusters match on.

func minimum(kind corev1.LimitType, n corev1.ResourceName, bound resource.Quantity, requests, limits corev1.ResourceList) error {
	req, hasReq := requests[n]
	lim, hasLim := limits[n]
	r, l, b := samePrecision(req, lim, bound)
	switch {
	case !hasReq:
		return fmt.Errorf("minimum %s usage per %s is %s.  No request is specified", n, kind, bound.String())
	case r < b:
		return fmt.Errorf("minimum %s usage per %s is %s, but request is %s", n, kind, bound.String(), req.String())
	case hasLim && l < b:
		return fmt.Errorf("minimum %s usage per %s is %s, but limit is %s", n, kind, bound.String(), lim.String())
	}
	return nil
}

func maximum(kind corev1.LimitType, n corev1.ResourceName, bound resource.Quantity, requests, limits corev1.ResourceList) error {
	req, hasReq := requests[n]
	lim, hasLim := limits[n]
	r, l, b := samePrecision(req, lim, bound)
	switch {
	case !hasLim:
		return fmt.Errorf("maximum %s usage per %s is %s.  No limit is specified", n, kind, bound.String())
	case l > b:
		return fmt.Errorf("maximum %s usage per %s is %s, but limit is %s", n, kind, bound.String(), lim.String())
	case hasReq && r > b:
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", n, kind, bound.String(), req.String())
	}
	return nil
}

// maximumRequest bounds a request alone: claims have no limits.
func maximumRequest(kind corev1.LimitType, n corev1.ResourceName, bound resource.Quantity, requests corev1.ResourceList) error {
	req, hasReq := requests[n]
	r, _, b := samePrecision(req, resource.Quantity{}, bound)
	switch {
	case !hasReq:
		return fmt.Errorf("maximum %s usage per %s is %s.  No request is specified", n, kind, bound.String())
	case r > b:
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", n, kind, bound.String(), req.String())
	}
	return nil
}

func ratio(kind corev1.LimitType, n corev1.ResourceName, bound resource.Quantity, requests, limits corev1.ResourceList) error {
	req, hasReq := requests[n]
	lim, hasLim := limits[n]
	r, l, _ := samePrecision(req, lim, bound)
	if !hasReq || r == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no request is specified or request is 0", n, kind, bound.String())
	}
	if !hasLim || l == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no limit is specified or limit is 0", n, kind, bound.String())
	}
	observed := float64(l) / float64(r)
	shown, allowed := observed, float64(bound.Value())
	if bound.Value() <= resource.MaxMilliValue {
		observed, allowed = observed*1000, float64(bound.MilliValue())
	}
	if observed > allowed {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but provided ratio is %f", n, kind, bound.String(), shown)
	}
	return nil
}
