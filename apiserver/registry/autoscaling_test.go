package registry

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newHPA(change func(*autoscalingv2.HorizontalPodAutoscaler)) *autoscalingv2.HorizontalPodAutoscaler {
	h := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: meta("web"), Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		MaxReplicas:    5,
	}}
	if change != nil {
		change(h)
	}
	return h
}

func quantity(s string) *resource.Quantity { return new(resource.MustParse(s)) }

func resourceMetric(name corev1.ResourceName, utilization *int32, average *resource.Quantity) autoscalingv2.MetricSpec {
	t := autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: utilization, AverageValue: average}
	if average != nil {
		t.Type = autoscalingv2.AverageValueMetricType
	}
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: name, Target: t}}
}

func podsMetric(name, average string) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: name},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: quantity(average)}}}
}

// TestHPADefaults: one replica at least and the 80% CPU target when nothing is said; a behavior
// given in part gets the default rules for the rest, the scale-down window left unset for the
// controller's flag.
func TestHPADefaults(t *testing.T) {
	h := newHPA(nil)
	horizontalPodAutoscalers.PrepareCreate(h)
	if deref(h.Spec.MinReplicas) != 1 {
		t.Errorf("minReplicas %v, want 1", h.Spec.MinReplicas)
	}
	if want := []autoscalingv2.MetricSpec{resourceMetric(corev1.ResourceCPU, new(int32(80)), nil)}; !apiequality.Semantic.DeepEqual(h.Spec.Metrics, want) {
		t.Errorf("metrics %+v, want the 80%% CPU target", h.Spec.Metrics)
	}
	if h.Spec.Behavior != nil {
		t.Errorf("behavior %+v, want none", h.Spec.Behavior)
	}
	if errs := horizontalPodAutoscalers.ValidateObject(h, nil); len(errs) > 0 {
		t.Errorf("defaulted HPA invalid: %v", errs)
	}

	h = newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(30))}}
	})
	horizontalPodAutoscalers.PrepareCreate(h)
	up, down := h.Spec.Behavior.ScaleUp, h.Spec.Behavior.ScaleDown
	wantUp := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(0)), SelectPolicy: new(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}}
	if !apiequality.Semantic.DeepEqual(up, wantUp) {
		t.Errorf("scaleUp %+v, want %+v", up, wantUp)
	}
	wantDown := &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(30)), SelectPolicy: new(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}}
	if !apiequality.Semantic.DeepEqual(down, wantDown) {
		t.Errorf("scaleDown %+v, want %+v", down, wantDown)
	}
	h = newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{}
	})
	horizontalPodAutoscalers.PrepareCreate(h)
	if h.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != nil {
		t.Errorf("scale-down window %d, want unset", *h.Spec.Behavior.ScaleDown.StabilizationWindowSeconds)
	}

	// The v1 form's round-trip annotations are not stored with a v2 object.
	h = newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Annotations = map[string]string{HPAConditionsAnnotation: "[]", HPABehaviorAnnotation: "{}", "keep": "me"}
	})
	horizontalPodAutoscalers.PrepareCreate(h)
	if len(h.Annotations) != 1 || h.Annotations["keep"] != "me" {
		t.Errorf("annotations %v, want only keep", h.Annotations)
	}
}

func TestValidateHPA(t *testing.T) {
	for _, tc := range []struct {
		name string
		hpa  *autoscalingv2.HorizontalPodAutoscaler
		want []string
	}{
		{"ok", newHPA(nil), nil},
		{"replication controller in the core group", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "ReplicationController", Name: "rc"}
		}), nil},
		{"min replicas 0 (alpha)", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.MinReplicas = new(int32(0))
			h.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue"}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: quantity("10")}}}}
		}), []string{"FieldValueInvalid spec.minReplicas"}},
		{"no max", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MaxReplicas = 0 }),
			[]string{"FieldValueInvalid spec.maxReplicas", "FieldValueRequired spec.maxReplicas"}},
		{"max below min", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MinReplicas = new(int32(6)) }),
			[]string{"FieldValueInvalid spec.maxReplicas"}},
		{"negative max", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.MaxReplicas = -1 }),
			[]string{"FieldValueInvalid spec.maxReplicas", "FieldValueInvalid spec.maxReplicas"}},
		{"target without kind, name or group", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1"}
		}), []string{"FieldValueInvalid spec.scaleTargetRef.apiVersion", "FieldValueRequired spec.scaleTargetRef.kind", "FieldValueRequired spec.scaleTargetRef.name"}},
		{"target name not a path segment", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef.Name, h.Spec.ScaleTargetRef.APIVersion = "a/b", "apps/v1/x"
		}), []string{"FieldValueInvalid spec.scaleTargetRef.apiVersion", "FieldValueInvalid spec.scaleTargetRef.name"}},
		{"metric without type or source", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics = []autoscalingv2.MetricSpec{{}}
		}), []string{"FieldValueNotSupported spec.metrics[0].type", "FieldValueNotSupported spec.metrics[0].type", "FieldValueRequired spec.metrics[0].type"}},
		{"resource metric without source", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType}}
		}), []string{"FieldValueRequired spec.metrics[0].resource"}},
		{"two sources", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			m := resourceMetric(corev1.ResourceMemory, nil, quantity("1Gi"))
			m.Pods = podsMetric("qps", "1").Pods
			h.Spec.Metrics = []autoscalingv2.MetricSpec{m}
		}), []string{"FieldValueForbidden spec.metrics[0].pods"}},
		{"resource targets", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			both := resourceMetric(corev1.ResourceMemory, new(int32(50)), quantity("100Mi"))
			neither := resourceMetric("", nil, nil)
			zero := resourceMetric(corev1.ResourceMemory, new(int32(0)), nil)
			negative := resourceMetric(corev1.ResourceMemory, nil, quantity("-1"))
			h.Spec.Metrics = []autoscalingv2.MetricSpec{both, neither, zero, negative}
		}), []string{
			"FieldValueForbidden spec.metrics[0].resource.target.averageValue",
			"FieldValueInvalid spec.metrics[2].resource.target.averageUtilization",
			"FieldValueInvalid spec.metrics[3].resource.target.averageValue",
			"FieldValueRequired spec.metrics[1].resource.name",
			"FieldValueRequired spec.metrics[1].resource.target.averageUtilization",
		}},
		{"pods, object and external metrics", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			pods := podsMetric("", "1")
			pods.Pods.Target.AverageValue = nil
			object := autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
				DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: "Service", Name: "web", APIVersion: "v1"},
				Metric:          autoscalingv2.MetricIdentifier{Name: "rps"}, Target: autoscalingv2.MetricTarget{Type: "Average"}}}
			external := autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue"},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: quantity("1"), AverageValue: quantity("1")}}}
			h.Spec.Metrics = []autoscalingv2.MetricSpec{pods, object, external}
		}), []string{
			"FieldValueForbidden spec.metrics[2].external.target.value",
			"FieldValueInvalid spec.metrics[1].object.target.type",
			"FieldValueRequired spec.metrics[0].pods.metric.name",
			"FieldValueRequired spec.metrics[0].pods.target.averageValue",
			"FieldValueRequired spec.metrics[1].object.target.averageValue",
		}},
		{"container resource", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			good := autoscalingv2.MetricSpec{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricSource{
				Name: corev1.ResourceCPU, Container: "app", Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(int32(60))}}}
			pods := good
			pods.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{Name: "pods", Container: "App_1", Target: good.ContainerResource.Target}
			unknown := good
			unknown.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{Name: "foo", Target: good.ContainerResource.Target}
			extended := good
			extended.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{Name: "example.com/gpu", Container: "app", Target: good.ContainerResource.Target}
			h.Spec.Metrics = []autoscalingv2.MetricSpec{good, pods, unknown, extended}
		}), []string{
			"FieldValueInvalid spec.metrics[1].containerResource.container",
			"FieldValueInvalid spec.metrics[1].containerResource.name",
			"FieldValueInvalid spec.metrics[2].containerResource.name",
			"FieldValueInvalid spec.metrics[2].containerResource.name",
			"FieldValueRequired spec.metrics[2].containerResource.container",
		}},
		{"behavior", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(-1)), SelectPolicy: new(autoscalingv2.ScalingPolicySelect("Sometimes")),
					Policies: []autoscalingv2.HPAScalingPolicy{{Type: "Nodes", Value: 0, PeriodSeconds: 0}, {Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 1801}}},
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(3601)), Policies: []autoscalingv2.HPAScalingPolicy{},
					Tolerance: quantity("-0.1")},
			}
		}), []string{
			"FieldValueInvalid spec.behavior.scaleDown.stabilizationWindowSeconds",
			"FieldValueInvalid spec.behavior.scaleDown.tolerance",
			"FieldValueInvalid spec.behavior.scaleUp.policies[0].periodSeconds",
			"FieldValueInvalid spec.behavior.scaleUp.policies[0].value",
			"FieldValueInvalid spec.behavior.scaleUp.policies[1].periodSeconds",
			"FieldValueInvalid spec.behavior.scaleUp.stabilizationWindowSeconds",
			"FieldValueNotSupported spec.behavior.scaleUp.policies[0].type",
			"FieldValueNotSupported spec.behavior.scaleUp.selectPolicy",
			"FieldValueRequired spec.behavior.scaleDown.policies",
		}},
		{"bad status", newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Status.DesiredReplicas = -1 }), nil}, // reset on create
	} {
		t.Run(tc.name, func(t *testing.T) {
			horizontalPodAutoscalers.PrepareCreate(tc.hpa)
			if got := errs(horizontalPodAutoscalers.ValidateObject(tc.hpa, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
			if tc.name == "pods, object and external metrics" {
				return // v1 has no target types, and an Object target with no value gets a zero one
			}
			// The same object through autoscaling/v1 gets the same answer: v1 is validated as v2.
			v1 := HPAToV1(tc.hpa)
			horizontalPodAutoscalersV1.PrepareCreate(v1)
			if got := errs(horizontalPodAutoscalersV1.ValidateObject(v1, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors through v1\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateHPAUpdate(t *testing.T) {
	hpa := func(o Object) *autoscalingv2.HorizontalPodAutoscaler {
		return o.(*autoscalingv2.HorizontalPodAutoscaler)
	}
	checkUpdates(t, []updateCase{
		{"max replicas", horizontalPodAutoscalers, newHPA(nil), func(o Object) { hpa(o).Spec.MaxReplicas = 9 }, nil},
		{"min replicas to 0", horizontalPodAutoscalers, newHPA(nil), func(o Object) { hpa(o).Spec.MinReplicas = new(int32(0)) },
			[]string{"FieldValueForbidden spec.metrics", "FieldValueInvalid spec.minReplicas"}},
		{"target kind changed without a group", horizontalPodAutoscalers, newHPA(nil), func(o Object) {
			hpa(o).Spec.ScaleTargetRef.Kind, hpa(o).Spec.ScaleTargetRef.APIVersion = "StatefulSet", "v1"
		}, []string{"FieldValueInvalid spec.scaleTargetRef.apiVersion"}},
	})
	// An old object whose target apiVersion has no group may be updated as long as the
	// reference does not change (it was stored when that was allowed).
	old := newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.APIVersion = "v1" })
	horizontalPodAutoscalers.PrepareCreate(old)
	old.ResourceVersion = "1"
	obj := old.DeepCopy()
	obj.Spec.MaxReplicas = 8
	horizontalPodAutoscalers.PrepareUpdate(obj, old, "")
	if got := errs(horizontalPodAutoscalers.ValidateObject(obj, old)); len(got) > 0 {
		t.Errorf("unchanged target reference: %q", got)
	}
	if obj.Generation != 2 {
		t.Errorf("generation %d after a spec change, want 2", obj.Generation)
	}
}

// fullHPA has something of everything v1 cannot say itself: metrics other than CPU
// utilization (the CPU one last, where v1's conversion puts it back), a behavior with a
// tolerance, conditions and current metrics.
func fullHPA() *autoscalingv2.HorizontalPodAutoscaler {
	at := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	return newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Annotations = map[string]string{"owner": "team-a"}
		h.Spec.MinReplicas = new(int32(2))
		h.Spec.Metrics = []autoscalingv2.MetricSpec{
			resourceMetric(corev1.ResourceMemory, nil, quantity("200Mi")),
			podsMetric("packets", "1k"),
			{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
				DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "main"},
				Metric:          autoscalingv2.MetricIdentifier{Name: "rps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"path": "/"}}},
				Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: quantity("10k")}}},
			{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue"},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: quantity("30")}}},
			{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricSource{
				Name: corev1.ResourceCPU, Container: "app", Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(int32(70))}}},
			resourceMetric(corev1.ResourceCPU, new(int32(60)), nil),
		}
		h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(0)), SelectPolicy: new(autoscalingv2.MinChangePolicySelect),
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 5}}, Tolerance: quantity("50m")},
			ScaleDown: &autoscalingv2.HPAScalingRules{SelectPolicy: new(autoscalingv2.DisabledPolicySelect),
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 10, PeriodSeconds: 60}}},
		}
		h.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
			LastScaleTime: &at, CurrentReplicas: 3, DesiredReplicas: 4,
			CurrentMetrics: []autoscalingv2.MetricStatus{
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceMemory,
					Current: autoscalingv2.MetricValueStatus{AverageValue: quantity("150Mi")}}},
				{},
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU,
					Current: autoscalingv2.MetricValueStatus{AverageUtilization: new(int32(75)), AverageValue: quantity("150m")}}},
			},
			Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{
				{Type: autoscalingv2.AbleToScale, Status: corev1.ConditionTrue, LastTransitionTime: at, Reason: "ReadyForNewScale", Message: "recommended size matches current size"},
				{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionFalse, LastTransitionTime: at, Reason: "FailedGetPodsMetric", Message: "no"},
			},
		}
	})
}

// TestHPARoundTrip: v2 → v1 → v2 keeps everything, through annotations in v1 (in Kubernetes'
// own formats); v1 → v2 → v1 gives the same v1 object back.
func TestHPARoundTrip(t *testing.T) {
	for _, h := range []*autoscalingv2.HorizontalPodAutoscaler{newHPA(nil), fullHPA(), newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Spec.Metrics = []autoscalingv2.MetricSpec{resourceMetric(corev1.ResourceCPU, new(int32(50)), nil)}
	})} {
		defaultHPA(h) // defaulted objects are what is stored
		v1 := HPAToV1(h)
		back := HPAFromV1(v1)
		if !apiequality.Semantic.DeepEqual(h, back) {
			t.Errorf("v2 → v1 → v2 changed the object\n got %+v\nwant %+v", back, h)
		}
		again := HPAToV1(back)
		if !apiequality.Semantic.DeepEqual(v1, again) {
			t.Errorf("v1 → v2 → v1 changed the object\n got %+v\nwant %+v", again, v1)
		}
	}

	v1 := HPAToV1(fullHPA())
	if got := deref(v1.Spec.TargetCPUUtilizationPercentage); got != 60 {
		t.Errorf("targetCPUUtilizationPercentage %d, want 60", got)
	}
	if got := deref(v1.Status.CurrentCPUUtilizationPercentage); got != 75 {
		t.Errorf("currentCPUUtilizationPercentage %d, want 75", got)
	}
	if v1.Annotations["owner"] != "team-a" {
		t.Errorf("annotations %v lost owner", v1.Annotations)
	}
	// The behavior is written with the Go field names of Kubernetes' internal type, every
	// field present; the metrics as v1 MetricSpecs, without the CPU utilization one.
	wantBehavior := `{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Min","Policies":[{"Type":"Pods","Value":2,"PeriodSeconds":5}],"Tolerance":"50m"},` +
		`"ScaleDown":{"StabilizationWindowSeconds":null,"SelectPolicy":"Disabled","Policies":[{"Type":"Percent","Value":10,"PeriodSeconds":60}],"Tolerance":null}}`
	if got := v1.Annotations[HPABehaviorAnnotation]; got != wantBehavior {
		t.Errorf("behavior annotation\n got %s\nwant %s", got, wantBehavior)
	}
	var others []autoscalingv1.MetricSpec
	if err := json.Unmarshal([]byte(v1.Annotations[HPAMetricsAnnotation]), &others); err != nil || len(others) != 5 {
		t.Fatalf("metrics annotation %s: %v", v1.Annotations[HPAMetricsAnnotation], err)
	}
	if others[0].Resource == nil || others[0].Resource.Name != corev1.ResourceMemory || others[0].Resource.TargetAverageValue.String() != "200Mi" {
		t.Errorf("first other metric %+v", others[0])
	}
	var conds []autoscalingv1.HorizontalPodAutoscalerCondition
	if err := json.Unmarshal([]byte(v1.Annotations[HPAConditionsAnnotation]), &conds); err != nil || len(conds) != 2 || conds[1].Reason != "FailedGetPodsMetric" {
		t.Errorf("conditions annotation %s: %v", v1.Annotations[HPAConditionsAnnotation], err)
	}

	// A plain v1 object: its CPU target, nothing else; none at all means 80%.
	plain := &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: meta("old"), Spec: autoscalingv1.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{Kind: "ReplicationController", Name: "rc", APIVersion: "v1"}, MaxReplicas: 3}}
	if m := HPAFromV1(plain).Spec.Metrics; len(m) != 1 || !isCPUUtilization(m[0]) || *m[0].Resource.Target.AverageUtilization != 80 {
		t.Errorf("metrics of a v1 HPA without a target: %+v", m)
	}
	// Annotations that do not parse are dropped, as is anything the v1 form does not own.
	plain.Annotations = map[string]string{HPAMetricsAnnotation: "{not json", HPABehaviorAnnotation: "null"}
	plain.Spec.TargetCPUUtilizationPercentage = new(int32(30))
	v2 := HPAFromV1(plain)
	if len(v2.Spec.Metrics) != 1 || *v2.Spec.Metrics[0].Resource.Target.AverageUtilization != 30 || v2.Spec.Behavior != nil || v2.Annotations != nil {
		t.Errorf("v1 with broken annotations converted to %+v", v2)
	}
}

// TestHPAV1Writes: writes through autoscaling/v1 keep what the other half of the object has in
// annotations (status writes keep the spec's metrics and behavior, spec writes the status's
// conditions); a create stores no status; the answer is the object a read gives.
func TestHPAV1Writes(t *testing.T) {
	full := fullHPA()
	horizontalPodAutoscalers.PrepareCreate(full)
	full.Status = fullHPA().Status
	old := HPAToV1(full)
	old.Generation = 1

	// A client that knows only v1 fields and drops every annotation it does not know.
	bare := func() *autoscalingv1.HorizontalPodAutoscaler {
		h := old.DeepCopy()
		h.Annotations = map[string]string{"owner": "team-a"}
		return h
	}
	spec := bare()
	spec.Spec.MaxReplicas = 9
	horizontalPodAutoscalersV1.PrepareUpdate(spec, old, "")
	got := HPAFromV1(spec)
	if got.Spec.Behavior != nil || len(got.Spec.Metrics) != 1 {
		t.Errorf("a spec write without the annotations keeps metrics %d and behavior %v; want only the CPU target (as in Kubernetes)", len(got.Spec.Metrics), got.Spec.Behavior)
	}
	if !apiequality.Semantic.DeepEqual(got.Status, full.Status) {
		t.Errorf("a spec write changed the status:\n got %+v\nwant %+v", got.Status, full.Status)
	}
	if spec.Generation != 2 {
		t.Errorf("generation %d, want 2", spec.Generation)
	}

	status := bare()
	status.Status.DesiredReplicas = 7
	horizontalPodAutoscalersV1.PrepareUpdate(status, old, "status")
	got = HPAFromV1(status)
	if !apiequality.Semantic.DeepEqual(got.Spec, full.Spec) {
		t.Errorf("a status write changed the spec:\n got %+v\nwant %+v", got.Spec, full.Spec)
	}
	if got.Status.DesiredReplicas != 7 || got.Status.Conditions != nil {
		t.Errorf("status %+v: want desiredReplicas 7 and the conditions the writer left out gone", got.Status)
	}
	if status.Generation != 1 {
		t.Errorf("generation %d after a status write, want 1", status.Generation)
	}

	// A behavior change alone, in its annotation, is a spec change.
	behavior := old.DeepCopy()
	behavior.Annotations[HPABehaviorAnnotation] = `{"ScaleUp":{"StabilizationWindowSeconds":30}}`
	horizontalPodAutoscalersV1.PrepareUpdate(behavior, old, "")
	if behavior.Generation != 2 || deref(HPAFromV1(behavior).Spec.Behavior.ScaleUp.StabilizationWindowSeconds) != 30 {
		t.Errorf("behavior annotation change: generation %d, behavior %s", behavior.Generation, behavior.Annotations[HPABehaviorAnnotation])
	}

	created := old.DeepCopy()
	horizontalPodAutoscalersV1.PrepareCreate(created)
	if created.Status.CurrentReplicas != 0 || created.Status.CurrentCPUUtilizationPercentage != nil ||
		created.Annotations[HPAConditionsAnnotation] != "" || created.Annotations[HPACurrentMetricsAnnotation] != "" {
		t.Errorf("created with status %+v, annotations %v", created.Status, created.Annotations)
	}
	if created.Annotations[HPAMetricsAnnotation] == "" || created.Annotations[HPABehaviorAnnotation] == "" {
		t.Errorf("created without its spec annotations: %v", created.Annotations)
	}

	// Created with nothing but a target: the stored defaults show through v1.
	minimal := &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: meta("min"), Spec: autoscalingv1.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}, MaxReplicas: 3}}
	horizontalPodAutoscalersV1.PrepareCreate(minimal)
	if deref(minimal.Spec.MinReplicas) != 1 || deref(minimal.Spec.TargetCPUUtilizationPercentage) != 80 || len(minimal.Annotations) != 0 {
		t.Errorf("minimal v1 HPA defaulted to %+v, annotations %v", minimal.Spec, minimal.Annotations)
	}
	if errs := horizontalPodAutoscalersV1.ValidateObject(minimal, nil); len(errs) > 0 {
		t.Errorf("minimal v1 HPA invalid: %v", errs)
	}
}

func TestHPATargets(t *testing.T) {
	cpu := resourceMetric(corev1.ResourceCPU, new(int32(80)), nil)
	memory := resourceMetric(corev1.ResourceMemory, nil, quantity("200Mi"))
	cpuStatus := autoscalingv2.MetricStatus{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{
		Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: new(int32(40)), AverageValue: quantity("40m")}}}
	memoryStatus := autoscalingv2.MetricStatus{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{
		Name: corev1.ResourceMemory, Current: autoscalingv2.MetricValueStatus{AverageValue: quantity("120Mi")}}}
	external := autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: "queue"}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: quantity("30")}}}
	for _, tc := range []struct {
		specs    []autoscalingv2.MetricSpec
		statuses []autoscalingv2.MetricStatus
		want     string
	}{
		{nil, nil, "<none>"},
		{[]autoscalingv2.MetricSpec{cpu}, nil, "cpu: <unknown>/80%"},
		{[]autoscalingv2.MetricSpec{cpu}, []autoscalingv2.MetricStatus{{}}, "cpu: <unknown>/80%"},
		{[]autoscalingv2.MetricSpec{cpu}, []autoscalingv2.MetricStatus{cpuStatus}, "cpu: 40%/80%"},
		{[]autoscalingv2.MetricSpec{memory, cpu}, []autoscalingv2.MetricStatus{memoryStatus, cpuStatus}, "memory: 120Mi/200Mi, cpu: 40%/80%"},
		{[]autoscalingv2.MetricSpec{podsMetric("qps", "10"), external}, nil, "<unknown>/10, <unknown>/30 (avg)"},
		{[]autoscalingv2.MetricSpec{cpu, memory, external}, []autoscalingv2.MetricStatus{cpuStatus, memoryStatus}, "cpu: 40%/80%, memory: 120Mi/200Mi + 1 more..."},
	} {
		if got := HPATargets(tc.specs, tc.statuses); got != tc.want {
			t.Errorf("targets %q, want %q", got, tc.want)
		}
	}
	h := newHPA(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics = []autoscalingv2.MetricSpec{cpu} })
	horizontalPodAutoscalers.PrepareCreate(h)
	row := horizontalPodAutoscalers.TableRow(h)
	if row[0] != "web" || row[1] != "Deployment/web" || row[2] != "cpu: <unknown>/80%" || row[3] != "1" || row[4] != int64(5) || row[5] != int64(0) {
		t.Errorf("row %v", row)
	}
	if v1row := horizontalPodAutoscalersV1.TableRow(HPAToV1(h)); !slices.Equal(v1row[:6], row[:6]) {
		t.Errorf("v1 row %v, want %v", v1row, row)
	}
}
