package registry

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The workload controllers: ReplicationController (core/v1) and apps/v1's ReplicaSet, Deployment
// and DaemonSet. Each owns pods through a selector and stamps them from a pod template.

var specPath = field.NewPath("spec")

var replicaColumns = columns(
	Column("Desired", "integer", 0, "Number of desired pods."),
	Column("Current", "integer", 0, "Number of pods created."),
	Column("Ready", "integer", 0, "Number of ready pods."),
	AgeColumn,
	Column("Containers", "string", 1, "Names of each container in the template."),
	Column("Images", "string", 1, "Images referenced by each container in the template."),
	Column("Selector", "string", 1, "Label query over the pods the controller owns."),
)

var replicationControllers = &Def[*corev1.ReplicationController]{
	Info: Info{GroupVersion: coreV1, Resource: "replicationcontrollers", Singular: "replicationcontroller", Kind: "ReplicationController",
		ShortNames: []string{"rc"}, Categories: []string{"all"}, Namespaced: true, Status: true, Scale: true},
	NewList: func() runtime.Object { return &corev1.ReplicationControllerList{} },
	Defaults: func(rc *corev1.ReplicationController) {
		// The template's labels stand in for a missing selector and missing labels of the controller.
		if t := rc.Spec.Template; t != nil {
			if len(t.Labels) > 0 && len(rc.Spec.Selector) == 0 {
				rc.Spec.Selector = maps.Clone(t.Labels)
			}
			if len(t.Labels) > 0 && len(rc.Labels) == 0 {
				rc.Labels = maps.Clone(t.Labels)
			}
			defaultPodSpec(&t.Spec)
		}
		if rc.Spec.Replicas == nil {
			rc.Spec.Replicas = new(int32(1))
		}
	},
	Validate: func(rc *corev1.ReplicationController) field.ErrorList {
		var errs field.ErrorList
		if len(rc.Spec.Selector) == 0 {
			errs = append(errs, field.Required(specPath.Child("selector"), ""))
		}
		errs = append(errs, metav1validation.ValidateLabels(rc.Spec.Selector, specPath.Child("selector"))...)
		errs = append(errs, nonNegative(deref(rc.Spec.Replicas), specPath.Child("replicas"))...)
		errs = append(errs, nonNegative(rc.Spec.MinReadySeconds, specPath.Child("minReadySeconds"))...)
		return append(errs, validateTemplate(rc.Spec.Template, labels.SelectorFromSet(rc.Spec.Selector), "ReplicationController", specPath.Child("template"))...)
	},
	Fields: func(rc *corev1.ReplicationController) fields.Set {
		return fields.Set{"status.replicas": strconv.Itoa(int(rc.Status.Replicas))}
	},
	Columns: replicaColumns,
	Row: func(rc *corev1.ReplicationController) []any {
		var names, images string
		if rc.Spec.Template != nil {
			names, images = containerCells(rc.Spec.Template.Spec.Containers)
		}
		return []any{int64(deref(rc.Spec.Replicas)), int64(rc.Status.Replicas), int64(rc.Status.ReadyReplicas), Age(rc.CreationTimestamp),
			names, images, labels.FormatLabels(rc.Spec.Selector)}
	},
}

var replicaSets = &Def[*appsv1.ReplicaSet]{
	Info: Info{GroupVersion: appsV1, Resource: "replicasets", Singular: "replicaset", Kind: "ReplicaSet",
		ShortNames: []string{"rs"}, Categories: []string{"all"}, Namespaced: true, Status: true, Scale: true},
	NewList: func() runtime.Object { return &appsv1.ReplicaSetList{} },
	Defaults: func(rs *appsv1.ReplicaSet) {
		if rs.Spec.Replicas == nil {
			rs.Spec.Replicas = new(int32(1))
		}
		defaultPodSpec(&rs.Spec.Template.Spec)
	},
	Validate: func(rs *appsv1.ReplicaSet) field.ErrorList {
		// Kubernetes names the kind "deployment" in this message for replica sets too.
		sel, errs := validateSelector(rs.Spec.Selector, "deployment")
		errs = append(errs, nonNegative(deref(rs.Spec.Replicas), specPath.Child("replicas"))...)
		errs = append(errs, nonNegative(rs.Spec.MinReadySeconds, specPath.Child("minReadySeconds"))...)
		return append(errs, validateTemplate(&rs.Spec.Template, sel, "ReplicaSet", specPath.Child("template"))...)
	},
	ValidateUpdate: func(rs, old *appsv1.ReplicaSet) field.ErrorList {
		return selectorUpdate(rs.Spec.Selector, old.Spec.Selector)
	},
	Fields: func(rs *appsv1.ReplicaSet) fields.Set {
		return fields.Set{"status.replicas": strconv.Itoa(int(rs.Status.Replicas))}
	},
	Columns: replicaColumns,
	Row: func(rs *appsv1.ReplicaSet) []any {
		names, images := containerCells(rs.Spec.Template.Spec.Containers)
		return []any{int64(deref(rs.Spec.Replicas)), int64(rs.Status.Replicas), int64(rs.Status.ReadyReplicas), Age(rs.CreationTimestamp),
			names, images, metav1.FormatLabelSelector(rs.Spec.Selector)}
	},
}

var deployments = &Def[*appsv1.Deployment]{
	Info: Info{GroupVersion: appsV1, Resource: "deployments", Singular: "deployment", Kind: "Deployment",
		ShortNames: []string{"deploy"}, Categories: []string{"all"}, Namespaced: true, Status: true, Scale: true},
	NewList:  func() runtime.Object { return &appsv1.DeploymentList{} },
	Defaults: defaultDeployment,
	Validate: validateDeployment,
	ValidateUpdate: func(d, old *appsv1.Deployment) field.ErrorList {
		return selectorUpdate(d.Spec.Selector, old.Spec.Selector)
	},
	Columns: columns(
		Column("Ready", "string", 0, "Number of the pod with ready state"),
		Column("Up-to-date", "string", 0, "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
		Column("Available", "string", 0, "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
		AgeColumn,
		replicaColumns[4], replicaColumns[5], replicaColumns[6],
	),
	Row: func(d *appsv1.Deployment) []any {
		names, images := containerCells(d.Spec.Template.Spec.Containers)
		selector := "<invalid>"
		if s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
			selector = s.String()
		}
		return []any{fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, deref(d.Spec.Replicas)), int64(d.Status.UpdatedReplicas),
			int64(d.Status.AvailableReplicas), Age(d.CreationTimestamp), names, images, selector}
	},
}

func defaultDeployment(d *appsv1.Deployment) {
	s := &d.Spec
	if s.Replicas == nil {
		s.Replicas = new(int32(1))
	}
	s.Strategy.Type = or(s.Strategy.Type, appsv1.RollingUpdateDeploymentStrategyType)
	if s.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if s.Strategy.RollingUpdate == nil {
			s.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		ru := s.Strategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = new(intstr.FromString("25%"))
		}
		if ru.MaxSurge == nil {
			ru.MaxSurge = new(intstr.FromString("25%"))
		}
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = new(int32(10))
	}
	if s.ProgressDeadlineSeconds == nil {
		s.ProgressDeadlineSeconds = new(int32(600))
	}
	defaultPodSpec(&s.Template.Spec)
}

func validateDeployment(d *appsv1.Deployment) field.ErrorList {
	s := &d.Spec
	sel, errs := validateSelector(s.Selector, "deployment")
	errs = append(errs, nonNegative(deref(s.Replicas), specPath.Child("replicas"))...)
	errs = append(errs, validateTemplate(&s.Template, sel, "ReplicaSet", specPath.Child("template"))...)
	sp := specPath.Child("strategy")
	errs = append(errs, oneOf(s.Strategy.Type, sp.Child("type"), appsv1.RecreateDeploymentStrategyType, appsv1.RollingUpdateDeploymentStrategyType)...)
	switch ru := s.Strategy.RollingUpdate; s.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if ru != nil {
			errs = append(errs, field.Forbidden(sp.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		if ru == nil {
			errs = append(errs, field.Required(sp.Child("rollingUpdate"), "this should be defaulted and never be nil"))
		} else {
			errs = append(errs, validateRollingBounds(ru.MaxUnavailable, ru.MaxSurge, sp.Child("rollingUpdate"))...)
		}
	}
	if s.RevisionHistoryLimit != nil {
		errs = append(errs, nonNegative(*s.RevisionHistoryLimit, specPath.Child("revisionHistoryLimit"))...)
	}
	errs = append(errs, nonNegative(s.MinReadySeconds, specPath.Child("minReadySeconds"))...)
	if pds := s.ProgressDeadlineSeconds; pds != nil {
		if *pds <= s.MinReadySeconds {
			errs = append(errs, field.Invalid(specPath.Child("progressDeadlineSeconds"), *pds, "must be greater than minReadySeconds"))
		}
	}
	return errs
}

var daemonSets = &Def[*appsv1.DaemonSet]{
	Info: Info{GroupVersion: appsV1, Resource: "daemonsets", Singular: "daemonset", Kind: "DaemonSet",
		ShortNames: []string{"ds"}, Categories: []string{"all"}, Namespaced: true, Status: true},
	NewList:  func() runtime.Object { return &appsv1.DaemonSetList{} },
	Defaults: defaultDaemonSet,
	// The template generation annotation counts the changes of the pod template, as
	// Kubernetes' apiserver keeps it (its internal spec.templateGeneration, written out as this
	// annotation): 1 on create unless the client set a greater one, then one more for each
	// update that changes the template, whatever a client writes. The daemonset controller
	// labels its pods with it.
	Create: func(ds *appsv1.DaemonSet) {
		if n, err := strconv.ParseInt(ds.Annotations[appsv1.DeprecatedTemplateGeneration], 10, 64); err != nil || n < 1 {
			setTemplateGeneration(ds, 1)
		}
	},
	KeepOnUpdate: func(ds, old *appsv1.DaemonSet) {
		n, err := strconv.ParseInt(old.Annotations[appsv1.DeprecatedTemplateGeneration], 10, 64)
		if err != nil || n < 1 {
			n = 1
		}
		defaulted := ds.DeepCopy()
		defaultDaemonSet(defaulted)
		if !apiequality.Semantic.DeepEqual(defaulted.Spec.Template, old.Spec.Template) {
			n++
		}
		setTemplateGeneration(ds, n)
	},
	ValidateCreate: func(ds *appsv1.DaemonSet) field.ErrorList {
		if v, ok := ds.Annotations[appsv1.DeprecatedTemplateGeneration]; ok {
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				return field.ErrorList{field.Invalid(field.NewPath("metadata", "annotations").Key(appsv1.DeprecatedTemplateGeneration), v, "must be an integer")}
			}
		}
		return nil
	},
	Validate: func(ds *appsv1.DaemonSet) field.ErrorList {
		s := &ds.Spec
		sel, errs := validateSelector(s.Selector, "daemonset")
		errs = append(errs, validateTemplate(&s.Template, sel, "DaemonSet", specPath.Child("template"))...)
		up := specPath.Child("updateStrategy")
		errs = append(errs, oneOf(s.UpdateStrategy.Type, up.Child("type"), appsv1.OnDeleteDaemonSetStrategyType, appsv1.RollingUpdateDaemonSetStrategyType)...)
		if ru := s.UpdateStrategy.RollingUpdate; ru != nil && s.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
			errs = append(errs, validateRollingBounds(ru.MaxUnavailable, ru.MaxSurge, up.Child("rollingUpdate"))...)
		}
		if s.RevisionHistoryLimit != nil {
			errs = append(errs, nonNegative(*s.RevisionHistoryLimit, specPath.Child("revisionHistoryLimit"))...)
		}
		return append(errs, nonNegative(s.MinReadySeconds, specPath.Child("minReadySeconds"))...)
	},
	ValidateUpdate: func(ds, old *appsv1.DaemonSet) field.ErrorList {
		return selectorUpdate(ds.Spec.Selector, old.Spec.Selector)
	},
	Columns: columns(
		Column("Desired", "integer", 0, "The total number of nodes that should be running the daemon pod."),
		Column("Current", "integer", 0, "The number of nodes that are running at least one daemon pod and are supposed to."),
		Column("Ready", "integer", 0, "The number of nodes that should be running the daemon pod and have one or more of it running and ready."),
		Column("Up-to-date", "integer", 0, "The total number of nodes that are running the updated daemon pod."),
		Column("Available", "integer", 0, "The number of nodes that should be running the daemon pod and have one or more of it running and available."),
		Column("Node Selector", "string", 0, "Labels a node must have to run the daemon pod."),
		AgeColumn,
		replicaColumns[4], replicaColumns[5], replicaColumns[6],
	),
	Row: func(ds *appsv1.DaemonSet) []any {
		st := ds.Status
		names, images := containerCells(ds.Spec.Template.Spec.Containers)
		return []any{int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
			int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable), labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector),
			Age(ds.CreationTimestamp), names, images, metav1.FormatLabelSelector(ds.Spec.Selector)}
	},
}

func defaultDaemonSet(ds *appsv1.DaemonSet) {
	us := &ds.Spec.UpdateStrategy
	us.Type = or(us.Type, appsv1.RollingUpdateDaemonSetStrategyType)
	if us.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if us.RollingUpdate == nil {
			us.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if us.RollingUpdate.MaxUnavailable == nil {
			us.RollingUpdate.MaxUnavailable = new(intstr.FromInt32(1))
		}
		if us.RollingUpdate.MaxSurge == nil {
			us.RollingUpdate.MaxSurge = new(intstr.FromInt32(0))
		}
	}
	if ds.Spec.RevisionHistoryLimit == nil {
		ds.Spec.RevisionHistoryLimit = new(int32(10))
	}
	defaultPodSpec(&ds.Spec.Template.Spec)
}

func setTemplateGeneration(ds *appsv1.DaemonSet, n int64) {
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[appsv1.DeprecatedTemplateGeneration] = strconv.FormatInt(n, 10)
}

// controllerRevisions are the history of DaemonSets and StatefulSets: each holds a patch
// that sets its owner's pod template, and a revision number; kubectl rollout history and undo
// read them.
var controllerRevisions = &Def[*appsv1.ControllerRevision]{
	Info: Info{GroupVersion: appsV1, Resource: "controllerrevisions", Singular: "controllerrevision",
		Kind: "ControllerRevision", Namespaced: true},
	NewList: func() runtime.Object { return &appsv1.ControllerRevisionList{} },
	Validate: func(r *appsv1.ControllerRevision) field.ErrorList {
		var errs field.ErrorList
		if r.Data.Raw == nil && r.Data.Object == nil {
			errs = append(errs, field.Required(field.NewPath("data"), "data is mandatory"))
		}
		return append(errs, nonNegative(r.Revision, field.NewPath("revision"))...)
	},
	ValidateUpdate: func(r, old *appsv1.ControllerRevision) field.ErrorList {
		if !apiequality.Semantic.DeepEqual(r.Data, old.Data) {
			return immutable(r.Data, field.NewPath("data"))
		}
		return nil
	},
	// A revision has no spec: every change counts for its generation.
	SpecChanged: func(r, old *appsv1.ControllerRevision) bool {
		return r.Revision != old.Revision || !apiequality.Semantic.DeepEqual(r.Data, old.Data)
	},
	Columns: columns(
		Column("Controller", "string", 0, "Controller of the object."),
		Column("Revision", "string", 0, "Revision indicates the revision of the state represented by Data."),
		AgeColumn,
	),
	Row: func(r *appsv1.ControllerRevision) []any {
		owner := "<none>"
		if ref := metav1.GetControllerOfNoCopy(r); ref != nil {
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err == nil {
				owner = strings.ToLower(ref.Kind)
				if gv.Group != "" {
					owner += "." + gv.Group
				}
				owner += "/" + ref.Name
			}
		}
		return []any{owner, r.Revision, Age(r.CreationTimestamp)}
	},
}

// validateSelector checks an apps/v1 selector at spec.selector: required, non-empty, well formed.
// It returns the parsed selector for matching the template, nil when there is none to match.
func validateSelector(s *metav1.LabelSelector, kind string) (labels.Selector, field.ErrorList) {
	p := specPath.Child("selector")
	if s == nil {
		return nil, field.ErrorList{field.Required(p, "")}
	}
	errs := metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, p)
	if len(s.MatchLabels)+len(s.MatchExpressions) == 0 {
		errs = append(errs, field.Invalid(p, s, "empty selector is invalid for "+kind))
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, append(errs, field.Invalid(p, s, "invalid label selector"))
	}
	return sel, errs
}

// selectorUpdate keeps apps/v1 selectors fixed: changing one would orphan the pods already owned.
func selectorUpdate(s, old *metav1.LabelSelector) field.ErrorList {
	if !apiequality.Semantic.DeepEqual(s, old) {
		return immutable(s, specPath.Child("selector"))
	}
	return nil
}

// validateRollingBounds checks maxUnavailable and maxSurge: counts or percentages that cannot
// both be zero, or a rollout could never make progress.
func validateRollingBounds(maxUnavailable, maxSurge *intstr.IntOrString, p *field.Path) field.ErrorList {
	up := p.Child("maxUnavailable")
	unavailable, errs := intOrPercent(maxUnavailable, up)
	surge, surgeErrs := intOrPercent(maxSurge, p.Child("maxSurge"))
	errs = append(errs, surgeErrs...)
	if len(errs) > 0 {
		return errs
	}
	if maxUnavailable != nil && maxUnavailable.Type == intstr.String && unavailable > 100 {
		errs = append(errs, field.Invalid(up, maxUnavailable.StrVal, "must not be greater than 100%"))
	}
	if unavailable == 0 && surge == 0 {
		errs = append(errs, field.Invalid(up, intstr.ValueOrDefault(maxUnavailable, intstr.FromInt32(0)).String(), "may not be 0 when `maxSurge` is 0"))
	}
	return errs
}
