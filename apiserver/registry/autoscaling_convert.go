package registry

import (
	"encoding/json"
	"maps"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// HorizontalPodAutoscalers are stored as autoscaling/v2 and also served as autoscaling/v1, whose
// spec has only a CPU utilization target. What v1 cannot say travels in annotations, as in
// Kubernetes, so that a v1 client that reads an object and writes it back loses nothing: the
// metrics other than CPU utilization, the behavior, the current metrics and the conditions.
// Their content is Kubernetes' own (JSON of the v1 metric and condition types; the behavior in
// the field names of Kubernetes' internal types), so that clients reading them agree.
const (
	// HPAMetricsAnnotation holds the spec's metrics other than CPU utilization, on v1 objects.
	HPAMetricsAnnotation = "autoscaling.alpha.kubernetes.io/metrics"
	// HPACurrentMetricsAnnotation holds every current metric, on v1 objects.
	HPACurrentMetricsAnnotation = "autoscaling.alpha.kubernetes.io/current-metrics"
	// HPAConditionsAnnotation holds the status conditions, on v1 objects.
	HPAConditionsAnnotation = "autoscaling.alpha.kubernetes.io/conditions"
	// HPABehaviorAnnotation holds spec.behavior, on v1 objects.
	HPABehaviorAnnotation = "autoscaling.alpha.kubernetes.io/behavior"
	// The tolerance annotations are never written (the behavior annotation carries the
	// tolerances) but are dropped with the others, as Kubernetes does.
	hpaScaleDownToleranceAnnotation = "autoscaling.alpha.kubernetes.io/scale-down-tolerance"
	hpaScaleUpToleranceAnnotation   = "autoscaling.alpha.kubernetes.io/scale-up-tolerance"
)

// defaultCPUUtilization is the target of the CPU metric an HPA without metrics gets.
const defaultCPUUtilization = 80

var hpaRoundTripAnnotations = []string{HPAMetricsAnnotation, HPACurrentMetricsAnnotation, HPAConditionsAnnotation,
	HPABehaviorAnnotation, hpaScaleDownToleranceAnnotation, hpaScaleUpToleranceAnnotation}

// hpaStatusAnnotations are the round-trip annotations that belong to the status.
var hpaStatusAnnotations = []string{HPACurrentMetricsAnnotation, HPAConditionsAnnotation}

// dropHPAAnnotations returns annotations without the round-trip ones (a copy when it removes
// any; nil when nothing is left).
func dropHPAAnnotations(in map[string]string) map[string]string {
	found := false
	for _, k := range hpaRoundTripAnnotations {
		if _, ok := in[k]; ok {
			found = true
		}
	}
	if !found {
		return in
	}
	out := maps.Clone(in)
	for _, k := range hpaRoundTripAnnotations {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// behaviorJSON is the layout of the behavior annotation: Kubernetes writes its internal type
// there, whose fields have no JSON names, so every key is the Go field name and every field is
// present (null when unset). Reading is case-insensitive, as encoding/json's is.
type behaviorJSON struct {
	ScaleUp   *rulesJSON
	ScaleDown *rulesJSON
}

type rulesJSON struct {
	StabilizationWindowSeconds *int32
	SelectPolicy               *autoscalingv2.ScalingPolicySelect
	Policies                   []policyJSON
	Tolerance                  *resource.Quantity
}

type policyJSON struct {
	Type          autoscalingv2.HPAScalingPolicyType
	Value         int32
	PeriodSeconds int32
}

func rulesToJSON(r *autoscalingv2.HPAScalingRules) *rulesJSON {
	if r == nil {
		return nil
	}
	out := &rulesJSON{StabilizationWindowSeconds: r.StabilizationWindowSeconds, SelectPolicy: r.SelectPolicy, Tolerance: r.Tolerance}
	if r.Policies != nil {
		out.Policies = make([]policyJSON, 0, len(r.Policies)) // an empty list stays one: [] is not null
	}
	for _, p := range r.Policies {
		out.Policies = append(out.Policies, policyJSON(p))
	}
	return out
}

func rulesFromJSON(r *rulesJSON) *autoscalingv2.HPAScalingRules {
	if r == nil {
		return nil
	}
	out := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: r.StabilizationWindowSeconds, SelectPolicy: r.SelectPolicy, Tolerance: r.Tolerance}
	if r.Policies != nil {
		out.Policies = make([]autoscalingv2.HPAScalingPolicy, 0, len(r.Policies))
	}
	for _, p := range r.Policies {
		out.Policies = append(out.Policies, autoscalingv2.HPAScalingPolicy(p))
	}
	return out
}

// HPAToV1 converts a stored autoscaling/v2 HorizontalPodAutoscaler to its autoscaling/v1 form.
func HPAToV1(in *autoscalingv2.HorizontalPodAutoscaler) *autoscalingv1.HorizontalPodAutoscaler {
	in = in.DeepCopy()
	out := &autoscalingv1.HorizontalPodAutoscaler{
		ObjectMeta: in.ObjectMeta,
		Spec: autoscalingv1.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1.CrossVersionObjectReference(in.Spec.ScaleTargetRef),
			MinReplicas:    in.Spec.MinReplicas,
			MaxReplicas:    in.Spec.MaxReplicas,
		},
		Status: autoscalingv1.HorizontalPodAutoscalerStatus{
			ObservedGeneration: in.Status.ObservedGeneration,
			LastScaleTime:      in.Status.LastScaleTime,
			CurrentReplicas:    in.Status.CurrentReplicas,
			DesiredReplicas:    in.Status.DesiredReplicas,
		},
	}
	// Round-trip annotations found on the stored object are not its own: only those written
	// here describe it. (The map is in's deep copy: changing it changes nothing of the caller's.)
	annotations := dropHPAAnnotations(out.Annotations)
	set := func(key string, v any) {
		data, _ := json.Marshal(v) // these types always marshal
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[key] = string(data)
	}
	var others []autoscalingv1.MetricSpec
	for _, m := range in.Spec.Metrics {
		if isCPUUtilization(m) {
			if out.Spec.TargetCPUUtilizationPercentage == nil {
				out.Spec.TargetCPUUtilizationPercentage = new(*m.Resource.Target.AverageUtilization)
			}
			continue
		}
		others = append(others, metricSpecToV1(m))
	}
	if len(others) > 0 {
		set(HPAMetricsAnnotation, others)
	}
	if len(in.Status.CurrentMetrics) > 0 {
		current := make([]autoscalingv1.MetricStatus, len(in.Status.CurrentMetrics))
		for i, m := range in.Status.CurrentMetrics {
			current[i] = metricStatusToV1(m)
			if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
				m.Resource.Current.AverageUtilization != nil {
				out.Status.CurrentCPUUtilizationPercentage = new(*m.Resource.Current.AverageUtilization)
			}
		}
		set(HPACurrentMetricsAnnotation, current)
	}
	if b := in.Spec.Behavior; b != nil {
		set(HPABehaviorAnnotation, behaviorJSON{ScaleUp: rulesToJSON(b.ScaleUp), ScaleDown: rulesToJSON(b.ScaleDown)})
	}
	if len(in.Status.Conditions) > 0 {
		conds := make([]autoscalingv1.HorizontalPodAutoscalerCondition, len(in.Status.Conditions))
		for i, c := range in.Status.Conditions {
			conds[i] = autoscalingv1.HorizontalPodAutoscalerCondition{Type: autoscalingv1.HorizontalPodAutoscalerConditionType(c.Type),
				Status: c.Status, LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message}
		}
		set(HPAConditionsAnnotation, conds)
	}
	out.Annotations = annotations
	return out
}

// HPAFromV1 converts an autoscaling/v1 HorizontalPodAutoscaler to the stored autoscaling/v2
// form, taking back what its annotations carry. Annotations that do not parse are dropped, as
// in Kubernetes. An HPA with no metric at all gets the 80% CPU target v1 always implied.
func HPAFromV1(in *autoscalingv1.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	in = in.DeepCopy()
	out := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: in.ObjectMeta,
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference(in.Spec.ScaleTargetRef),
			MinReplicas:    in.Spec.MinReplicas,
			MaxReplicas:    in.Spec.MaxReplicas,
		},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{
			ObservedGeneration: in.Status.ObservedGeneration,
			LastScaleTime:      in.Status.LastScaleTime,
			CurrentReplicas:    in.Status.CurrentReplicas,
			DesiredReplicas:    in.Status.DesiredReplicas,
		},
	}
	a := in.Annotations
	var metrics []autoscalingv2.MetricSpec
	if enc, ok := a[HPAMetricsAnnotation]; ok {
		var others []autoscalingv1.MetricSpec
		if json.Unmarshal([]byte(enc), &others) == nil {
			for _, m := range others {
				metrics = append(metrics, metricSpecFromV1(m))
			}
		}
	}
	if t := in.Spec.TargetCPUUtilizationPercentage; t != nil {
		metrics = append(metrics, cpuUtilizationMetric(*t))
	}
	if len(metrics) == 0 {
		metrics = []autoscalingv2.MetricSpec{cpuUtilizationMetric(defaultCPUUtilization)}
	}
	out.Spec.Metrics = metrics
	if enc, ok := a[HPABehaviorAnnotation]; ok {
		var b behaviorJSON
		if json.Unmarshal([]byte(enc), &b) == nil && (b.ScaleUp != nil || b.ScaleDown != nil) {
			out.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: rulesFromJSON(b.ScaleUp), ScaleDown: rulesFromJSON(b.ScaleDown)}
		}
	}
	if u := in.Status.CurrentCPUUtilizationPercentage; u != nil {
		out.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: u}}}}
	}
	if enc, ok := a[HPACurrentMetricsAnnotation]; ok {
		// The annotation has every current metric, with more than the CPU percentage alone.
		var current []autoscalingv1.MetricStatus
		if json.Unmarshal([]byte(enc), &current) == nil {
			out.Status.CurrentMetrics = make([]autoscalingv2.MetricStatus, len(current))
			for i, m := range current {
				out.Status.CurrentMetrics[i] = metricStatusFromV1(m)
			}
		}
	}
	if enc, ok := a[HPAConditionsAnnotation]; ok {
		var conds []autoscalingv1.HorizontalPodAutoscalerCondition
		if json.Unmarshal([]byte(enc), &conds) == nil {
			out.Status.Conditions = make([]autoscalingv2.HorizontalPodAutoscalerCondition, len(conds))
			for i, c := range conds {
				out.Status.Conditions[i] = autoscalingv2.HorizontalPodAutoscalerCondition{Type: autoscalingv2.HorizontalPodAutoscalerConditionType(c.Type),
					Status: c.Status, LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message}
			}
		}
	}
	out.Annotations = dropHPAAnnotations(a)
	return out
}

// isCPUUtilization reports whether m is the kind of metric v1's targetCPUUtilizationPercentage
// says: a CPU Resource metric with a utilization target.
func isCPUUtilization(m autoscalingv2.MetricSpec) bool {
	return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
		m.Resource.Target.AverageUtilization != nil
}

func cpuUtilizationMetric(percent int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(percent)}}}
}

func derefQuantity(q *resource.Quantity) resource.Quantity {
	if q == nil {
		return resource.Quantity{}
	}
	return *q
}

func metricSpecToV1(m autoscalingv2.MetricSpec) autoscalingv1.MetricSpec {
	out := autoscalingv1.MetricSpec{Type: autoscalingv1.MetricSourceType(m.Type)}
	if s := m.Object; s != nil {
		out.Object = &autoscalingv1.ObjectMetricSource{Target: autoscalingv1.CrossVersionObjectReference(s.DescribedObject),
			MetricName: s.Metric.Name, Selector: s.Metric.Selector, TargetValue: derefQuantity(s.Target.Value), AverageValue: s.Target.AverageValue}
	}
	if s := m.Pods; s != nil {
		out.Pods = &autoscalingv1.PodsMetricSource{MetricName: s.Metric.Name, Selector: s.Metric.Selector, TargetAverageValue: derefQuantity(s.Target.AverageValue)}
	}
	if s := m.Resource; s != nil {
		out.Resource = &autoscalingv1.ResourceMetricSource{Name: s.Name, TargetAverageUtilization: s.Target.AverageUtilization, TargetAverageValue: s.Target.AverageValue}
	}
	if s := m.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricSource{Name: s.Name, Container: s.Container,
			TargetAverageUtilization: s.Target.AverageUtilization, TargetAverageValue: s.Target.AverageValue}
	}
	if s := m.External; s != nil {
		out.External = &autoscalingv1.ExternalMetricSource{MetricName: s.Metric.Name, MetricSelector: s.Metric.Selector,
			TargetValue: s.Target.Value, TargetAverageValue: s.Target.AverageValue}
	}
	return out
}

// utilizationOrAverage is the target type v1's resource targets imply: a utilization when one
// is given, else an average value.
func utilizationOrAverage(utilization *int32) autoscalingv2.MetricTargetType {
	if utilization != nil {
		return autoscalingv2.UtilizationMetricType
	}
	return autoscalingv2.AverageValueMetricType
}

func metricSpecFromV1(m autoscalingv1.MetricSpec) autoscalingv2.MetricSpec {
	out := autoscalingv2.MetricSpec{Type: autoscalingv2.MetricSourceType(m.Type)}
	if s := m.Object; s != nil {
		o := &autoscalingv2.ObjectMetricSource{DescribedObject: autoscalingv2.CrossVersionObjectReference(s.Target),
			Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector}}
		if s.AverageValue == nil {
			o.Target = autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: new(s.TargetValue)}
		} else {
			// v1 always carries a value; a zero one beside an average is no value at all.
			o.Target = autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: s.AverageValue}
			if !s.TargetValue.IsZero() {
				o.Target.Value = new(s.TargetValue)
			}
		}
		out.Object = o
	}
	if s := m.Pods; s != nil {
		out.Pods = &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(s.TargetAverageValue)}}
	}
	if s := m.Resource; s != nil {
		out.Resource = &autoscalingv2.ResourceMetricSource{Name: s.Name, Target: autoscalingv2.MetricTarget{
			Type: utilizationOrAverage(s.TargetAverageUtilization), AverageUtilization: s.TargetAverageUtilization, AverageValue: s.TargetAverageValue}}
	}
	if s := m.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{Name: s.Name, Container: s.Container, Target: autoscalingv2.MetricTarget{
			Type: utilizationOrAverage(s.TargetAverageUtilization), AverageUtilization: s.TargetAverageUtilization, AverageValue: s.TargetAverageValue}}
	}
	if s := m.External; s != nil {
		t := autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, Value: s.TargetValue, AverageValue: s.TargetAverageValue}
		if s.TargetValue != nil {
			t.Type = autoscalingv2.ValueMetricType
		}
		out.External = &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.MetricSelector}, Target: t}
	}
	return out
}

func metricStatusToV1(m autoscalingv2.MetricStatus) autoscalingv1.MetricStatus {
	out := autoscalingv1.MetricStatus{Type: autoscalingv1.MetricSourceType(m.Type)}
	if s := m.Object; s != nil {
		out.Object = &autoscalingv1.ObjectMetricStatus{Target: autoscalingv1.CrossVersionObjectReference(s.DescribedObject),
			MetricName: s.Metric.Name, Selector: s.Metric.Selector, CurrentValue: derefQuantity(s.Current.Value), AverageValue: s.Current.AverageValue}
	}
	if s := m.Pods; s != nil {
		out.Pods = &autoscalingv1.PodsMetricStatus{MetricName: s.Metric.Name, Selector: s.Metric.Selector, CurrentAverageValue: derefQuantity(s.Current.AverageValue)}
	}
	if s := m.Resource; s != nil {
		out.Resource = &autoscalingv1.ResourceMetricStatus{Name: s.Name, CurrentAverageUtilization: s.Current.AverageUtilization,
			CurrentAverageValue: derefQuantity(s.Current.AverageValue)}
	}
	if s := m.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricStatus{Name: s.Name, Container: s.Container,
			CurrentAverageUtilization: s.Current.AverageUtilization, CurrentAverageValue: derefQuantity(s.Current.AverageValue)}
	}
	if s := m.External; s != nil {
		out.External = &autoscalingv1.ExternalMetricStatus{MetricName: s.Metric.Name, MetricSelector: s.Metric.Selector,
			CurrentValue: derefQuantity(s.Current.Value), CurrentAverageValue: s.Current.AverageValue}
	}
	return out
}

func metricStatusFromV1(m autoscalingv1.MetricStatus) autoscalingv2.MetricStatus {
	out := autoscalingv2.MetricStatus{Type: autoscalingv2.MetricSourceType(m.Type)}
	if s := m.Object; s != nil {
		out.Object = &autoscalingv2.ObjectMetricStatus{DescribedObject: autoscalingv2.CrossVersionObjectReference(s.Target),
			Metric:  autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Current: autoscalingv2.MetricValueStatus{Value: new(s.CurrentValue), AverageValue: s.AverageValue}}
	}
	if s := m.Pods; s != nil {
		out.Pods = &autoscalingv2.PodsMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.Selector},
			Current: autoscalingv2.MetricValueStatus{AverageValue: new(s.CurrentAverageValue)}}
	}
	if s := m.Resource; s != nil {
		out.Resource = &autoscalingv2.ResourceMetricStatus{Name: s.Name,
			Current: autoscalingv2.MetricValueStatus{AverageUtilization: s.CurrentAverageUtilization, AverageValue: new(s.CurrentAverageValue)}}
	}
	if s := m.ContainerResource; s != nil {
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricStatus{Name: s.Name, Container: s.Container,
			Current: autoscalingv2.MetricValueStatus{AverageUtilization: s.CurrentAverageUtilization, AverageValue: new(s.CurrentAverageValue)}}
	}
	if s := m.External; s != nil {
		out.External = &autoscalingv2.ExternalMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: s.MetricName, Selector: s.MetricSelector},
			Current: autoscalingv2.MetricValueStatus{Value: new(s.CurrentValue), AverageValue: s.CurrentAverageValue}}
	}
	return out
}
