package registry

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var namespaces = &Def[*corev1.Namespace]{
	Info: Info{GroupVersion: coreV1, Resource: "namespaces", Singular: "namespace", Kind: "Namespace",
		ShortNames: []string{"ns"}, Status: true},
	NewList:        func() runtime.Object { return &corev1.NamespaceList{} },
	NameValidation: apimachineryvalidation.ValidateNamespaceName,
	Defaults: func(ns *corev1.Namespace) {
		// The name label lets selectors (network policies, webhooks) pick namespaces by name.
		if ns.Name != "" {
			if ns.Labels == nil {
				ns.Labels = map[string]string{}
			}
			ns.Labels[corev1.LabelMetadataName] = ns.Name
		}
		ns.Status.Phase = or(ns.Status.Phase, corev1.NamespaceActive)
	},
	Create: func(ns *corev1.Namespace) {
		// The namespace controller removes this finalizer once the namespace's content is gone.
		if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
			ns.Spec.Finalizers = append(ns.Spec.Finalizers, corev1.FinalizerKubernetes)
		}
	},
	KeepOnUpdate: func(ns, old *corev1.Namespace) {
		ns.Spec.Finalizers = old.Spec.Finalizers
	},
	Validate: func(ns *corev1.Namespace) field.ErrorList {
		var errs field.ErrorList
		for i, f := range ns.Spec.Finalizers {
			errs = append(errs, apimachineryvalidation.ValidateFinalizerName(string(f), field.NewPath("spec", "finalizers").Index(i))...)
		}
		return append(errs, oneOf(ns.Status.Phase, field.NewPath("status", "phase"), corev1.NamespaceActive, corev1.NamespaceTerminating)...)
	},
	Fields: func(ns *corev1.Namespace) fields.Set {
		// "name" is a historical alias Kubernetes still accepts.
		return fields.Set{"status.phase": string(ns.Status.Phase), "name": ns.Name}
	},
	Columns: columns(Column("Status", "string", 0, "The status of the namespace"), AgeColumn),
	Row: func(ns *corev1.Namespace) []any {
		return []any{string(ns.Status.Phase), Age(ns.CreationTimestamp)}
	},
}
