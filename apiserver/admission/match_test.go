package admission

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestRules(t *testing.T) {
	scope := func(s admissionregistrationv1.ScopeType) *admissionregistrationv1.ScopeType { return &s }
	rule := func(resources []string, s *admissionregistrationv1.ScopeType, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"", "apps"}, APIVersions: []string{"v1"}, Resources: resources, Scope: s}}
	}
	pods := &Attributes{Operation: admissionv1.Create, Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespaced: true}
	podStatus := &Attributes{Operation: admissionv1.Update, Resource: pods.Resource, Subresource: "status", Namespaced: true}
	nodes := &Attributes{Operation: admissionv1.Create, Resource: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}}
	hpa := &Attributes{Operation: admissionv1.Create, Resource: schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}, Namespaced: true}
	for _, tc := range []struct {
		name string
		rule admissionregistrationv1.RuleWithOperations
		a    *Attributes
		want bool
	}{
		{"the resource", rule([]string{"pods"}, nil, "CREATE"), pods, true},
		{"another operation", rule([]string{"pods"}, nil, "UPDATE"), pods, false},
		{"any operation", rule([]string{"pods"}, nil, "*"), pods, true},
		{"a resource is not its subresources", rule([]string{"pods"}, nil, "*"), podStatus, false},
		{"pods/*", rule([]string{"pods/*"}, nil, "*"), podStatus, true},
		{"*/status", rule([]string{"*/status"}, nil, "*"), podStatus, true},
		{"*/status is not the resource", rule([]string{"*/status"}, nil, "*"), pods, false},
		{"*/*", rule([]string{"*/*"}, nil, "*"), podStatus, true},
		{"* is every resource", rule([]string{"*"}, nil, "*"), nodes, true},
		{"Namespaced scope", rule([]string{"*"}, scope(admissionregistrationv1.NamespacedScope), "*"), nodes, false},
		{"Cluster scope", rule([]string{"*"}, scope(admissionregistrationv1.ClusterScope), "*"), nodes, true},
		{"another group", rule([]string{"*"}, nil, "*"), hpa, false},
	} {
		if got := RulesMatch([]admissionregistrationv1.RuleWithOperations{tc.rule}, tc.a); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSelectors(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	nsLabels := func(_ context.Context, name string) (map[string]string, error) {
		return map[string]string{"team": name}, nil
	}
	labelled := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": v}}}
	}
	inNS := func(ns string) *Attributes {
		return &Attributes{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: ns, Namespaced: true, Object: labelled("x")}
	}
	namespaceObj := &Attributes{Resource: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Object: labelled("a")}
	node := &Attributes{Resource: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, Object: labelled("z")}
	for _, tc := range []struct {
		name string
		a    *Attributes
		want bool
	}{
		{"its namespace's labels", inNS("a"), true},
		{"another namespace", inNS("b"), false},
		{"a Namespace by its own labels", namespaceObj, true},
		{"other cluster-scoped objects always", node, true},
	} {
		if got, err := NamespaceSelected(context.Background(), sel, tc.a, nsLabels); err != nil || got != tc.want {
			t.Errorf("namespace selector, %s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	update := &Attributes{Object: labelled("b"), OldObject: labelled("a")}
	if ok, err := ObjectSelected(sel, update); err != nil || !ok {
		t.Errorf("object selector: the old object's labels match too (%v)", err)
	}
	if ok, err := ObjectSelected(sel, &Attributes{Object: labelled("b")}); err != nil || ok {
		t.Errorf("object selector matched another label (%v)", err)
	}
}

func TestConditions(t *testing.T) {
	conds := []admissionregistrationv1.MatchCondition{
		{Name: "not-kube-system", Expression: "request.namespace != 'kube-system'"},
		{Name: "labelled", Expression: "has(object.metadata.labels) && 'app' in object.metadata.labels"},
		{Name: "create", Expression: "oldObject == null"},
		{Name: "authorized", Expression: "authorizer.group('').resource('configmaps').namespace('default').check('get').allowed() && authorizer.requestResource.check('create').allowed()"},
	}
	c, errs := CompileConditions(conds, field.NewPath("matchConditions"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}
	for _, tc := range []struct {
		name string
		a    *Attributes
		want bool
	}{
		{"all true", &Attributes{Namespace: "default", Object: obj}, true},
		{"kube-system", &Attributes{Namespace: "kube-system", Object: obj}, false},
		{"an update", &Attributes{Namespace: "default", Object: obj, OldObject: obj}, false},
		{"unlabelled", &Attributes{Namespace: "default", Object: &corev1.ConfigMap{}}, false},
	} {
		vars, err := Variables(tc.a)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.Match(vars); err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	_, errs = CompileConditions([]admissionregistrationv1.MatchCondition{{Name: "bad", Expression: "object.metadata.name +"}, {Name: "int", Expression: "1 + 1"}}, field.NewPath("matchConditions"))
	if len(errs) != 2 || errs[0].Field != "matchConditions[0].expression" || errs[1].Detail != "must evaluate to bool" {
		t.Errorf("compile errors: %v", errs)
	}
}
