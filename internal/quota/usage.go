package quota

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Lister returns the objects of one resource in a namespace.
type Lister func(namespace string) ([]runtime.Object, error)

// Calculate counts what the objects of a namespace use of the resources hard names, within the
// quota's scopes (spec), as the resource quota controller recounts a quota: for every resource
// listers can list, the objects in the quota's scopes are summed with that resource's
// evaluator. Names no lister's evaluator accounts for are left out (their usage is unknown);
// so are the names of a resource whose list failed, whose error is returned with the rest.
func Calculate(namespace string, spec *corev1.ResourceQuotaSpec, hard corev1.ResourceList, listers map[schema.GroupResource]Lister, now time.Time) (corev1.ResourceList, error) {
	names := Names(hard)
	scopes := ScopeSelectors(spec)
	resources := make([]schema.GroupResource, 0, len(listers))
	for gr := range listers {
		resources = append(resources, gr)
	}
	slices.SortFunc(resources, func(a, b schema.GroupResource) int { return strings.Compare(a.String(), b.String()) })
	used := corev1.ResourceList{}
	var counted []corev1.ResourceName
	var errs []error
	for _, gr := range resources {
		if Ignored(gr) {
			continue
		}
		e := For(gr)
		mine := e.Matching(names)
		if len(mine) == 0 {
			continue
		}
		objs, err := listers[gr](namespace)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to list %s: %w", gr, err))
			continue
		}
		sum := corev1.ResourceList{}
		for _, n := range mine {
			sum[n] = zero()
		}
		for _, obj := range objs {
			if !inScopes(e, scopes, obj) {
				continue
			}
			u, err := e.Usage(obj, now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			sum = Add(sum, Mask(u, mine))
		}
		used = Add(used, sum)
		counted = append(counted, mine...)
	}
	return Mask(used, counted), errors.Join(errs...)
}

// inScopes reports whether obj falls in every scope; a scope that cannot be evaluated (a
// selector stored before validation refused it) leaves the object out.
func inScopes(e Evaluator, scopes []corev1.ScopedResourceSelectorRequirement, obj runtime.Object) bool {
	for _, sel := range scopes {
		ok, err := e.MatchesScope(sel, obj)
		if err != nil || !ok {
			return false
		}
	}
	return true
}
