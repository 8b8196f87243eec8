package registry

import (
	"slices"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func newPDB(change func(*policyv1.PodDisruptionBudget)) *policyv1.PodDisruptionBudget {
	min := intstr.FromInt32(2)
	p := &policyv1.PodDisruptionBudget{ObjectMeta: meta("pdb"), Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	if change != nil {
		change(p)
	}
	return p
}

func bound(v intstr.IntOrString) *intstr.IntOrString { return &v }

func TestValidatePodDisruptionBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*policyv1.PodDisruptionBudget)
		want   []string
	}{
		{"minAvailable count", nil, nil},
		{"maxUnavailable percent", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.MinAvailable, p.Spec.MaxUnavailable = nil, bound(intstr.FromString("25%"))
		}, nil},
		{"neither bound", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = nil }, nil},
		{"no selector", func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector = nil }, nil},
		{"both bounds", func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = bound(intstr.FromInt32(1)) },
			[]string{"FieldValueInvalid spec"}},
		{"negative count", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = bound(intstr.FromInt32(-1)) },
			[]string{"FieldValueInvalid spec.minAvailable"}},
		{"percent over 100", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.MinAvailable, p.Spec.MaxUnavailable = nil, bound(intstr.FromString("101%"))
		}, []string{"FieldValueInvalid spec.maxUnavailable"}},
		{"not a percent", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = bound(intstr.FromString("half")) },
			[]string{"FieldValueInvalid spec.minAvailable"}},
		{"bad selector", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "no good"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}
		}, []string{"FieldValueInvalid spec.selector.matchExpressions[0].operator", "FieldValueInvalid spec.selector.matchLabels"}},
		{"unhealthy pod policy", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.UnhealthyPodEvictionPolicy = new(policyv1.UnhealthyPodEvictionPolicyType("Sometimes"))
		}, []string{"FieldValueNotSupported spec.unhealthyPodEvictionPolicy"}},
		{"AlwaysAllow", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.UnhealthyPodEvictionPolicy = new(policyv1.AlwaysAllow)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPDB(tc.change)
			podDisruptionBudgets.PrepareCreate(p)
			if got := errs(podDisruptionBudgets.ValidateObject(p, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestPodDisruptionBudgetWrites: a status sent on create is dropped and generation starts at
// 1; spec changes bump it, status writes keep the spec and may not go negative, and a
// selector stored with bad values may stay on update.
func TestPodDisruptionBudgetWrites(t *testing.T) {
	p := newPDB(func(p *policyv1.PodDisruptionBudget) { p.Status.DisruptionsAllowed = 5 })
	podDisruptionBudgets.PrepareCreate(p)
	p.ResourceVersion = "1"
	if p.Generation != 1 || p.Status.DisruptionsAllowed != 0 {
		t.Errorf("created: generation %d, status %+v", p.Generation, p.Status)
	}
	spec := p.DeepCopy()
	spec.Spec.MinAvailable = bound(intstr.FromString("50%"))
	spec.Status.DisruptionsAllowed = 3
	podDisruptionBudgets.PrepareUpdate(spec, p, "")
	if spec.Generation != 2 || spec.Status.DisruptionsAllowed != 0 {
		t.Errorf("spec write: generation %d, status %+v", spec.Generation, spec.Status)
	}
	st := p.DeepCopy()
	st.Spec.MinAvailable = nil
	st.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: -1, ObservedGeneration: 1,
		Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: "Maybe"}}}
	podDisruptionBudgets.PrepareUpdate(st, p, "status")
	if st.Generation != 1 || st.Spec.MinAvailable == nil {
		t.Errorf("status write changed the spec or generation: %+v", st)
	}
	want := []string{"FieldValueInvalid status.disruptionsAllowed", "FieldValueNotSupported status.conditions[0].status",
		"FieldValueRequired status.conditions[0].lastTransitionTime", "FieldValueRequired status.conditions[0].reason"}
	if got := errs(podDisruptionBudgets.ValidateObject(st, p)); !slices.Equal(got, want) {
		t.Errorf("status errors\n got %q\nwant %q", got, want)
	}

	badValue := func(p *policyv1.PodDisruptionBudget) {
		p.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"no good"}}}
	}
	checkUpdates(t, []updateCase{
		{"keep a bad label value", podDisruptionBudgets, newPDB(badValue), func(o Object) {
			o.(*policyv1.PodDisruptionBudget).Spec.MinAvailable = bound(intstr.FromInt32(1))
		}, nil},
		{"a new bad label value", podDisruptionBudgets, newPDB(nil), func(o Object) { badValue(o.(*policyv1.PodDisruptionBudget)) },
			[]string{"FieldValueInvalid spec.selector.matchExpressions[0].values[0]"}},
	})
}

func TestPodDisruptionBudgetRow(t *testing.T) {
	p := newPDB(func(p *policyv1.PodDisruptionBudget) { p.Status.DisruptionsAllowed = 1 })
	row := podDisruptionBudgets.TableRow(p)
	var names []string
	for _, c := range podDisruptionBudgets.TableColumns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"}; !slices.Equal(names, want) {
		t.Errorf("columns %q, want %q", names, want)
	}
	if got := row[:4]; !slices.Equal(got, []any{"pdb", "2", "N/A", int64(1)}) {
		t.Errorf("row %q", got)
	}
}
