package registry

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// autoscaling: HorizontalPodAutoscalers, served as autoscaling/v2 (the preferred version, the
// one stored) and as autoscaling/v1 over the same objects (autoscaling_convert.go). The rules
// follow Kubernetes v1.36: minReplicas at least 1 (0 needs the alpha HPAScaleToZero gate,
// which kplane does not turn on), maxReplicas at least minReplicas, each metric its one
// source, behavior policies and windows within Kubernetes' bounds. The per-direction tolerance
// of the (beta, on by default) HPAConfigurableTolerance gate is kept and checked.

var (
	autoscalingV2 = autoscalingv2.SchemeGroupVersion
	autoscalingV1 = autoscalingv1.SchemeGroupVersion
)

// Bounds of spec.behavior.
const (
	maxPolicyPeriodSeconds        = 1800
	maxStabilizationWindowSeconds = 3600
)

var hpaInfo = Info{Resource: "horizontalpodautoscalers", Singular: "horizontalpodautoscaler", Kind: "HorizontalPodAutoscaler",
	ShortNames: []string{"hpa"}, Categories: []string{"all"}, Namespaced: true, Status: true}

func withGroupVersion(i Info, gv schema.GroupVersion) Info {
	i.GroupVersion = gv
	return i
}

// horizontalPodAutoscalers is autoscaling/v2, the version objects are stored as.
var horizontalPodAutoscalers = &Def[*autoscalingv2.HorizontalPodAutoscaler]{
	Info:     withGroupVersion(hpaInfo, autoscalingV2),
	NewList:  func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscalerList{} },
	Defaults: defaultHPA,
	Validate: validateHPAStatus,
	ValidateCreate: func(h *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
		return validateHPASpec(&h.Spec, hpaValidationOptions(h, nil))
	},
	ValidateUpdate: func(h, old *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
		return validateHPASpec(&h.Spec, hpaValidationOptions(h, old))
	},
	Columns: hpaColumns,
	Row:     hpaRow,
}

// horizontalPodAutoscalersV1 serves the same objects as autoscaling/v1: each is converted from
// the stored v2 object when read and back when written, so the two versions share one key,
// one resourceVersion and one watch history (StoredAs). Defaults, validation and the table
// are v2's, applied to the converted object, as Kubernetes applies its internal version's.
var horizontalPodAutoscalersV1 = &Def[*autoscalingv1.HorizontalPodAutoscaler]{
	Info:    withGroupVersion(hpaInfo, autoscalingV1),
	NewList: func() runtime.Object { return &autoscalingv1.HorizontalPodAutoscalerList{} },
	// Through v2 and back: the v1 object a write returns is the one a read will give.
	Defaults: func(h *autoscalingv1.HorizontalPodAutoscaler) {
		v2 := HPAFromV1(h)
		defaultHPA(v2)
		*h = *HPAToV1(v2)
	},
	// A new object has no status: neither v1's fields nor what the annotations carry of v2's.
	Create: func(h *autoscalingv1.HorizontalPodAutoscaler) {
		h.Status = autoscalingv1.HorizontalPodAutoscalerStatus{}
		h.Annotations = withAnnotationsOf(h.Annotations, nil, hpaStatusAnnotations)
	},
	// A write of the object keeps the stored status, including its annotations; a write of
	// the status keeps the stored spec, including the metrics and behavior annotations.
	KeepOnUpdate: func(h, old *autoscalingv1.HorizontalPodAutoscaler) {
		h.Annotations = withAnnotationsOf(h.Annotations, old.Annotations, hpaStatusAnnotations)
	},
	PrepareStatus: func(h, old *autoscalingv1.HorizontalPodAutoscaler) {
		h.Annotations = withAnnotationsOf(h.Annotations, old.Annotations, []string{HPAMetricsAnnotation, HPABehaviorAnnotation})
	},
	// The generation counts changes of the v2 spec, which v1 partly keeps in annotations.
	SpecChanged: func(h, old *autoscalingv1.HorizontalPodAutoscaler) bool {
		return !apiequality.Semantic.DeepEqual(HPAFromV1(h).Spec, HPAFromV1(old).Spec)
	},
	Validate: func(h *autoscalingv1.HorizontalPodAutoscaler) field.ErrorList { return validateHPAStatus(HPAFromV1(h)) },
	ValidateCreate: func(h *autoscalingv1.HorizontalPodAutoscaler) field.ErrorList {
		v2 := HPAFromV1(h)
		return validateHPASpec(&v2.Spec, hpaValidationOptions(v2, nil))
	},
	ValidateUpdate: func(h, old *autoscalingv1.HorizontalPodAutoscaler) field.ErrorList {
		v2 := HPAFromV1(h)
		return validateHPASpec(&v2.Spec, hpaValidationOptions(v2, HPAFromV1(old)))
	},
	Columns:  hpaColumns,
	Row:      func(h *autoscalingv1.HorizontalPodAutoscaler) []any { return hpaRow(HPAFromV1(h)) },
	StoredAs: Convert(HPAFromV1, HPAToV1),
}

// withAnnotationsOf returns annotations with the keys taken from from: set to from's values,
// or removed where from has none. The result is a new map when anything changes.
func withAnnotationsOf(annotations, from map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		v, ok := from[k]
		cur, had := annotations[k]
		if ok == had && v == cur {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(annotations)+len(keys))
			for ak, av := range annotations {
				out[ak] = av
			}
		}
		if ok {
			out[k] = v
		} else {
			delete(out, k)
		}
	}
	if out == nil {
		return annotations
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// defaultHPA applies autoscaling/v2's defaults: one replica at least, the 80% CPU target when
// no metric is given, and a behavior given in part completed with the default rules (scale up
// by 4 pods or 100% every 15 s, whichever is more, at once; scale down by up to 100% every
// 15 s, the stabilization window left to the controller's --horizontal-pod-autoscaler-
// downscale-stabilization). Round-trip annotations of the v1 form are never stored.
func defaultHPA(h *autoscalingv2.HorizontalPodAutoscaler) {
	h.Annotations = dropHPAAnnotations(h.Annotations)
	s := &h.Spec
	if s.MinReplicas == nil {
		s.MinReplicas = new(int32(1))
	}
	if len(s.Metrics) == 0 {
		s.Metrics = []autoscalingv2.MetricSpec{cpuUtilizationMetric(defaultCPUUtilization)}
	}
	if b := s.Behavior; b != nil {
		b.ScaleUp = withDefaultRules(b.ScaleUp, DefaultScaleUpRules())
		b.ScaleDown = withDefaultRules(b.ScaleDown, DefaultScaleDownRules())
	}
}

// DefaultScaleUpRules are the scale-up rules of a behavior that gives none: no stabilization,
// and per 15 s up to 4 pods or 100% more, whichever is more.
func DefaultScaleUpRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: new(int32(0)),
		SelectPolicy:               new(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
}

// DefaultScaleDownRules are the scale-down rules of a behavior that gives none: up to 100%
// fewer per 15 s; no stabilization window, which leaves it to the controller's flag.
func DefaultScaleDownRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		SelectPolicy: new(autoscalingv2.MaxChangePolicySelect),
		Policies:     []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}},
	}
}

// withDefaultRules fills what r leaves unset from def.
func withDefaultRules(r, def *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if r == nil {
		return def
	}
	if r.StabilizationWindowSeconds != nil {
		def.StabilizationWindowSeconds = r.StabilizationWindowSeconds
	}
	if r.SelectPolicy != nil {
		def.SelectPolicy = r.SelectPolicy
	}
	if r.Policies != nil {
		def.Policies = r.Policies
	}
	if r.Tolerance != nil {
		def.Tolerance = r.Tolerance
	}
	return def
}

// Validation.

// refRules are the apiVersion rules of one kind of object reference.
type refRules struct {
	allowEmptyGroup, skipAPIVersion bool
}

// hpaRules are the rules an HPA's spec is checked by, which depend on what it was before.
type hpaRules struct {
	minReplicas   int32
	target, other refRules
}

// hpaValidationOptions: an update may keep a minReplicas of 0 it already has (set while the
// alpha gate was on) and a scale target apiVersion it does not change; a ReplicationController
// target needs no API group (the only scalable kind of the core group); the objects of
// Object metrics may be in the core group, and an update keeps their apiVersions unchecked if
// one already failed the check.
func hpaValidationOptions(h, old *autoscalingv2.HorizontalPodAutoscaler) hpaRules {
	o := hpaRules{minReplicas: 1, other: refRules{allowEmptyGroup: true}}
	if old == nil {
		if h.Spec.ScaleTargetRef.Kind == "ReplicationController" {
			o.target.allowEmptyGroup = true
		}
		return o
	}
	if old.Spec.MinReplicas != nil && *old.Spec.MinReplicas == 0 {
		o.minReplicas = 0
	}
	switch t, ot := h.Spec.ScaleTargetRef, old.Spec.ScaleTargetRef; {
	case t.APIVersion == ot.APIVersion && t.Kind == ot.Kind:
		o.target.skipAPIVersion = true
	case t.Kind == "ReplicationController":
		o.target.allowEmptyGroup = true
	}
	for _, m := range old.Spec.Metrics {
		if m.Type == autoscalingv2.ObjectMetricSourceType && m.Object != nil && apiVersionError(m.Object.DescribedObject.APIVersion, o.other) != "" {
			o.other.skipAPIVersion = true
			break
		}
	}
	return o
}

func validateHPASpec(s *autoscalingv2.HorizontalPodAutoscalerSpec, o hpaRules) field.ErrorList {
	var errs field.ErrorList
	if s.MinReplicas != nil && *s.MinReplicas < o.minReplicas {
		errs = append(errs, field.Invalid(specPath.Child("minReplicas"), *s.MinReplicas, fmt.Sprintf("must be greater than or equal to %d", o.minReplicas)))
	}
	switch {
	case s.MaxReplicas == 0:
		errs = append(errs, field.Required(specPath.Child("maxReplicas"), "must be set and greater than 0"))
	case s.MaxReplicas < 0:
		errs = append(errs, field.Invalid(specPath.Child("maxReplicas"), s.MaxReplicas, "must be greater than or equal to 1"))
	}
	if s.MinReplicas != nil && s.MaxReplicas < *s.MinReplicas {
		errs = append(errs, field.Invalid(specPath.Child("maxReplicas"), s.MaxReplicas, "must be greater than or equal to `minReplicas`"))
	}
	errs = append(errs, validateObjectRef(s.ScaleTargetRef, specPath.Child("scaleTargetRef"), o.target)...)
	errs = append(errs, validateMetricSpecs(s.Metrics, s.MinReplicas, o.other)...)
	if b := s.Behavior; b != nil {
		bp := specPath.Child("behavior")
		errs = append(errs, validateScalingRules(b.ScaleUp, bp.Child("scaleUp"))...)
		errs = append(errs, validateScalingRules(b.ScaleDown, bp.Child("scaleDown"))...)
	}
	return errs
}

func validateHPAStatus(h *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	p := field.NewPath("status")
	errs := nonNegative(h.Status.CurrentReplicas, p.Child("currentReplicas"))
	return append(errs, nonNegative(h.Status.DesiredReplicas, p.Child("desiredReplicas"))...)
}

// validateObjectRef checks a reference to another object: a kind and a name that can be path
// segments, and an apiVersion with a group unless the rules allow none.
func validateObjectRef(ref autoscalingv2.CrossVersionObjectReference, p *field.Path, rules refRules) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct{ name, v string }{{"kind", ref.Kind}, {"name", ref.Name}} {
		if f.v == "" {
			errs = append(errs, field.Required(p.Child(f.name), ""))
			continue
		}
		errs = append(errs, msgs(p.Child(f.name), f.v, content.IsPathSegmentName(f.v))...)
	}
	if msg := apiVersionError(ref.APIVersion, rules); msg != "" {
		errs = append(errs, field.Invalid(p.Child("apiVersion"), ref.APIVersion, msg))
	}
	return errs
}

func apiVersionError(apiVersion string, rules refRules) string {
	if rules.skipAPIVersion {
		return ""
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	switch {
	case err != nil:
		return err.Error()
	case gv.Group == "" && !rules.allowEmptyGroup:
		return "apiVersion must specify API group"
	}
	return ""
}

var (
	metricSourceTypes = []autoscalingv2.MetricSourceType{autoscalingv2.ContainerResourceMetricSourceType, autoscalingv2.ExternalMetricSourceType,
		autoscalingv2.ObjectMetricSourceType, autoscalingv2.PodsMetricSourceType, autoscalingv2.ResourceMetricSourceType}
	selectPolicies = []autoscalingv2.ScalingPolicySelect{autoscalingv2.DisabledPolicySelect, autoscalingv2.MaxChangePolicySelect, autoscalingv2.MinChangePolicySelect}
	policyTypes    = []autoscalingv2.HPAScalingPolicyType{autoscalingv2.PercentScalingPolicy, autoscalingv2.PodsScalingPolicy}
)

func validateMetricSpecs(metrics []autoscalingv2.MetricSpec, minReplicas *int32, objects refRules) field.ErrorList {
	var errs field.ErrorList
	p := specPath.Child("metrics")
	scalesFromZero := false
	for i, m := range metrics {
		errs = append(errs, validateMetricSpec(m, p.Index(i), objects)...)
		if m.Type == autoscalingv2.ObjectMetricSourceType || m.Type == autoscalingv2.ExternalMetricSourceType {
			scalesFromZero = true
		}
	}
	// Without pods there is nothing to measure: only a metric of something else can bring
	// the target back from zero.
	if minReplicas != nil && *minReplicas == 0 && !scalesFromZero {
		errs = append(errs, field.Forbidden(p, "must specify at least one Object or External metric to support scaling to zero replicas"))
	}
	return errs
}

// validateMetricSpec checks one metric: a known type whose source, and only that one, is set.
// Of several sources given, only the first (in the order object, external, pods, resource,
// containerResource) is checked further, as in Kubernetes, which also reports an unknown
// type twice.
func validateMetricSpec(m autoscalingv2.MetricSpec, p *field.Path, objects refRules) field.ErrorList {
	var errs field.ErrorList
	if m.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric source type"))
	}
	if !slices.Contains(metricSourceTypes, m.Type) {
		errs = append(errs, field.NotSupported(p.Child("type"), m.Type, metricSourceTypes))
	}
	var present []string
	check := func(name string, set bool, validate func() field.ErrorList) {
		if !set {
			return
		}
		present = append(present, name)
		if len(present) == 1 {
			errs = append(errs, validate()...)
		}
	}
	check("object", m.Object != nil, func() field.ErrorList { return validateObjectSource(m.Object, p.Child("object"), objects) })
	check("external", m.External != nil, func() field.ErrorList { return validateExternalSource(m.External, p.Child("external")) })
	check("pods", m.Pods != nil, func() field.ErrorList { return validatePodsSource(m.Pods, p.Child("pods")) })
	check("resource", m.Resource != nil, func() field.ErrorList { return validateResourceSource(m.Resource, p.Child("resource")) })
	check("containerResource", m.ContainerResource != nil, func() field.ErrorList {
		return validateContainerResourceSource(m.ContainerResource, p.Child("containerResource"))
	})
	expected := ""
	switch m.Type {
	case autoscalingv2.ObjectMetricSourceType:
		expected = "object"
	case autoscalingv2.PodsMetricSourceType:
		expected = "pods"
	case autoscalingv2.ResourceMetricSourceType:
		expected = "resource"
	case autoscalingv2.ExternalMetricSourceType:
		expected = "external"
	case autoscalingv2.ContainerResourceMetricSourceType:
		expected = "containerResource"
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), m.Type, metricSourceTypes))
	}
	if expected != "" && !slices.Contains(present, expected) {
		errs = append(errs, field.Required(p.Child(expected), "must populate information for the given metric source"))
	}
	if len(present) != 1 {
		for _, name := range present {
			if name != expected {
				errs = append(errs, field.Forbidden(p.Child(name), "must populate the given metric source only"))
			}
		}
	}
	return errs
}

func validateObjectSource(s *autoscalingv2.ObjectMetricSource, p *field.Path, objects refRules) field.ErrorList {
	errs := validateObjectRef(s.DescribedObject, p.Child("describedObject"), objects)
	errs = append(errs, validateMetricName(s.Metric, p.Child("metric"))...)
	errs = append(errs, validateMetricTarget(s.Target, p.Child("target"))...)
	if s.Target.Value == nil && s.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value or averageValue"))
	}
	return errs
}

func validateExternalSource(s *autoscalingv2.ExternalMetricSource, p *field.Path) field.ErrorList {
	errs := validateMetricName(s.Metric, p.Child("metric"))
	errs = append(errs, validateMetricTarget(s.Target, p.Child("target"))...)
	if s.Target.Value == nil && s.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value for metric or a per-pod target"))
	}
	if s.Target.Value != nil && s.Target.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("target", "value"), "may not set both a target value for metric and a per-pod target"))
	}
	return errs
}

func validatePodsSource(s *autoscalingv2.PodsMetricSource, p *field.Path) field.ErrorList {
	errs := validateMetricName(s.Metric, p.Child("metric"))
	errs = append(errs, validateMetricTarget(s.Target, p.Child("target"))...)
	if s.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must specify a positive target averageValue"))
	}
	return errs
}

// resourceTarget checks what a Resource or ContainerResource target needs: a utilization or
// an average value, not both.
func resourceTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	errs := validateMetricTarget(t, p)
	if t.AverageUtilization == nil && t.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("averageUtilization"), "must set either a target raw value or a target utilization"))
	}
	if t.AverageUtilization != nil && t.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("averageValue"), "may not set both a target raw value and a target utilization"))
	}
	return errs
}

func validateResourceSource(s *autoscalingv2.ResourceMetricSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "must specify a resource name"))
	}
	return append(errs, resourceTarget(s.Target, p.Child("target"))...)
}

func validateContainerResourceSource(s *autoscalingv2.ContainerResourceMetricSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "must specify a resource name"))
	} else {
		errs = append(errs, containerResourceName(s.Name, p.Child("name"))...)
	}
	if s.Container == "" {
		errs = append(errs, field.Required(p.Child("container"), "must specify a container"))
	} else {
		errs = append(errs, dnsLabel(s.Container, p.Child("container"))...)
	}
	return append(errs, resourceTarget(s.Target, p.Child("target"))...)
}

// The resource names Kubernetes knows without a domain; containers may request only the
// first three (and huge pages).
var (
	containerResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}
	knownResources     = append(slices.Clone(containerResources), corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory,
		corev1.ResourceRequestsEphemeralStorage, corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
		corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers, corev1.ResourceSecrets,
		corev1.ResourceConfigMaps, corev1.ResourcePersistentVolumeClaims, corev1.ResourceStorage, corev1.ResourceRequestsStorage,
		corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers)
)

// containerResourceName checks the resource of a ContainerResource metric: one a container can
// request, or a domain-qualified (extended) name.
func containerResourceName(name corev1.ResourceName, p *field.Path) field.ErrorList {
	s := string(name)
	if errs := msgs(p, name, validation.IsQualifiedName(s)); len(errs) > 0 {
		return errs
	}
	var errs field.ErrorList
	if !strings.Contains(s, "/") {
		if !slices.Contains(knownResources, name) && !strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix+corev1.ResourceHugePagesPrefix) {
			errs = append(errs, field.Invalid(p, name, "must be a standard resource type or fully qualified"))
		}
		if !slices.Contains(containerResources, name) && !strings.HasPrefix(s, corev1.ResourceHugePagesPrefix) {
			errs = append(errs, field.Invalid(p, name, "must be a standard resource for containers"))
		}
		return errs
	}
	native := strings.Contains(s, "kubernetes.io/")
	extended := !native && !strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) &&
		len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+s)) == 0
	if !native && !extended {
		errs = append(errs, field.Invalid(p, name, "doesn't follow extended resource name standard"))
	}
	return errs
}

func validateMetricTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric target type"))
	}
	if t.Type != autoscalingv2.UtilizationMetricType && t.Type != autoscalingv2.ValueMetricType && t.Type != autoscalingv2.AverageValueMetricType {
		errs = append(errs, field.Invalid(p.Child("type"), t.Type, "must be either Utilization, Value, or AverageValue"))
	}
	if t.Value != nil && t.Value.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("value"), t.Value.String(), "must be positive"))
	}
	if t.AverageValue != nil && t.AverageValue.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("averageValue"), t.AverageValue.String(), "must be positive"))
	}
	if t.AverageUtilization != nil && *t.AverageUtilization < 1 {
		errs = append(errs, field.Invalid(p.Child("averageUtilization"), *t.AverageUtilization, "must be greater than 0"))
	}
	return errs
}

func validateMetricName(id autoscalingv2.MetricIdentifier, p *field.Path) field.ErrorList {
	if id.Name == "" {
		return field.ErrorList{field.Required(p.Child("name"), "must specify a metric name")}
	}
	return msgs(p.Child("name"), id.Name, content.IsPathSegmentName(id.Name))
}

func validateScalingRules(r *autoscalingv2.HPAScalingRules, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if w := r.StabilizationWindowSeconds; w != nil {
		if *w < 0 {
			errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w, "must be greater than or equal to zero"))
		}
		if *w > maxStabilizationWindowSeconds {
			errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w, fmt.Sprintf("must be less than or equal to %d", maxStabilizationWindowSeconds)))
		}
	}
	if sp := r.SelectPolicy; sp != nil && !slices.Contains(selectPolicies, *sp) {
		errs = append(errs, field.NotSupported(p.Child("selectPolicy"), *sp, selectPolicies))
	}
	pp := p.Child("policies")
	if len(r.Policies) == 0 {
		errs = append(errs, field.Required(pp, "must specify at least one Policy"))
	}
	for i, pol := range r.Policies {
		ip := pp.Index(i)
		if pol.Type != autoscalingv2.PodsScalingPolicy && pol.Type != autoscalingv2.PercentScalingPolicy {
			errs = append(errs, field.NotSupported(ip.Child("type"), pol.Type, policyTypes))
		}
		if pol.Value <= 0 {
			errs = append(errs, field.Invalid(ip.Child("value"), pol.Value, "must be greater than zero"))
		}
		if pol.PeriodSeconds <= 0 {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.PeriodSeconds, "must be greater than zero"))
		}
		if pol.PeriodSeconds > maxPolicyPeriodSeconds {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.PeriodSeconds, fmt.Sprintf("must be less than or equal to %d", maxPolicyPeriodSeconds)))
		}
	}
	if t := r.Tolerance; t != nil && t.Cmp(resource.Quantity{}) < 0 {
		errs = append(errs, field.Invalid(p.Child("tolerance"), t.String(), "must be greater than or equal to 0"))
	}
	return errs
}

// Table.

var hpaColumns = columns(
	Column("Reference", "string", 0, autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["scaleTargetRef"]),
	Column("Targets", "string", 0, autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["metrics"]),
	Column("MinPods", "string", 0, autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["minReplicas"]),
	Column("MaxPods", "string", 0, autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["maxReplicas"]),
	Column("Replicas", "string", 0, autoscalingv2.HorizontalPodAutoscalerStatus{}.SwaggerDoc()["currentReplicas"]),
	Column("Age", "string", 0, metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]),
)

func hpaRow(h *autoscalingv2.HorizontalPodAutoscaler) []any {
	minPods := "<unset>"
	if h.Spec.MinReplicas != nil {
		minPods = strconv.Itoa(int(*h.Spec.MinReplicas))
	}
	return []any{h.Spec.ScaleTargetRef.Kind + "/" + h.Spec.ScaleTargetRef.Name, HPATargets(h.Spec.Metrics, h.Status.CurrentMetrics),
		minPods, int64(h.Spec.MaxReplicas), int64(h.Status.CurrentReplicas), Age(h.CreationTimestamp)}
}

// HPATargets is the TARGETS cell: each metric's current value against its target ("cpu:
// 40%/80%", "<unknown>" before the first measurement), the first two of them and how many
// more, as kubectl shows it.
func HPATargets(specs []autoscalingv2.MetricSpec, statuses []autoscalingv2.MetricStatus) string {
	if len(specs) == 0 {
		return "<none>"
	}
	const shown = 2
	var list []string
	for i, spec := range specs {
		var st autoscalingv2.MetricStatus
		if i < len(statuses) {
			st = statuses[i]
		}
		list = append(list, metricCell(spec, st))
	}
	if len(list) <= shown {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s + %d more...", strings.Join(list[:shown], ", "), len(list)-shown)
}

func quantityCell(q *resource.Quantity) string {
	if q == nil {
		return "<unknown>"
	}
	return q.String()
}

func percentCell(p *int32, none string) string {
	if p == nil {
		return none
	}
	return fmt.Sprintf("%d%%", *p)
}

func metricCell(spec autoscalingv2.MetricSpec, st autoscalingv2.MetricStatus) string {
	unknown := "<unknown>"
	switch spec.Type {
	case autoscalingv2.ExternalMetricSourceType:
		if spec.External == nil {
			break
		}
		var cur *autoscalingv2.MetricValueStatus
		if st.External != nil {
			cur = &st.External.Current
		}
		if t := spec.External.Target; t.AverageValue != nil {
			return averageCell(cur, t.AverageValue)
		}
		return valueCell(cur, spec.External.Target.Value)
	case autoscalingv2.ObjectMetricSourceType:
		if spec.Object == nil {
			break
		}
		var cur *autoscalingv2.MetricValueStatus
		if st.Object != nil {
			cur = &st.Object.Current
		}
		if t := spec.Object.Target; t.AverageValue != nil {
			return averageCell(cur, t.AverageValue)
		}
		return valueCell(cur, spec.Object.Target.Value)
	case autoscalingv2.PodsMetricSourceType:
		if spec.Pods == nil {
			break
		}
		current := unknown
		if st.Pods != nil {
			current = quantityCell(st.Pods.Current.AverageValue)
		}
		return current + "/" + quantityCell(spec.Pods.Target.AverageValue)
	case autoscalingv2.ResourceMetricSourceType:
		if spec.Resource == nil {
			break
		}
		var cur *autoscalingv2.MetricValueStatus
		if st.Resource != nil {
			cur = &st.Resource.Current
		}
		return resourceCell(string(spec.Resource.Name), spec.Resource.Target, cur)
	case autoscalingv2.ContainerResourceMetricSourceType:
		if spec.ContainerResource == nil {
			break
		}
		var cur *autoscalingv2.MetricValueStatus
		if st.ContainerResource != nil {
			cur = &st.ContainerResource.Current
		}
		return resourceCell(string(spec.ContainerResource.Name), spec.ContainerResource.Target, cur)
	}
	return "<unknown type>"
}

func averageCell(cur *autoscalingv2.MetricValueStatus, target *resource.Quantity) string {
	current := "<unknown>"
	if cur != nil && cur.AverageValue != nil {
		current = cur.AverageValue.String()
	}
	return fmt.Sprintf("%s/%s (avg)", current, target.String())
}

func valueCell(cur *autoscalingv2.MetricValueStatus, target *resource.Quantity) string {
	current := "<unknown>"
	if cur != nil {
		current = quantityCell(cur.Value)
	}
	return current + "/" + quantityCell(target)
}

func resourceCell(name string, target autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	if target.AverageValue != nil {
		current := "<unknown>"
		if cur != nil {
			current = quantityCell(cur.AverageValue)
		}
		return fmt.Sprintf("%s: %s/%s", name, current, target.AverageValue.String())
	}
	current := "<unknown>"
	if cur != nil {
		current = percentCell(cur.AverageUtilization, "<unknown>")
	}
	return fmt.Sprintf("%s: %s/%s", name, current, percentCell(target.AverageUtilization, "<auto>"))
}
