package registry

import (
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// rbac.authorization.k8s.io/v1: Roles, ClusterRoles and their bindings are stored, defaulted
// and validated as Kubernetes does, and served to the clients that read them. Nothing enforces
// them yet: kplane has no authorizer, so every authenticated request is allowed whatever the
// bindings say, and writes of roles and bindings get none of Kubernetes' escalation checks
// (one may bind or grant what one does not hold). No controller fills in the rules of a
// ClusterRole with an aggregationRule either.

var rbacV1 = rbacv1.SchemeGroupVersion

// createdAtColumn is the column of roles' and cluster roles' tables, which show the creation
// time itself rather than an age.
var createdAtColumn = metav1.TableColumnDefinition{Name: "Created At", Type: "date",
	Description: "The time the object was created."}

func createdAt(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }

var roles = &Def[*rbacv1.Role]{
	Info:           Info{GroupVersion: rbacV1, Resource: "roles", Singular: "role", Kind: "Role", Namespaced: true},
	NewList:        func() runtime.Object { return &rbacv1.RoleList{} },
	NameValidation: path.ValidatePathSegmentName,
	Validate: func(r *rbacv1.Role) field.ErrorList {
		return validatePolicyRules(r.Rules, true)
	},
	Columns: columns(createdAtColumn),
	Row:     func(r *rbacv1.Role) []any { return []any{createdAt(r.CreationTimestamp)} },
}

var clusterRoles = &Def[*rbacv1.ClusterRole]{
	Info:           Info{GroupVersion: rbacV1, Resource: "clusterroles", Singular: "clusterrole", Kind: "ClusterRole"},
	NewList:        func() runtime.Object { return &rbacv1.ClusterRoleList{} },
	NameValidation: path.ValidatePathSegmentName,
	ValidateCreate: func(r *rbacv1.ClusterRole) field.ErrorList { return validateAggregationRule(r.AggregationRule, false) },
	ValidateUpdate: func(r, old *rbacv1.ClusterRole) field.ErrorList {
		// Selectors stored before label values were checked may stay as they are.
		return validateAggregationRule(r.AggregationRule, aggregationHasInvalidLabelValue(old.AggregationRule))
	},
	Validate: func(r *rbacv1.ClusterRole) field.ErrorList { return validatePolicyRules(r.Rules, false) },
	Columns:  columns(createdAtColumn),
	Row:      func(r *rbacv1.ClusterRole) []any { return []any{createdAt(r.CreationTimestamp)} },
}

var roleBindings = &Def[*rbacv1.RoleBinding]{
	Info:           Info{GroupVersion: rbacV1, Resource: "rolebindings", Singular: "rolebinding", Kind: "RoleBinding", Namespaced: true},
	NewList:        func() runtime.Object { return &rbacv1.RoleBindingList{} },
	NameValidation: path.ValidatePathSegmentName,
	Defaults:       func(b *rbacv1.RoleBinding) { defaultBinding(&b.RoleRef, b.Subjects) },
	Validate: func(b *rbacv1.RoleBinding) field.ErrorList {
		return validateBinding(b.RoleRef, b.Subjects, true)
	},
	ValidateUpdate: func(b, old *rbacv1.RoleBinding) field.ErrorList { return roleRefUnchanged(b.RoleRef, old.RoleRef) },
	Columns:        bindingColumns("roleBinding"),
	Row:            func(b *rbacv1.RoleBinding) []any { return bindingRow(b.RoleRef, b.Subjects, b.CreationTimestamp) },
}

var clusterRoleBindings = &Def[*rbacv1.ClusterRoleBinding]{
	Info: Info{GroupVersion: rbacV1, Resource: "clusterrolebindings", Singular: "clusterrolebinding",
		Kind: "ClusterRoleBinding"},
	NewList:        func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
	NameValidation: path.ValidatePathSegmentName,
	Defaults:       func(b *rbacv1.ClusterRoleBinding) { defaultBinding(&b.RoleRef, b.Subjects) },
	Validate: func(b *rbacv1.ClusterRoleBinding) field.ErrorList {
		return validateBinding(b.RoleRef, b.Subjects, false)
	},
	ValidateUpdate: func(b, old *rbacv1.ClusterRoleBinding) field.ErrorList {
		return roleRefUnchanged(b.RoleRef, old.RoleRef)
	},
	Columns: bindingColumns("clusterRoleBinding"),
	Row: func(b *rbacv1.ClusterRoleBinding) []any {
		return bindingRow(b.RoleRef, b.Subjects, b.CreationTimestamp)
	},
}

// rbacResources are the RBAC API's four resources.
func rbacResources() []Strategy {
	return []Strategy{clusterRoleBindings, clusterRoles, roleBindings, roles}
}

func bindingColumns(kind string) []metav1.TableColumnDefinition {
	return columns(
		Column("Role", "string", 0, "The role the binding grants."),
		AgeColumn,
		Column("Users", "string", 1, "Users in the "+kind),
		Column("Groups", "string", 1, "Groups in the "+kind),
		Column("ServiceAccounts", "string", 1, "ServiceAccounts in the "+kind),
	)
}

func bindingRow(ref rbacv1.RoleRef, subjects []rbacv1.Subject, created metav1.Time) []any {
	var users, groups, accounts []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			accounts = append(accounts, s.Namespace+"/"+s.Name)
		}
	}
	return []any{ref.Kind + "/" + ref.Name, Age(created),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(accounts, ", ")}
}

// defaultBinding fills the API groups a manifest may leave out: the role's is always RBAC's,
// a user's or group's too, a service account's is the core group.
func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	ref.APIGroup = or(ref.APIGroup, rbacv1.GroupName)
	for i := range subjects {
		if s := &subjects[i]; s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

// validatePolicyRules checks a role's rules: each names verbs, and either resources (with
// their API groups) or, in cluster roles only, non-resource URLs, never both.
func validatePolicyRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		p := field.NewPath("rules").Index(i)
		if len(r.Verbs) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(r.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(r.APIGroups) > 0 || len(r.Resources) > 0 || len(r.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(r.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(r.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

func validateAggregationRule(rule *rbacv1.AggregationRule, allowInvalidValues bool) field.ErrorList {
	if rule == nil {
		return nil
	}
	p := field.NewPath("aggregationRule", "clusterRoleSelectors")
	if len(rule.ClusterRoleSelectors) == 0 {
		return field.ErrorList{field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil")}
	}
	var errs field.ErrorList
	opts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: allowInvalidValues}
	for i := range rule.ClusterRoleSelectors {
		errs = append(errs, metav1validation.ValidateLabelSelector(&rule.ClusterRoleSelectors[i], opts, p.Index(i))...)
	}
	return errs
}

func aggregationHasInvalidLabelValue(rule *rbacv1.AggregationRule) bool {
	if rule == nil {
		return false
	}
	for i := range rule.ClusterRoleSelectors {
		if metav1validation.LabelSelectorHasInvalidLabelValue(&rule.ClusterRoleSelectors[i]) {
			return true
		}
	}
	return false
}

// validateBinding checks a binding's role reference (a RoleBinding may name a Role or a
// ClusterRole, a ClusterRoleBinding only a ClusterRole) and its subjects.
func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(p.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !slices.Contains(kinds, ref.Kind) {
		errs = append(errs, field.NotSupported(p.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		errs = append(errs, msgs(p.Child("name"), ref.Name, path.ValidatePathSegmentName(ref.Name, false))...)
	}
	for i, s := range subjects {
		errs = append(errs, validateSubject(s, namespaced, field.NewPath("subjects").Index(i))...)
	}
	return errs
}

func validateSubject(s rbacv1.Subject, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			errs = append(errs, dnsSubdomain(s.Name, p.Child("name"))...)
		}
		if s.APIGroup != "" {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		// A RoleBinding's service account defaults to the binding's namespace at authorization
		// time; a ClusterRoleBinding has none to fall back on.
		if !namespaced && s.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.APIGroup != rbacv1.GroupName {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return errs
}

// roleRefUnchanged: a binding's role is fixed at creation, so that what a binding grants
// cannot be swapped under the subjects' feet; a new role takes a new binding.
func roleRefUnchanged(ref, old rbacv1.RoleRef) field.ErrorList {
	if ref != old {
		return field.ErrorList{field.Invalid(field.NewPath("roleRef"), ref, "cannot change roleRef")}
	}
	return nil
}
