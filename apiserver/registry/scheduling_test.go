package registry

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newPriorityClass() *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000, Description: "web"}
}

func TestPriorityClassValidation(t *testing.T) {
	checkCreate(t, priorityClasses, newPriorityClass, []validCase[*schedulingv1.PriorityClass]{
		{"valid", nil, nil},
		{"system class as kube-apiserver creates it", func(pc *schedulingv1.PriorityClass) {
			*pc = *SystemPriorityClasses()[0]
		}, nil},
		{"system prefix, unknown class", func(pc *schedulingv1.PriorityClass) { pc.Name = "system-mine" },
			[]string{"FieldValueForbidden metadata.name"}},
		{"system class, other value", func(pc *schedulingv1.PriorityClass) { pc.Name = "system-node-critical" },
			[]string{"FieldValueForbidden metadata.name"}},
		{"above user range", func(pc *schedulingv1.PriorityClass) { pc.Value = highestUserPriority + 1 },
			[]string{"FieldValueForbidden value"}},
		{"unknown preemption policy", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = new(corev1.PreemptionPolicy("Sometimes")) },
			[]string{"FieldValueNotSupported preemptionPolicy"}},
	})
	checkUpdate(t, priorityClasses, newPriorityClass, []validCase[*schedulingv1.PriorityClass]{
		{"description", func(pc *schedulingv1.PriorityClass) { pc.Description = "other" }, nil},
		{"value and policy", func(pc *schedulingv1.PriorityClass) {
			pc.Value, pc.PreemptionPolicy = 5, new(corev1.PreemptNever)
		}, []string{"FieldValueForbidden value", "FieldValueInvalid preemptionPolicy"}},
	})
}

// TestPriorityClassDefaults: the policy defaults, generation is 1 and stays 1, and the table
// is kubectl's.
func TestPriorityClassDefaults(t *testing.T) {
	pc := newPriorityClass()
	priorityClasses.PrepareCreate(pc)
	if deref(pc.PreemptionPolicy) != corev1.PreemptLowerPriority || pc.Generation != 1 {
		t.Errorf("policy %v, generation %d", pc.PreemptionPolicy, pc.Generation)
	}
	changed := pc.DeepCopy()
	changed.Description = "new words"
	priorityClasses.PrepareUpdate(changed, pc, "")
	if changed.Generation != 1 {
		t.Errorf("generation after update: %d", changed.Generation)
	}
	checkTable(t, priorityClasses, pc, []string{"Name", "Value", "Global-Default", "Age", "PreemptionPolicy"},
		[]any{int64(1000), false, "<unknown>", "PreemptLowerPriority"})
}

func TestPriorityClassAdmission(t *testing.T) {
	def := newPriorityClass()
	def.Name, def.GlobalDefault = "default-one", true
	objs := storedObjects{priorityClassesResource: {def}}
	other := newPriorityClass()
	other.GlobalDefault = true
	if err := priorityClasses.ValidateAdmissionFor(context.Background(), objs, other, nil, ""); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "PriorityClass default-one is already marked as default") {
		t.Errorf("second default: %v", err)
	}
	// The default itself may be written again.
	if err := priorityClasses.ValidateAdmissionFor(context.Background(), objs, def.DeepCopy(), def, ""); err != nil {
		t.Errorf("rewriting the default: %v", err)
	}
}

// TestPodPriorityAdmission: a pod gets its class's priority and policy, the lowest global
// default without a class, 0 without either; unknown classes and contradicting values are
// refused; updates keep what creation set.
func TestPodPriorityAdmission(t *testing.T) {
	critical := SystemPriorityClasses()[0]
	priorityClasses.PrepareCreate(critical)
	never := newPriorityClass()
	never.Name, never.Value, never.PreemptionPolicy = "batch", 10, new(corev1.PreemptNever)
	low, lower := newPriorityClass(), newPriorityClass()
	low.Name, low.Value, low.GlobalDefault = "low", 100, true
	lower.Name, lower.Value, lower.GlobalDefault = "lower", 50, true
	for _, pc := range []*schedulingv1.PriorityClass{never, low, lower} {
		priorityClasses.PrepareCreate(pc)
	}
	ctx := context.Background()
	admit := func(objs Objects, change func(*corev1.Pod)) (*corev1.Pod, error) {
		p := newPod(corev1.Container{Name: "c", Image: "x"})
		if change != nil {
			change(p)
		}
		pods.PrepareCreate(p)
		return p, pods.AdmitFor(ctx, objs, p, nil, "")
	}
	classes := storedObjects{priorityClassesResource: {critical, never}}
	for _, tc := range []struct {
		name      string
		objs      Objects
		change    func(*corev1.Pod)
		class     string
		priority  int32
		policy    corev1.PreemptionPolicy
		forbidden string
	}{
		{"no classes", storedObjects{}, nil, "", 0, corev1.PreemptLowerPriority, ""},
		{"system class", classes, func(p *corev1.Pod) { p.Spec.PriorityClassName = critical.Name }, critical.Name, critical.Value, corev1.PreemptLowerPriority, ""},
		{"class that never preempts", classes, func(p *corev1.Pod) { p.Spec.PriorityClassName = "batch" }, "batch", 10, corev1.PreemptNever, ""},
		{"global default, the lowest", storedObjects{priorityClassesResource: {low, lower}}, nil, "lower", 50, corev1.PreemptLowerPriority, ""},
		{"unknown class", classes, func(p *corev1.Pod) { p.Spec.PriorityClassName = "nope" }, "", 0, "", "no PriorityClass with name nope was found"},
		{"priority not the class's", classes, func(p *corev1.Pod) {
			p.Spec.PriorityClassName, p.Spec.Priority = "batch", new(int32(7))
		}, "", 0, "", "the integer value of priority (7) must not be provided in pod spec"},
		{"policy not the class's", classes, func(p *corev1.Pod) {
			p.Spec.PriorityClassName, p.Spec.PreemptionPolicy = "batch", new(corev1.PreemptLowerPriority)
		}, "", 0, "", "the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := admit(tc.objs, tc.change)
			if tc.forbidden != "" {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbidden) {
					t.Fatalf("want 403 %q, got %v", tc.forbidden, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.PriorityClassName != tc.class || deref(p.Spec.Priority) != tc.priority || deref(p.Spec.PreemptionPolicy) != tc.policy {
				t.Errorf("class %q priority %v policy %v", p.Spec.PriorityClassName, deref(p.Spec.Priority), deref(p.Spec.PreemptionPolicy))
			}
		})
	}
	created, err := admit(classes, func(p *corev1.Pod) { p.Spec.PriorityClassName = "batch" })
	if err != nil {
		t.Fatal(err)
	}
	update := created.DeepCopy()
	update.Spec.Priority, update.Spec.PreemptionPolicy = nil, nil
	if err := pods.AdmitFor(ctx, classes, update, created, ""); err != nil || deref(update.Spec.Priority) != 10 || deref(update.Spec.PreemptionPolicy) != corev1.PreemptNever {
		t.Errorf("update: %v, priority %v policy %v", err, update.Spec.Priority, update.Spec.PreemptionPolicy)
	}
}
