package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestNamedRulesAndBindings(t *testing.T) {
	cm := &Attributes{Operation: admissionv1.Create, Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Name: "a", Namespaced: true}
	rule := func(names ...string) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{ResourceNames: names, RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{"*"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"*"}, Resources: []string{"configmaps"}}}}
	}
	noLabels := func(context.Context, string) (map[string]string, error) { return nil, nil }
	for _, tc := range []struct {
		name    string
		m       *admissionregistrationv1.MatchResources
		binding bool
		want    bool
	}{
		{"a policy without constraints matches nothing", nil, false, false},
		{"a binding without matchResources matches all", nil, true, true},
		{"a binding with empty rules matches all", &admissionregistrationv1.MatchResources{}, true, true},
		{"a policy with empty rules matches nothing", &admissionregistrationv1.MatchResources{}, false, false},
		{"the rule", &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule()}}, false, true},
		{"the rule with its name", &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule("a")}}, false, true},
		{"the rule with other names", &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule("b")}}, false, false},
		{"excluded", &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule()},
			ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{rule("a")}}, false, false},
		{"object selector", &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}}, true, false},
	} {
		_, got, err := resourcesMatch(context.Background(), tc.m, cm, noLabels, tc.binding)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}

// paramStores serves ConfigMaps of namespace ns as params.
func paramStores(ns string, cms ...*corev1.ConfigMap) ParamStores {
	return func(apiVersion, kind string) (*ParamStore, bool) {
		if apiVersion != "v1" || kind != "ConfigMap" {
			return nil, false
		}
		return &ParamStore{Namespaced: true,
			Get: func(namespace, name string) (runtime.Object, error) {
				for _, c := range cms {
					if namespace == ns && c.Name == name {
						return c, nil
					}
				}
				return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
			},
			List: func(namespace string, sel labels.Selector) ([]runtime.Object, error) {
				var out []runtime.Object
				for _, c := range cms {
					if namespace == ns && sel.Matches(labels.Set(c.Labels)) {
						out = append(out, c)
					}
				}
				return out, nil
			},
		}, true
	}
}

func TestValidatePolicies(t *testing.T) {
	fail, ignore := admissionregistrationv1.Fail, admissionregistrationv1.Ignore
	deny, allow := admissionregistrationv1.DenyAction, admissionregistrationv1.AllowAction
	forbidden := metav1.StatusReasonForbidden
	all := &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{"*"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}}}}}}
	policy := func(spec admissionregistrationv1.ValidatingAdmissionPolicySpec) *admissionregistrationv1.ValidatingAdmissionPolicy {
		spec.MatchConstraints = all
		return &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: spec}
	}
	binding := func(actions []admissionregistrationv1.ValidationAction, ref *admissionregistrationv1.ParamRef) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		if actions == nil {
			actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
		}
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ValidationActions: actions, ParamRef: ref}}
	}
	v := func(expr, msg string) admissionregistrationv1.Validation {
		return admissionregistrationv1.Validation{Expression: expr, Message: msg}
	}
	cmKind := &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	limits := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits", Namespace: "ns", Labels: map[string]string{"role": "limit"}}, Data: map[string]string{"max": "1"}}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}, Data: map[string]string{"a": "1", "b": "2"}}

	for _, tc := range []struct {
		name     string
		policy   *admissionregistrationv1.ValidatingAdmissionPolicy
		binding  *admissionregistrationv1.ValidatingAdmissionPolicyBinding
		code     int32  // 0: admitted
		message  string // the end of the denial, or the warning
		warnings int
	}{
		{"admitted", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{v("size(object.data) == 2", "")}}), binding(nil, nil), 0, "", 0},
		{"denied with the message", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{v("size(object.data) < 2", "too big")}}), binding(nil, nil), 422, "with binding 'b' denied request: too big", 0},
		{"reason sets the code", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{{Expression: "false", Reason: &forbidden}}}), binding(nil, nil), 403, "denied request: failed expression: false", 0},
		{"messageExpression with a newline falls back", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "m", MessageExpression: "'a\\nb'"}}}), binding(nil, nil), 422, "denied request: m", 0},
		{"Warn", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{v("false", "w")}}), binding([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}, nil), 0, "with binding 'b': w", 1},
		{"Audit only", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{v("false", "w")}}), binding([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}, nil), 0, "", 0},
		{"param by name", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{ParamKind: cmKind, Validations: []admissionregistrationv1.Validation{v("size(object.data) <= int(params.data.max)", "limit")}}),
			binding(nil, &admissionregistrationv1.ParamRef{Name: "limits"}), 422, "denied request: limit", 0},
		{"param missing, Deny", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{ParamKind: cmKind, Validations: []admissionregistrationv1.Validation{v("false", "")}}),
			binding(nil, &admissionregistrationv1.ParamRef{Name: "nope", ParameterNotFoundAction: &deny}), 403, "policy 'p' with binding 'b' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction", 0},
		{"param missing, Allow", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{ParamKind: cmKind, Validations: []admissionregistrationv1.Validation{v("false", "")}}),
			binding(nil, &admissionregistrationv1.ParamRef{Name: "nope", ParameterNotFoundAction: &allow}), 0, "", 0},
		{"param missing, Deny, failurePolicy Ignore", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{ParamKind: cmKind, FailurePolicy: &ignore, Validations: []admissionregistrationv1.Validation{v("false", "")}}),
			binding(nil, &admissionregistrationv1.ParamRef{Name: "nope", ParameterNotFoundAction: &deny}), 0, "", 0},
		{"params by selector", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{ParamKind: cmKind, Validations: []admissionregistrationv1.Validation{{Expression: "false", MessageExpression: "params.metadata.name"}}}),
			binding(nil, &admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "limit"}}}), 422, "denied request: limits", 0},
		{"unknown paramKind", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "x/v1", Kind: "Y"}, Validations: []admissionregistrationv1.Validation{v("false", "")}}),
			binding(nil, &admissionregistrationv1.ParamRef{Name: "y"}), 403, "policy 'p' with binding 'b' denied request: failed to configure binding: paramKind kind `x/v1, Kind=Y` not known", 0},
		{"match condition false", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "object.metadata.name == 'other'"}}, Validations: []admissionregistrationv1.Validation{v("false", "")}}),
			binding(nil, nil), 0, "", 0},
		{"variables compose", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Variables: []admissionregistrationv1.Variable{{Name: "n", Expression: "size(object.data)"}, {Name: "twice", Expression: "variables.n * 2"}},
			Validations: []admissionregistrationv1.Validation{{Expression: "variables.twice < 4", MessageExpression: "string(variables.twice)"}}}), binding(nil, nil), 422, "denied request: 4", 0},
		{"a failing variable fails only where read", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Variables: []admissionregistrationv1.Variable{{Name: "bad", Expression: "object.data.missing"}},
			Validations: []admissionregistrationv1.Validation{v("true", "")}}), binding(nil, nil), 0, "", 0},
		{"evaluation error, Fail", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail, Validations: []admissionregistrationv1.Validation{v("object.data.missing == 'x'", "")}}),
			binding(nil, nil), 422, "denied request: expression 'object.data.missing == 'x'' resulted in error: no such key: missing", 0},
		{"evaluation error, Ignore", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &ignore, Validations: []admissionregistrationv1.Validation{v("object.data.missing == 'x'", "")}}),
			binding(nil, nil), 0, "", 0},
		{"the authorizer allows everything", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{
			v("authorizer.group('apps').resource('deployments').namespace('ns').name('d').check('create').allowed() && !authorizer.serviceAccount('ns', 'sa').path('/x').check('get').errored()", ""),
			{Expression: "!authorizer.requestResource.subresource('status').check('update').allowed()", MessageExpression: "authorizer.requestResource.check('update').reason()"}}}),
			binding(nil, nil), 422, "denied request: " + allowedReason, 0},
		{"policy that does not compile", policy(admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{v("(", "")}}),
			binding(nil, nil), 403, `policy "p" denied request: failed to configure policy: spec.validations[0].expression`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Request{Attributes: &Attributes{Operation: admissionv1.Create, Kind: corev1.SchemeGroupVersion.WithKind("ConfigMap"),
				Resource: corev1.SchemeGroupVersion.WithResource("configmaps"), Name: "x", Namespace: "ns", Namespaced: true, Object: obj}}
			pc := PolicyContext{Params: paramStores("ns", limits)}
			err := r.ValidatePolicies(context.Background(), ValidatingPolicies([]*admissionregistrationv1.ValidatingAdmissionPolicy{tc.policy}, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{tc.binding}), pc)
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
			} else {
				se, ok := err.(*apierrors.StatusError)
				if !ok || se.ErrStatus.Code != tc.code || !strings.Contains(se.ErrStatus.Message, tc.message) {
					t.Fatalf("got %v, want %d ...%s", err, tc.code, tc.message)
				}
				// A denial names the policy as ValidatingAdmissionPolicy; a policy or binding that
				// could not be applied is reported in the generic words, with reason Forbidden.
				configured := strings.HasPrefix(se.ErrStatus.Message, `configmaps "x" is forbidden: ValidatingAdmissionPolicy 'p'`)
				unconfigured := strings.Contains(se.ErrStatus.Message, "failed to configure") && se.ErrStatus.Reason == metav1.StatusReasonForbidden &&
					strings.HasPrefix(se.ErrStatus.Message, "policy ")
				if !configured && !unconfigured {
					t.Errorf("message %q reason %s", se.ErrStatus.Message, se.ErrStatus.Reason)
				}
			}
			if len(r.Warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", r.Warnings, tc.warnings)
			}
			if tc.code == 0 && tc.message != "" && (len(r.Warnings) == 0 || !strings.HasSuffix(r.Warnings[0], tc.message)) {
				t.Errorf("warnings %q, want one ending %q", r.Warnings, tc.message)
			}
		})
	}
}

// TestPolicyMatchPolicy: a policy whose rules name another version of the resource sees the
// request at that version (Equivalent, the default), or not at all (Exact); a mutating
// policy's change made at that version comes back converted.
func TestPolicyMatchPolicy(t *testing.T) {
	v1 := schema.GroupVersion{Group: "example.com", Version: "v1"}
	v2 := schema.GroupVersion{Group: "example.com", Version: "v2"}
	// v2 names the field size, v1 count.
	convert := func(to schema.GroupVersion, from, into string) func(context.Context, runtime.Object) (runtime.Object, error) {
		return func(_ context.Context, o runtime.Object) (runtime.Object, error) {
			u := o.(*unstructured.Unstructured).DeepCopy()
			spec := u.Object["spec"].(map[string]any)
			spec[into] = spec[from]
			delete(spec, from)
			u.SetAPIVersion(to.String())
			return u, nil
		}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v2", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns"}, "spec": map[string]any{"size": int64(3)}}}
	request := func() *Request {
		return &Request{Attributes: &Attributes{Operation: admissionv1.Create, Kind: v2.WithKind("Widget"), Resource: v2.WithResource("widgets"),
			Name: "w", Namespace: "ns", Namespaced: true, Object: obj.DeepCopy(),
			Equivalents: []Version{{Kind: v1.WithKind("Widget"), Resource: v1.WithResource("widgets"), To: convert(v1, "size", "count"), From: convert(v2, "count", "size")}}}}
	}
	v1Only := func(policy admissionregistrationv1.MatchPolicyType) *admissionregistrationv1.MatchResources {
		return &admissionregistrationv1.MatchResources{MatchPolicy: &policy, ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{"*"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}}}}}
	}
	validating := func(policy admissionregistrationv1.MatchPolicyType) Policies {
		return ValidatingPolicies([]*admissionregistrationv1.ValidatingAdmissionPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: v1Only(policy), Validations: []admissionregistrationv1.Validation{{
				Expression:        "false",
				MessageExpression: "object.apiVersion + ' count=' + string(object.spec.count) + ' ' + request.kind.version + ' from ' + request.requestKind.version"}}}}},
			[]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{{ObjectMeta: metav1.ObjectMeta{Name: "b"},
				Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}})
	}
	err := request().ValidatePolicies(context.Background(), validating(admissionregistrationv1.Equivalent), PolicyContext{})
	if err == nil || !strings.HasSuffix(err.Error(), "denied request: example.com/v1 count=3 v1 from v2") {
		t.Errorf("Equivalent: %v", err)
	}
	if err := request().ValidatePolicies(context.Background(), validating(admissionregistrationv1.Exact), PolicyContext{}); err != nil {
		t.Errorf("Exact: %v", err)
	}

	mp := mutatingPolicy("m", admissionregistrationv1.MutatingAdmissionPolicySpec{MatchConstraints: v1Only(admissionregistrationv1.Equivalent),
		Mutations: []admissionregistrationv1.Mutation{jsonPatch(`[JSONPatch{op: "replace", path: "/spec/count", value: object.spec.count + 1}]`)}})
	r := request()
	changed, err := r.Mutate(context.Background(), CompileMutatingPolicies([]*admissionregistrationv1.MutatingAdmissionPolicy{mp},
		[]*admissionregistrationv1.MutatingAdmissionPolicyBinding{{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "m"}}}), PolicyContext{}, nil)
	if err != nil || !changed {
		t.Fatalf("mutate: %v %v", changed, err)
	}
	got := r.Object.(*unstructured.Unstructured)
	if got.GetAPIVersion() != "example.com/v2" || got.Object["spec"].(map[string]any)["size"] != int64(4) {
		t.Errorf("mutated at v1, back at v2: %v", got.Object)
	}
}

// TestPolicyCostBudget: the validations of one evaluation share a cost budget; past it, the
// policy fails per its failure policy with Kubernetes' message.
func TestPolicyCostBudget(t *testing.T) {
	data := map[string]string{}
	for i := range 100 {
		data[fmt.Sprint("k", i)] = ""
	}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}, Data: data}
	// Each costs about 60,000, within the per-expression limit; the budget is lowered from
	// Kubernetes' 10,000,000 to 100,000 to keep the test short.
	costly := admissionregistrationv1.Validation{Expression: "object.data.all(a, object.data.all(b, a != b || a == b))"}
	defer func(b int64) { runtimeCostBudget = b }(runtimeCostBudget)
	runtimeCostBudget = 100000
	for _, tc := range []struct {
		validations int
		denied      bool
	}{{1, false}, {2, true}} {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{"*"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}}}}}},
		}}
		for range tc.validations {
			p.Spec.Validations = append(p.Spec.Validations, costly)
		}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
		r := &Request{Attributes: &Attributes{Operation: admissionv1.Create, Kind: corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			Resource: corev1.SchemeGroupVersion.WithResource("configmaps"), Name: "x", Namespace: "ns", Namespaced: true, Object: obj}}
		err := r.ValidatePolicies(context.Background(), ValidatingPolicies([]*admissionregistrationv1.ValidatingAdmissionPolicy{p}, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{b}), PolicyContext{})
		if got := err != nil && strings.HasSuffix(err.Error(), "denied request: validation failed due to running out of cost budget, no further validation rules will be run"); got != tc.denied {
			t.Errorf("%d validations: %v, want denied %v", tc.validations, err, tc.denied)
		}
	}
}

// BenchmarkValidatePolicies judges one ConfigMap create by ten bound policies, the variables
// of the request (object, oldObject, request) built once for all of them.
func BenchmarkValidatePolicies(b *testing.B) {
	var policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	var bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for i := range 10 {
		name := fmt.Sprint("p", i)
		policies = append(policies, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{"CREATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: fmt.Sprintf("!has(object.data) || !('forbidden-%d' in object.data)", i)}},
		}})
		bindings = append(bindings, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}})
	}
	compiled := ValidatingPolicies(policies, bindings)
	data := map[string]string{}
	for i := range 20 {
		data[fmt.Sprint("key-", i)] = strings.Repeat("v", 50)
	}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", Labels: map[string]string{"app": "web"}}, Data: data}
	b.ReportAllocs()
	for b.Loop() {
		r := &Request{Attributes: &Attributes{Operation: admissionv1.Create, Kind: corev1.SchemeGroupVersion.WithKind("ConfigMap"),
			Resource: corev1.SchemeGroupVersion.WithResource("configmaps"), Name: "x", Namespace: "ns", Namespaced: true, Object: obj}}
		if err := r.ValidatePolicies(context.Background(), compiled, PolicyContext{}); err != nil {
			b.Fatal(err)
		}
	}
}
