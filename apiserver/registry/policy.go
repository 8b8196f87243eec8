package registry

import (
	"strconv"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// policy/v1: a PodDisruptionBudget bounds how many of the pods it selects voluntary
// disruptions (evictions through pods/eviction) may take down at once. Its spec says how many
// must stay (minAvailable) or may go (maxUnavailable); the disruption controller writes what
// that means now into its status, which the eviction subresource reads and decrements.

var policyV1 = policyv1.SchemeGroupVersion

// unhealthyPodEvictionPolicies are the values spec.unhealthyPodEvictionPolicy takes.
var unhealthyPodEvictionPolicies = []policyv1.UnhealthyPodEvictionPolicyType{policyv1.IfHealthyBudget, policyv1.AlwaysAllow}

var podDisruptionBudgets = &Def[*policyv1.PodDisruptionBudget]{
	Info: Info{GroupVersion: policyV1, Resource: "poddisruptionbudgets", Singular: "poddisruptionbudget",
		Kind: "PodDisruptionBudget", ShortNames: []string{"pdb"}, Namespaced: true, Status: true},
	NewList:  func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} },
	Validate: func(p *policyv1.PodDisruptionBudget) field.ErrorList { return validatePDBSpec(&p.Spec) },
	ValidateCreate: func(p *policyv1.PodDisruptionBudget) field.ErrorList {
		return validatePDBSelector(p.Spec.Selector, false)
	},
	ValidateUpdate: func(p, old *policyv1.PodDisruptionBudget) field.ErrorList {
		// A selector stored before label values were checked may keep its bad values, so that
		// such a budget can still be edited (or its status written) rather than being stuck.
		errs := validatePDBSelector(p.Spec.Selector, metav1validation.LabelSelectorHasInvalidLabelValue(old.Spec.Selector))
		return append(errs, validatePDBStatus(&p.Status)...)
	},
	Columns: columns(
		Column("Min Available", "string", 0, "The minimum number of pods that must be available."),
		Column("Max Unavailable", "string", 0, "The maximum number of pods that may be unavailable."),
		Column("Allowed Disruptions", "integer", 0, "Calculated number of pods that may be disrupted at this time."),
		AgeColumn,
	),
	Row: func(p *policyv1.PodDisruptionBudget) []any {
		return []any{intOrPercentCell(p.Spec.MinAvailable), intOrPercentCell(p.Spec.MaxUnavailable),
			int64(p.Status.DisruptionsAllowed), Age(p.CreationTimestamp)}
	},
}

func intOrPercentCell(v *intstr.IntOrString) string {
	if v == nil {
		return "N/A"
	}
	return v.String()
}

// validatePDBSpec checks the budget's bounds: at most one of them, each a count or a percent
// of at most 100, and a known policy for unhealthy pods.
func validatePDBSpec(s *policyv1.PodDisruptionBudgetSpec) field.ErrorList {
	var errs field.ErrorList
	if s.MinAvailable != nil && s.MaxUnavailable != nil {
		errs = append(errs, field.Invalid(specPath, *s, "minAvailable and maxUnavailable cannot be both set"))
	}
	for _, b := range []struct {
		v    *intstr.IntOrString
		name string
	}{{s.MinAvailable, "minAvailable"}, {s.MaxUnavailable, "maxUnavailable"}} {
		if b.v != nil {
			errs = append(errs, budgetBound(*b.v, specPath.Child(b.name))...)
		}
	}
	if pol := s.UnhealthyPodEvictionPolicy; pol != nil {
		if *pol != policyv1.IfHealthyBudget && *pol != policyv1.AlwaysAllow {
			errs = append(errs, field.NotSupported(specPath.Child("unhealthyPodEvictionPolicy"), *pol, unhealthyPodEvictionPolicies))
		}
	}
	return errs
}

// budgetBound checks one bound the way Kubernetes checks any int-or-percent count: a
// non-negative integer, or a percent string no greater than 100%.
func budgetBound(v intstr.IntOrString, p *field.Path) field.ErrorList {
	switch v.Type {
	case intstr.Int:
		return nonNegative(v.IntVal, p)
	case intstr.String:
		if bad := validation.IsValidPercent(v.StrVal); len(bad) > 0 {
			return msgs(p, v, bad)
		}
		if n, _ := strconv.Atoi(v.StrVal[:len(v.StrVal)-1]); n > 100 {
			return field.ErrorList{field.Invalid(p, v, "must not be greater than 100%")}
		}
		return nil
	}
	return field.ErrorList{field.Invalid(p, v, "must be an integer or percentage (e.g '5%')")}
}

// validatePDBSelector checks spec.selector; a missing one is valid (it selects no pods).
func validatePDBSelector(s *metav1.LabelSelector, allowInvalidValues bool) field.ErrorList {
	return metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{
		AllowInvalidLabelValueInSelector: allowInvalidValues}, specPath.Child("selector"))
}

// validatePDBStatus checks what the disruption controller and the eviction subresource write:
// well-formed conditions and no negative counts.
func validatePDBStatus(s *policyv1.PodDisruptionBudgetStatus) field.ErrorList {
	p := field.NewPath("status")
	errs := metav1validation.ValidateConditions(s.Conditions, p.Child("conditions"))
	errs = append(errs, nonNegative(s.DisruptionsAllowed, p.Child("disruptionsAllowed"))...)
	errs = append(errs, nonNegative(s.CurrentHealthy, p.Child("currentHealthy"))...)
	errs = append(errs, nonNegative(s.DesiredHealthy, p.Child("desiredHealthy"))...)
	return append(errs, nonNegative(s.ExpectedPods, p.Child("expectedPods"))...)
}
