package registry

import (
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// node.k8s.io: RuntimeClasses. kplane's node agent runs every pod the same way; the class is
// stored and validated so that manifests naming one apply, but no handler is selected by it.

func nodeResources() []Strategy { return []Strategy{runtimeClasses} }

var runtimeClasses = &Def[*nodev1.RuntimeClass]{
	Info:     Info{GroupVersion: nodev1.SchemeGroupVersion, Resource: "runtimeclasses", Singular: "runtimeclass", Kind: "RuntimeClass"},
	NewList:  func() runtime.Object { return &nodev1.RuntimeClassList{} },
	Validate: validateRuntimeClass,
	ValidateUpdate: func(rc, old *nodev1.RuntimeClass) field.ErrorList {
		if rc.Handler != old.Handler {
			return immutable(rc.Handler, field.NewPath("handler"))
		}
		return nil
	},
	Columns: columns(Column("Handler", "string", 0, "The container runtime handler of the class."), AgeColumn),
	Row:     func(rc *nodev1.RuntimeClass) []any { return []any{rc.Handler, Age(rc.CreationTimestamp)} },
}

func validateRuntimeClass(rc *nodev1.RuntimeClass) field.ErrorList {
	errs := requiredLabel(rc.Handler, field.NewPath("handler"))
	if o := rc.Overhead; o != nil {
		// Kubernetes checks the overhead as a container's limits, and names it so.
		p := field.NewPath("overhead", "limits")
		for name, q := range o.PodFixed {
			errs = append(errs, containerResourceName(name, p.Key(string(name)))...)
			errs = append(errs, nonNegativeQty(q, p.Key(string(name)))...)
		}
	}
	if s := rc.Scheduling; s != nil {
		p := field.NewPath("scheduling")
		errs = append(errs, metav1validation.ValidateLabels(s.NodeSelector, p.Child("nodeSelector"))...)
		seen := map[corev1.Toleration]bool{}
		for i, t := range s.Tolerations {
			tp := p.Child("tolerations").Index(i)
			errs = append(errs, validateToleration(t, tp)...)
			errs = append(errs, unique(seen, corev1.Toleration{Key: t.Key, Operator: t.Operator, Value: t.Value, Effect: t.Effect}, tp, t)...)
		}
	}
	return errs
}
