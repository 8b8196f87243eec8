package registry

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podRule(ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
		APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}
}

func newValidatingWebhooks(change func(*admissionregistrationv1.ValidatingWebhookConfiguration)) *admissionregistrationv1.ValidatingWebhookConfiguration {
	c := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "pods.policy.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "policy", Namespace: "ns", Path: new("/validate")}},
			Rules:                   []admissionregistrationv1.RuleWithOperations{podRule(admissionregistrationv1.Create)},
			SideEffects:             new(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}}}
	if change != nil {
		change(c)
	}
	return c
}

func newValidatingPolicy(change func(*admissionregistrationv1.ValidatingAdmissionPolicy)) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				{RuleWithOperations: podRule(admissionregistrationv1.Create)}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= 5"}},
		}}
	if change != nil {
		change(p)
	}
	return p
}

func newMutatingPolicy(change func(*admissionregistrationv1.MutatingAdmissionPolicy)) *admissionregistrationv1.MutatingAdmissionPolicy {
	p := &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "label"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				{RuleWithOperations: podRule(admissionregistrationv1.Create)}}},
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{}"}}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		}}
	if change != nil {
		change(p)
	}
	return p
}

// TestAdmissionRegistrationDefaults: webhooks fail closed, match equivalent versions, select
// everything, wait 10 s, run once, on port 443, in every scope; policies fail closed too.
func TestAdmissionRegistrationDefaults(t *testing.T) {
	c := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "inject"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "inject.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "s", Namespace: "ns"}},
			Rules:                   []admissionregistrationv1.RuleWithOperations{podRule(admissionregistrationv1.Create)},
			SideEffects:             new(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"}}}}
	mutatingWebhookConfigurations.PrepareCreate(c)
	h := c.Webhooks[0]
	if *h.FailurePolicy != admissionregistrationv1.Fail || *h.MatchPolicy != admissionregistrationv1.Equivalent || h.NamespaceSelector == nil ||
		h.ObjectSelector == nil || *h.TimeoutSeconds != 10 || *h.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy ||
		*h.ClientConfig.Service.Port != 443 || *h.Rules[0].Scope != admissionregistrationv1.AllScopes {
		t.Errorf("webhook defaults %+v", h)
	}
	if c.Generation != 1 {
		t.Errorf("generation %d", c.Generation)
	}
	if e := errs(mutatingWebhookConfigurations.ValidateObject(c, nil)); len(e) > 0 {
		t.Errorf("defaulted webhook invalid: %q", e)
	}
	p := newValidatingPolicy(nil)
	validatingAdmissionPolicies.PrepareCreate(p)
	m := p.Spec.MatchConstraints
	if *p.Spec.FailurePolicy != admissionregistrationv1.Fail || *m.MatchPolicy != admissionregistrationv1.Equivalent || m.NamespaceSelector == nil ||
		*m.ResourceRules[0].Scope != admissionregistrationv1.AllScopes {
		t.Errorf("policy defaults %+v %+v", p.Spec, m)
	}
	// Changing the webhooks bumps the generation; changing labels does not.
	old := c.DeepCopy()
	old.ResourceVersion = "1"
	next := old.DeepCopy()
	next.Labels = map[string]string{"a": "b"}
	mutatingWebhookConfigurations.PrepareUpdate(next, old, "")
	next.Webhooks[0].TimeoutSeconds = new(int32(5))
	bumped := next.DeepCopy()
	mutatingWebhookConfigurations.PrepareUpdate(bumped, old, "")
	if next.Generation != 1 || bumped.Generation != 2 {
		t.Errorf("generations %d, %d", next.Generation, bumped.Generation)
	}
}

func TestValidateAdmissionRegistration(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  Object
		def  Strategy
		want []string
	}{
		{"validating webhooks", newValidatingWebhooks(nil), validatingWebhookConfigurations, nil},
		{"webhook", newValidatingWebhooks(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			h := &c.Webhooks[0]
			h.Name = "nodots"
			h.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: new("http://x.example.com/a?b=c")}
			h.Rules = []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"*", "CREATE"},
				Rule: admissionregistrationv1.Rule{APIVersions: []string{"v1"}, Resources: []string{"*/*", "pods"}, Scope: new(admissionregistrationv1.ScopeType("Everywhere"))}}}
			h.SideEffects, h.TimeoutSeconds, h.AdmissionReviewVersions = nil, new(int32(31)), []string{"v2"}
			c.Webhooks = append(c.Webhooks, *h.DeepCopy())
			c.Webhooks[1].ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "s", Namespace: "ns", Path: new("nope")}}
			c.Webhooks[1].SideEffects = new(admissionregistrationv1.SideEffectClassSome)
			c.Webhooks[1].Rules = nil
			c.Webhooks[1].AdmissionReviewVersions = []string{"v1", "v1"}
		}), validatingWebhookConfigurations, []string{
			"FieldValueDuplicate webhooks[1].name",
			"FieldValueInvalid webhooks[0].admissionReviewVersions",
			"FieldValueInvalid webhooks[0].clientConfig.url", "FieldValueInvalid webhooks[0].clientConfig.url",
			"FieldValueInvalid webhooks[0].name",
			"FieldValueInvalid webhooks[0].rules[0].operations",
			"FieldValueInvalid webhooks[0].rules[0].resources",
			"FieldValueInvalid webhooks[0].timeoutSeconds",
			"FieldValueInvalid webhooks[1].admissionReviewVersions[1]",
			"FieldValueInvalid webhooks[1].clientConfig.service.path",
			"FieldValueInvalid webhooks[1].name",
			"FieldValueInvalid webhooks[1].timeoutSeconds",
			"FieldValueNotSupported webhooks[0].rules[0].scope",
			"FieldValueNotSupported webhooks[1].sideEffects",
			"FieldValueRequired webhooks[0].rules[0].apiGroups",
			"FieldValueRequired webhooks[0].sideEffects",
		}},
		{"no client config, bad match condition", newValidatingWebhooks(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{}
			c.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "a b", Expression: " "}, {Name: "ok", Expression: "true"}, {Name: "ok", Expression: "true"}}
		}), validatingWebhookConfigurations, []string{"FieldValueDuplicate webhooks[0].matchConditions[2].name",
			"FieldValueInvalid webhooks[0].matchConditions[0].name", "FieldValueRequired webhooks[0].clientConfig",
			"FieldValueRequired webhooks[0].matchConditions[0].expression"}},
		{"validating policy", newValidatingPolicy(nil), validatingAdmissionPolicies, nil},
		{"policy without match or validations", newValidatingPolicy(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConstraints, p.Spec.Validations = nil, nil
			p.Spec.FailurePolicy = new(admissionregistrationv1.FailurePolicyType("Sometimes"))
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "a/b/c"}
			p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "if", Expression: "1"}}
		}), validatingAdmissionPolicies, []string{"FieldValueInvalid spec.paramKind.apiVersion", "FieldValueInvalid spec.variables[0].name",
			"FieldValueNotSupported spec.failurePolicy", "FieldValueRequired spec.auditAnnotations", "FieldValueRequired spec.matchConstraints",
			"FieldValueRequired spec.paramKind.kind", "FieldValueRequired spec.validations"}},
		{"validations and audit annotations", newValidatingPolicy(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations = []admissionregistrationv1.Validation{{Expression: " ", Message: "two\nlines", Reason: new(metav1.StatusReasonNotFound)}}
			p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{{Key: "k", ValueExpression: "'v'"}, {Key: "k"}}
		}), validatingAdmissionPolicies, []string{"FieldValueDuplicate spec.auditAnnotations[1].key", "FieldValueInvalid spec.validations[0].message",
			"FieldValueNotSupported spec.validations[0].reason", "FieldValueRequired spec.auditAnnotations[1].valueExpression",
			"FieldValueRequired spec.validations[0].expression"}},
		{"validating binding", &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "replicas",
				ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: new(admissionregistrationv1.DenyAction)},
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}},
			validatingAdmissionPolicyBindings, nil},
		{"validating binding errors", &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				ParamRef:          &admissionregistrationv1.ParamRef{Name: "x", Selector: &metav1.LabelSelector{}},
				ValidationActions: []admissionregistrationv1.ValidationAction{"Deny", "Warn", "Deny"}}},
			validatingAdmissionPolicyBindings, []string{"FieldValueDuplicate spec.validationActions[2]", "FieldValueForbidden spec.paramRef.name",
				"FieldValueForbidden spec.paramRef.selector", "FieldValueInvalid spec.validationActions",
				"FieldValueRequired spec.paramRef.parameterNotFoundAction", "FieldValueRequired spec.policyName"}},
		{"mutating policy", newMutatingPolicy(nil), mutatingAdmissionPolicies, nil},
		{"mutating policy errors", newMutatingPolicy(func(p *admissionregistrationv1.MutatingAdmissionPolicy) {
			p.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
			p.Spec.Mutations = []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeJSONPatch, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{}}, {PatchType: "Merge"}}
			p.Spec.ReinvocationPolicy = ""
		}), mutatingAdmissionPolicies, []string{"FieldValueInvalid spec.mutations[0].applyConfiguration",
			"FieldValueNotSupported spec.matchConstraints.resourceRules.operations", "FieldValueNotSupported spec.mutations[1].patchType",
			"FieldValueRequired spec.mutations[0].jsonPatch", "FieldValueRequired spec.reinvocationPolicy"}},
		{"mutating binding", &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "Not_A_Name"}},
			mutatingAdmissionPolicyBindings, []string{"FieldValueInvalid spec.policyName"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.def.PrepareCreate(tc.obj)
			if got := errs(tc.def.ValidateObject(tc.obj, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestAdmissionRegistrationRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		def  Strategy
		obj  Object
		want []any
	}{
		{"webhooks", validatingWebhookConfigurations, newValidatingWebhooks(nil), []any{"policy", int64(1), "<unknown>"}},
		{"policy", validatingAdmissionPolicies, newValidatingPolicy(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		}), []any{"replicas", int64(1), "v1/ConfigMap", "<unknown>"}},
		{"mutating policy", mutatingAdmissionPolicies, newMutatingPolicy(nil), []any{"label", int64(1), "<unset>", "<unknown>"}},
		{"binding by name", validatingAdmissionPolicyBindings, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ParamRef: &admissionregistrationv1.ParamRef{Name: "x"}}},
			[]any{"b", "p", "*/x", "<unknown>"}},
		{"binding by selector", mutatingAdmissionPolicyBindings, &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "p", ParamRef: &admissionregistrationv1.ParamRef{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}}},
			[]any{"b", "p", "a=b", "<unknown>"}},
	} {
		if got := tc.def.TableRow(tc.obj); !slices.Equal(got, tc.want) {
			t.Errorf("%s: row %q, want %q", tc.name, got, tc.want)
		}
	}
}
