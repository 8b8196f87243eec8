package registry

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// scheduling.k8s.io: PriorityClasses. kplane's scheduler does not preempt, but pods get their
// priority from the class they name (pods.go's admission, as Kubernetes' Priority plugin), and
// the two system classes exist from the start (SystemPriorityClasses, created at bootstrap).

var schedulingV1 = schedulingv1.SchemeGroupVersion

var priorityClassesResource = schema.GroupResource{Group: schedulingv1.GroupName, Resource: "priorityclasses"}

// Priority bounds, as Kubernetes defines them: user classes go up to a billion, the values above
// belong to the system classes.
const (
	highestUserPriority       = 1000000000
	systemPriorityClassPrefix = "system-"
)

// SystemPriorityClasses are the classes every Kubernetes cluster has; the API server creates them.
func SystemPriorityClasses() []*schedulingv1.PriorityClass {
	class := func(name string, value int32, description string) *schedulingv1.PriorityClass {
		pc := &schedulingv1.PriorityClass{Value: value, Description: description}
		pc.Name = name
		return pc
	}
	return []*schedulingv1.PriorityClass{
		class("system-node-critical", 2*highestUserPriority+1000, "Used for system critical pods that must not be moved from their current node."),
		class("system-cluster-critical", 2*highestUserPriority, "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
	}
}

func schedulingResources() []Strategy { return []Strategy{priorityClasses} }

var priorityClasses = &Def[*schedulingv1.PriorityClass]{
	Info: Info{GroupVersion: schedulingV1, Resource: "priorityclasses", Singular: "priorityclass", Kind: "PriorityClass",
		ShortNames: []string{"pc"}},
	NewList: func() runtime.Object { return &schedulingv1.PriorityClassList{} },
	Defaults: func(pc *schedulingv1.PriorityClass) {
		if pc.PreemptionPolicy == nil {
			pc.PreemptionPolicy = new(corev1.PreemptLowerPriority)
		}
	},
	// Kubernetes counts generation 1 for a class and never more: nothing in it may change that matters.
	SpecChanged:   func(_, _ *schedulingv1.PriorityClass) bool { return false },
	AdmitValidate: admitPriorityClass,
	Validate:      validatePriorityClass,
	ValidateUpdate: func(pc, old *schedulingv1.PriorityClass) field.ErrorList {
		var errs field.ErrorList
		if pc.Value != old.Value {
			errs = append(errs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
		}
		if deref(pc.PreemptionPolicy) != deref(old.PreemptionPolicy) {
			errs = append(errs, immutable(pc.PreemptionPolicy, field.NewPath("preemptionPolicy"))...)
		}
		return errs
	},
	Columns: columns(
		Column("Value", "integer", 0, "The priority pods of this class get."),
		Column("Global-Default", "boolean", 0, "Whether pods without a class get this one."),
		AgeColumn,
		Column("PreemptionPolicy", "string", 0, "Whether pods of this class preempt lower-priority pods."),
	),
	Row: func(pc *schedulingv1.PriorityClass) []any {
		return []any{int64(pc.Value), pc.GlobalDefault, Age(pc.CreationTimestamp), string(deref(pc.PreemptionPolicy))}
	},
}

func validatePriorityClass(pc *schedulingv1.PriorityClass) field.ErrorList {
	var errs field.ErrorList
	if strings.HasPrefix(pc.Name, systemPriorityClassPrefix) {
		if err := knownSystemPriorityClass(pc); err != nil {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "name"),
				"priority class names with '"+systemPriorityClassPrefix+"' prefix are reserved for system use only. error: "+err.Error()))
		}
	} else if pc.Value > highestUserPriority {
		errs = append(errs, field.Forbidden(field.NewPath("value"), fmt.Sprintf("maximum allowed value of a user defined priority is %d", highestUserPriority)))
	}
	if pc.PreemptionPolicy != nil {
		errs = append(errs, listed(*pc.PreemptionPolicy, field.NewPath("preemptionPolicy"), corev1.PreemptLowerPriority, corev1.PreemptNever)...)
	}
	return errs
}

// knownSystemPriorityClass reports why a class named system-… is not one of the system classes.
func knownSystemPriorityClass(pc *schedulingv1.PriorityClass) error {
	for _, sys := range SystemPriorityClasses() {
		if sys.Name != pc.Name {
			continue
		}
		if sys.Value != pc.Value {
			return fmt.Errorf("value of %s PriorityClass must be %d", sys.Name, sys.Value)
		}
		if pc.GlobalDefault {
			return fmt.Errorf("globalDefault of %s PriorityClass must be false", sys.Name)
		}
		return nil
	}
	return fmt.Errorf("%s is not a known system priority class", pc.Name)
}

// admitPriorityClass keeps the global default unique, as Kubernetes' Priority admission does.
func admitPriorityClass(ctx context.Context, objs Objects, pc, old *schedulingv1.PriorityClass) error {
	if !pc.GlobalDefault {
		return nil
	}
	stored, err := objs.List(ctx, priorityClassesResource)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	for _, o := range stored {
		if other := o.(*schedulingv1.PriorityClass); other.GlobalDefault && other.Name != pc.Name {
			return apierrors.NewForbidden(priorityClassesResource, pc.Name,
				fmt.Errorf("PriorityClass %s is already marked as default. Only one default can exist", other.Name))
		}
	}
	return nil
}

// admitPodPriority gives a new pod the priority and preemption policy of its class, or of the
// global default class when it names none, as Kubernetes' Priority admission does; a pod may
// not name a class that does not exist or state a priority other than its class's. Updates
// keep what creation set.
func admitPodPriority(ctx context.Context, objs Objects, p, old *corev1.Pod) error {
	if old != nil {
		if p.Spec.Priority == nil {
			p.Spec.Priority = old.Spec.Priority
		}
		if p.Spec.PreemptionPolicy == nil {
			p.Spec.PreemptionPolicy = old.Spec.PreemptionPolicy
		}
		return nil
	}
	forbidden := func(format string, args ...any) error {
		return apierrors.NewForbidden(podsResource, p.Name, fmt.Errorf(format, args...))
	}
	pc, err := podPriorityClass(ctx, objs, p.Spec.PriorityClassName)
	switch {
	case apierrors.IsNotFound(err):
		return forbidden("no PriorityClass with name %s was found", p.Spec.PriorityClassName)
	case err != nil:
		return apierrors.NewInternalError(err)
	}
	// Without a class (and no default one), priority 0 preempting lower priorities.
	value, policy := int32(0), corev1.PreemptLowerPriority
	if pc != nil {
		p.Spec.PriorityClassName, value = pc.Name, pc.Value
		policy = or(deref(pc.PreemptionPolicy), policy)
	}
	if p.Spec.Priority != nil && *p.Spec.Priority != value {
		return forbidden("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", *p.Spec.Priority, value)
	}
	if p.Spec.PreemptionPolicy != nil && *p.Spec.PreemptionPolicy != policy {
		return forbidden("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", *p.Spec.PreemptionPolicy, policy)
	}
	p.Spec.Priority, p.Spec.PreemptionPolicy = &value, &policy
	return nil
}

// podPriorityClass is the class named, or with no name the global default class of the lowest
// value (nil when there is none).
func podPriorityClass(ctx context.Context, objs Objects, name string) (*schedulingv1.PriorityClass, error) {
	if name != "" {
		o, err := objs.Get(ctx, priorityClassesResource, "", name)
		if err != nil {
			return nil, err
		}
		return o.(*schedulingv1.PriorityClass), nil
	}
	stored, err := objs.List(ctx, priorityClassesResource)
	if err != nil {
		return nil, err
	}
	var def *schedulingv1.PriorityClass
	for _, o := range stored {
		if pc := o.(*schedulingv1.PriorityClass); pc.GlobalDefault && (def == nil || pc.Value < def.Value) {
			def = pc
		}
	}
	return def, nil
}
