package admission

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kplane/kplane/apiserver/fieldmanager"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var deploymentGVK = appsv1.SchemeGroupVersion.WithKind("Deployment")

// deploymentMerger merges apply configurations into Deployments with the field manager's
// type information, as the apiserver does.
func deploymentMerger(t *testing.T) Merger {
	types, err := fieldmanager.ForGoTypes(map[schema.GroupVersionKind]reflect.Type{deploymentGVK: reflect.TypeFor[appsv1.Deployment]()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := fieldmanager.New(types, fieldmanager.Options{Kind: deploymentGVK, New: func() runtime.Object { return &appsv1.Deployment{} }})
	if err != nil {
		t.Fatal(err)
	}
	return func(gvk schema.GroupVersionKind, obj runtime.Object, patch map[string]any) (runtime.Object, error) {
		if gvk != deploymentGVK {
			return nil, fmt.Errorf("no type information for %v", gvk)
		}
		return m.Merge(obj, patch)
	}
}

func mutatingPolicy(name string, spec admissionregistrationv1.MutatingAdmissionPolicySpec) *admissionregistrationv1.MutatingAdmissionPolicy {
	if spec.MatchConstraints == nil {
		spec.MatchConstraints = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{"*"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}}}}}}
	}
	return &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func applyConfiguration(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expr}}
}

func jsonPatch(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: expr}}
}

func bindAll(policies ...*admissionregistrationv1.MutatingAdmissionPolicy) MutatingPolicies {
	var bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	for _, p := range policies {
		bindings = append(bindings, &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-binding"},
			Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: p.Name, ParamRef: &admissionregistrationv1.ParamRef{Name: "limits"}}})
	}
	return CompileMutatingPolicies(policies, bindings)
}

func TestMutatingPolicies(t *testing.T) {
	ignore := admissionregistrationv1.Ignore
	cmKind := &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	limits := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits", Namespace: "ns"}, Data: map[string]string{"replicas": "3"}}
	deployment := func() *appsv1.Deployment {
		return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", Labels: map[string]string{"app": "d"}, Annotations: map[string]string{"keep": "1"}},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "app", Image: "app:1", Command: []string{"run"}}, {Name: "side", Image: "side:1"}}}}}}
	}
	containers := "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [%s]}}}}"
	for _, tc := range []struct {
		name     string
		policies []*admissionregistrationv1.MutatingAdmissionPolicy
		check    func(*appsv1.Deployment) error
		denied   string // the end of the error's message
	}{
		{name: "apply configuration merges maps", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"env": "prod"}}}`)}})},
			check: func(d *appsv1.Deployment) error {
				if d.Labels["env"] != "prod" || d.Labels["app"] != "d" {
					return fmt.Errorf("labels %v", d.Labels)
				}
				return nil
			}},
		{name: "apply configuration merges lists by their keys", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{applyConfiguration(fmt.Sprintf(containers, `Object.spec.template.spec.containers{name: "app", image: "app:2"}`))}})},
			check: func(d *appsv1.Deployment) error {
				c := d.Spec.Template.Spec.Containers
				if len(c) != 2 || c[0].Image != "app:2" || c[0].Command[0] != "run" || c[1].Image != "side:1" {
					return fmt.Errorf("containers %+v", c)
				}
				return nil
			}},
		{name: "params and variables", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			ParamKind: cmKind, Variables: []admissionregistrationv1.Variable{{Name: "replicas", Expression: "int(params.data.replicas)"}},
			Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{spec: Object.spec{replicas: variables.replicas}}`)}})},
			check: func(d *appsv1.Deployment) error {
				if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
					return fmt.Errorf("replicas %v", d.Spec.Replicas)
				}
				return nil
			}},
		{name: "JSON patch, a key escaped", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{jsonPatch(`[JSONPatch{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey("example.com/owner"), value: object.metadata.name}]`)}})},
			check: func(d *appsv1.Deployment) error {
				if d.Annotations["example.com/owner"] != "d" || d.Annotations["keep"] != "1" {
					return fmt.Errorf("annotations %v", d.Annotations)
				}
				return nil
			}},
		{name: "mutations run in order, each on the last one's result", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{
				applyConfiguration(`Object{metadata: Object.metadata{labels: {"step": "1"}}}`),
				jsonPatch(`[JSONPatch{op: "replace", path: "/metadata/labels/step", value: string(int(object.metadata.labels.step) + 1)}]`)}})},
			check: func(d *appsv1.Deployment) error {
				if d.Labels["step"] != "2" {
					return fmt.Errorf("labels %v", d.Labels)
				}
				return nil
			}},
		{name: "a failed test op leaves the object as it was", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{jsonPatch(`[JSONPatch{op: "test", path: "/metadata/name", value: "other"}, JSONPatch{op: "add", path: "/metadata/labels/x", value: "y"}]`)}})},
			check: func(d *appsv1.Deployment) error {
				if _, ok := d.Labels["x"]; ok {
					return fmt.Errorf("labels %v", d.Labels)
				}
				return nil
			}},
		{name: "match condition false", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "other", Expression: "object.metadata.name == 'other'"}},
			Mutations:       []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"env": "prod"}}}`)}})},
			check: func(d *appsv1.Deployment) error {
				if _, ok := d.Labels["env"]; ok {
					return errors.New("mutated")
				}
				return nil
			}},
		{name: "type names must follow the field path", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{spec: Object.metadata{}}`)}})},
			denied: `policy 'p' with binding 'p-binding' denied request: type mismatch: unexpected type name "Object.metadata", expected "Object.spec", which matches field name path from root Object type`},
		{name: "atomic lists are not merged", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{applyConfiguration(fmt.Sprintf(containers, `Object.spec.template.spec.containers{name: "app", command: ["x"]}`))}})},
			denied: "may not mutate atomic arrays, maps or structs: .spec.template.spec.containers[0].command"},
		{name: "evaluation error, Fail", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{jsonPatch(`[JSONPatch{op: "add", path: "/x", value: object.missing}]`)}})},
			denied: "denied request: expression '[JSONPatch{op: \"add\", path: \"/x\", value: object.missing}]' resulted in error: no such key: missing"},
		{name: "evaluation error, Ignore", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{FailurePolicy: &ignore,
			Mutations: []admissionregistrationv1.Mutation{jsonPatch(`[JSONPatch{op: "add", path: "/x", value: object.missing}]`)}})},
			check: func(d *appsv1.Deployment) error {
				if !reflect.DeepEqual(d, deployment()) {
					return errors.New("mutated")
				}
				return nil
			}},
		{name: "a failing mutation is skipped, the others apply (Ignore)", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{FailurePolicy: &ignore,
			Mutations: []admissionregistrationv1.Mutation{
				applyConfiguration(`Object{metadata: Object.metadata{labels: {"first": "yes"}}}`),
				jsonPatch(`[JSONPatch{op: "remove", path: "/spec/nothing/there"}]`),
				applyConfiguration(`Object{metadata: Object.metadata{labels: {"third": "yes"}}}`)}})},
			check: func(d *appsv1.Deployment) error {
				if d.Labels["first"] != "yes" || d.Labels["third"] != "yes" {
					return fmt.Errorf("labels %v", d.Labels)
				}
				return nil
			}},
		{name: "a bad JSON patch path", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{jsonPatch(`[JSONPatch{op: "remove", path: "/spec/nothing/there"}]`)}})},
			denied: "denied request: JSON Patch: "},
		{name: "a policy that does not compile", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{
			Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{`)}})},
			denied: `policy "p" denied request: failed to configure policy: `},
		{name: "reinvoked when a later policy changed the object", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{
			mutatingPolicy("a", admissionregistrationv1.MutatingAdmissionPolicySpec{ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"seen": object.metadata.labels[?"b"].orValue("none")}}}`)}}),
			mutatingPolicy("b", admissionregistrationv1.MutatingAdmissionPolicySpec{
				Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"b": "set"}}}`)}})},
			check: func(d *appsv1.Deployment) error {
				if d.Labels["seen"] != "set" {
					return fmt.Errorf("labels %v", d.Labels)
				}
				return nil
			}},
		{name: "a change in the reinvocation reinvokes the ones after it", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{
			mutatingPolicy("a", admissionregistrationv1.MutatingAdmissionPolicySpec{ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"seen-b": object.metadata.labels[?"b"].orValue("none")}}}`)}}),
			mutatingPolicy("b", admissionregistrationv1.MutatingAdmissionPolicySpec{
				Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"b": "set"}}}`)}}),
			mutatingPolicy("c", admissionregistrationv1.MutatingAdmissionPolicySpec{ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"seen-a": object.metadata.labels[?"seen-b"].orValue("none")}}}`)}})},
			check: func(d *appsv1.Deployment) error {
				if d.Labels["seen-b"] != "set" || d.Labels["seen-a"] != "set" {
					return fmt.Errorf("labels %v", d.Labels)
				}
				return nil
			}},
		{name: "not reinvoked without IfNeeded", policies: []*admissionregistrationv1.MutatingAdmissionPolicy{
			mutatingPolicy("a", admissionregistrationv1.MutatingAdmissionPolicySpec{ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"seen": object.metadata.labels[?"b"].orValue("none")}}}`)}}),
			mutatingPolicy("b", admissionregistrationv1.MutatingAdmissionPolicySpec{
				Mutations: []admissionregistrationv1.Mutation{applyConfiguration(`Object{metadata: Object.metadata{labels: {"b": "set"}}}`)}})},
			check: func(d *appsv1.Deployment) error {
				if d.Labels["seen"] != "none" {
					return fmt.Errorf("labels %v", d.Labels)
				}
				return nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := deployment()
			r := &Request{Attributes: &Attributes{Operation: admissionv1.Create, Kind: deploymentGVK,
				Resource: appsv1.SchemeGroupVersion.WithResource("deployments"), Name: "d", Namespace: "ns", Namespaced: true, Object: orig}}
			pc := PolicyContext{Params: paramStores("ns", limits), Merge: deploymentMerger(t)}
			changed, err := r.Mutate(context.Background(), bindAll(tc.policies...), pc, nil)
			if tc.denied != "" {
				// A mutation that failed is Invalid; a policy that could not be applied keeps
				// Forbidden, as Kubernetes reports them.
				reason := metav1.StatusReasonInvalid
				if strings.Contains(tc.denied, "failed to configure") {
					reason = metav1.StatusReasonForbidden
				}
				se, ok := err.(*apierrors.StatusError)
				if !ok || se.ErrStatus.Code != 403 || se.ErrStatus.Reason != reason || !strings.Contains(se.ErrStatus.Message, tc.denied) {
					t.Fatalf("got %v, want 403 %s ...%s", err, reason, tc.denied)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d := r.Object.(*appsv1.Deployment)
			if err := tc.check(d); err != nil {
				t.Fatal(err)
			}
			if changed != !reflect.DeepEqual(d, deployment()) {
				t.Errorf("changed %v", changed)
			}
			if !reflect.DeepEqual(orig, deployment()) {
				t.Errorf("the original object was changed")
			}
		})
	}
}

func TestCompileMutatingPolicy(t *testing.T) {
	_, errs := CompileMutatingPolicy(mutatingPolicy("p", admissionregistrationv1.MutatingAdmissionPolicySpec{Mutations: []admissionregistrationv1.Mutation{
		applyConfiguration(`Object{metadata: Object.metadata{labels: {"a": "b"}}}`),
		applyConfiguration(`"a string"`),
		jsonPatch(`[JSONPatch{op: "add", path: "/x", value: 1}]`),
		jsonPatch(`[JSONPatch{op: 1}]`),
		jsonPatch(`[JSONPatch{nope: "x"}]`),
	}}))
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	want := []string{"spec.mutations[1].applyConfiguration.expression", "spec.mutations[3].jsonPatch.expression", "spec.mutations[4].jsonPatch.expression"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors at %v (%v), want %v", got, errs, want)
	}
}
