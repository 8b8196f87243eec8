package admission

import (
	"strings"
	"testing"

	"github.com/kplane/kplane/apiserver/customresource"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// typeCheckKinds serves Deployments, ConfigMaps and a custom Widget, with schemas that have
// the fields the tests read.
func typeCheckKinds(t *testing.T) KindSchemas {
	t.Helper()
	compile := func(src string) *customresource.Schema {
		var p apiextv1.JSONSchemaProps
		if err := yaml.Unmarshal([]byte(src), &p); err != nil {
			t.Fatal(err)
		}
		s, err := customresource.Compile(&p)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	meta := `
    metadata:
      type: object
      properties:
        name: {type: string}
        labels: {type: object, additionalProperties: {type: string}}`
	schemas := map[schema.GroupVersionKind]*customresource.Schema{
		{Group: "apps", Version: "v1", Kind: "Deployment"}: compile(`
type: object
properties:` + meta + `
    spec:
      type: object
      properties:
        replicas: {type: integer}
        paused: {type: boolean}`),
		{Version: "v1", Kind: "ConfigMap"}: compile(`
type: object
properties:` + meta + `
    data: {type: object, additionalProperties: {type: string}}`),
		{Group: "example.com", Version: "v1", Kind: "Widget"}: compile(`
type: object
properties:
  spec:
    type: object
    properties:
      size: {type: integer}`),
	}
	kinds := map[schema.GroupVersionResource]schema.GroupVersionKind{}
	for gvk := range schemas {
		kinds[gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind)+"s")] = gvk
	}
	// Pods are served but have no schema: nothing is checked against them.
	kinds[schema.GroupVersionResource{Version: "v1", Resource: "pods"}] = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	return KindSchemas{
		KindFor: func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
			gvk, ok := kinds[gvr]
			return gvk, ok
		},
		Schema: func(gvk schema.GroupVersionKind) (*customresource.Schema, bool) {
			s, ok := schemas[gvk]
			return s, ok
		},
	}
}

func TestTypeCheck(t *testing.T) {
	kinds := typeCheckKinds(t)
	rule := func(group, version string, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{"*"},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources}}}
	}
	deployments := []admissionregistrationv1.NamedRuleWithOperations{rule("apps", "v1", "deployments")}
	type warning struct{ fieldRef, contains string }
	for _, tc := range []struct {
		name        string
		rules       []admissionregistrationv1.NamedRuleWithOperations
		paramKind   *admissionregistrationv1.ParamKind
		variables   []admissionregistrationv1.Variable
		expr, msg   string
		want        []warning
		wantWarning string // the whole warning text, when given
	}{
		{name: "a misspelt field", rules: deployments, expr: "object.spec.replicass > 1",
			wantWarning: "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replicass'\n | object.spec.replicass > 1\n | ...........^\n"},
		{name: "declared fields", rules: deployments, expr: "object.spec.replicas > 1 && !object.spec.paused && oldObject.metadata.name == object.metadata.name"},
		{name: "a wrong type", rules: deployments, expr: "object.spec.replicas == 'three'",
			want: []warning{{"spec.validations[0].expression", "found no matching overload for '_==_' applied to '(int, string)'"}}},
		{name: "the messageExpression", rules: deployments, expr: "true", msg: "'paused: ' + object.spec.pausd",
			want: []warning{{"spec.validations[0].messageExpression", "undefined field 'pausd'"}}},
		{name: "params typed by a ConfigMap paramKind", rules: deployments, paramKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			expr: "params.data.max == string(object.spec.replicas)"},
		{name: "params without their field", rules: deployments, paramKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			expr: "params.spec.max == 1", want: []warning{{"spec.validations[0].expression", "undefined field 'spec'"}}},
		{name: "params of an unknown kind are dyn", rules: deployments, paramKind: &admissionregistrationv1.ParamKind{APIVersion: "v9", Kind: "Nothing"},
			expr: "params.anything == 1"},
		{name: "variables typed by their expressions", rules: deployments,
			variables: []admissionregistrationv1.Variable{{Name: "spec", Expression: "object.spec"}, {Name: "n", Expression: "variables.spec.replicas"}},
			expr:      "variables.n > 1 && variables.spec.pausd", want: []warning{{"spec.validations[0].expression", "undefined field 'pausd'"}}},
		{name: "an undeclared variable", rules: deployments, expr: "variables.missing",
			want: []warning{{"spec.validations[0].expression", "undefined field 'missing'"}}},
		{name: "request and namespaceObject typed", rules: deployments, expr: "request.operation == 'CREATE' && namespaceObject.metadata.labels.size() > 0 && request.uid == ''",
			want: []warning{{"spec.validations[0].expression", "undefined field 'uid'"}}},
		{name: "a custom resource's schema", rules: []admissionregistrationv1.NamedRuleWithOperations{rule("example.com", "v1", "widgets")},
			expr: "object.spec.size > 1 && object.metadata.name != '' && object.spec.colour == 'red'",
			want: []warning{{"spec.validations[0].expression", "example.com/v1, Kind=Widget: ERROR: <input>:1:66: undefined field 'colour'"}}},
		{name: "each kind named", rules: []admissionregistrationv1.NamedRuleWithOperations{rule("", "v1", "configmaps"), deployments[0]},
			expr: "object.spec.replicas > 1",
			want: []warning{{"spec.validations[0].expression", "/v1, Kind=ConfigMap: ERROR: <input>:1:7: undefined field 'spec'"}}},
		{name: "the kinds' warnings together, sorted", rules: []admissionregistrationv1.NamedRuleWithOperations{deployments[0], rule("", "v1", "configmaps")},
			expr: "object.nothing",
			wantWarning: "/v1, Kind=ConfigMap: ERROR: <input>:1:7: undefined field 'nothing'\n | object.nothing\n | ......^\n" +
				"\napps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'nothing'\n | object.nothing\n | ......^\n"},
		{name: "a wildcard group skips the rule", rules: []admissionregistrationv1.NamedRuleWithOperations{rule("*", "v1", "deployments")}, expr: "object.nothing"},
		{name: "a wildcard version skips the rule", rules: []admissionregistrationv1.NamedRuleWithOperations{rule("apps", "*", "deployments")}, expr: "object.nothing"},
		{name: "wildcard resources and subresources are skipped", rules: []admissionregistrationv1.NamedRuleWithOperations{rule("apps", "v1", "*", "deployments/status")}, expr: "object.nothing"},
		{name: "a kind without a schema", rules: []admissionregistrationv1.NamedRuleWithOperations{rule("", "v1", "pods")}, expr: "object.nothing"},
		{name: "no constraints", expr: "object.nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				ParamKind: tc.paramKind, Variables: tc.variables,
				Validations: []admissionregistrationv1.Validation{{Expression: tc.expr, MessageExpression: tc.msg}}}}
			if tc.rules != nil {
				p.Spec.MatchConstraints = &admissionregistrationv1.MatchResources{ResourceRules: tc.rules}
			}
			got, err := TypeCheck(p, kinds)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantWarning != "" {
				tc.want = []warning{{"spec.validations[0].expression", tc.wantWarning}}
				if len(got) != 1 || got[0].Warning != tc.wantWarning {
					t.Fatalf("got %q, want %q", got, tc.wantWarning)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %v", got, tc.want)
			}
			for i, w := range tc.want {
				if got[i].FieldRef != w.fieldRef || !strings.Contains(got[i].Warning, w.contains) {
					t.Errorf("warning %d: %q, want %v", i, got[i], w)
				}
			}
		})
	}
}

func TestTypeCheckedKindsAtMostTenPerRule(t *testing.T) {
	var resources []string
	for _, r := range "abcdefghijkl" {
		resources = append(resources, string(r))
	}
	m := &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"g"}, APIVersions: []string{"v1"}, Resources: resources}}}}}
	got := typeCheckedKinds(m, func(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
		return gvr.GroupVersion().WithKind(strings.ToUpper(gvr.Resource)), true
	})
	if len(got) != maxTypeCheckedKinds || got[0].Kind != "A" || got[9].Kind != "J" {
		t.Errorf("got %v, want the first ten kinds", got)
	}
}
