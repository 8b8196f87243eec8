package apiserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

const (
	vapPath  = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
	vapbPath = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
)

// policyFixture installs ValidatingAdmissionPolicies on ConfigMaps of one labelled namespace.
type policyFixture struct {
	t   *testing.T
	ns  string
	cms string
}

func newPolicyFixture(t *testing.T) *policyFixture {
	ns := namespace(t)
	if r := do(t, "PATCH", "/api/v1/namespaces/"+ns, `{"metadata":{"labels":{"policies":"`+ns+`"}}}`, "Content-Type", "application/merge-patch+json"); r.code != http.StatusOK {
		t.Fatalf("label namespace: %d %s", r.code, r.body)
	}
	return &policyFixture{t: t, ns: ns, cms: "/api/v1/namespaces/" + ns + "/configmaps"}
}

// policy builds a policy on ConfigMap writes in the fixture's namespace; spec adds to it.
func (f *policyFixture) policy(name string, spec map[string]any) map[string]any {
	s := map[string]any{
		"matchConstraints": map[string]any{
			"resourceRules":     []any{map[string]any{"operations": []any{"CREATE", "UPDATE"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"configmaps"}}},
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"policies": f.ns}},
		},
	}
	for k, v := range spec {
		s[k] = v
	}
	return map[string]any{"metadata": map[string]any{"name": name + "-" + f.ns}, "spec": s}
}

func (f *policyFixture) binding(name, policy string, spec map[string]any) map[string]any {
	s := map[string]any{"policyName": policy + "-" + f.ns, "validationActions": []any{"Deny"}}
	for k, v := range spec {
		s[k] = v
	}
	return map[string]any{"metadata": map[string]any{"name": name + "-" + f.ns}, "spec": s}
}

// install creates objects at path and deletes them when the test ends.
func (f *policyFixture) install(t *testing.T, path string, objs ...map[string]any) {
	t.Helper()
	for _, o := range objs {
		if r := do(t, "POST", path, o); r.code != http.StatusCreated {
			t.Fatalf("create %v: %d %s", get(o, "metadata", "name"), r.code, r.body)
		}
		name := get(o, "metadata", "name").(string)
		t.Cleanup(func() { do(t, "DELETE", path+"/"+name, nil) })
	}
	// Admission reads configurations from the watch cache; a consistent list waits until the
	// cache holds what was just created.
	if r := do(t, "GET", path, nil); r.code != http.StatusOK {
		t.Fatalf("list %s: %d %s", path, r.code, r.body)
	}
}

func (f *policyFixture) cm(name string, data map[string]any, labels map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name, "labels": labels}, "data": data}
}

func validations(v ...map[string]any) map[string]any {
	list := make([]any, len(v))
	for i := range v {
		list[i] = v[i]
	}
	return map[string]any{"validations": list}
}

func TestValidatingAdmissionPolicies(t *testing.T) {
	f := newPolicyFixture(t)
	denied := func(t *testing.T, r response, code int, policy, binding, msg string) {
		t.Helper()
		want := "ValidatingAdmissionPolicy '" + policy + "-" + f.ns + "' with binding '" + binding + "-" + f.ns + "' denied request: " + msg
		if r.code != code || !strings.HasSuffix(get(r.object(t), "message").(string), want) {
			t.Errorf("got %d %s, want %d ...%s", r.code, r.body, code, want)
		}
	}

	t.Run("message, messageExpression and reason", func(t *testing.T) {
		f.install(t, vapPath, f.policy("msg", validations(
			map[string]any{"expression": "!has(object.data) || !('forbidden' in object.data)", "message": "no forbidden keys"},
			map[string]any{"expression": "!has(object.data) || object.data.size() <= 2", "messageExpression": "'too many keys: ' + string(object.data.size())", "reason": "Forbidden"},
			map[string]any{"expression": "object.metadata.name != 'plain'"},
		)))
		f.install(t, vapbPath, f.binding("msg", "msg", nil))
		r := do(t, "POST", f.cms, f.cm("bad", map[string]any{"forbidden": "x"}, nil))
		denied(t, r, http.StatusUnprocessableEntity, "msg", "msg", "no forbidden keys")
		if got := get(r.object(t), "message"); !strings.HasPrefix(got.(string), `configmaps "bad" is forbidden: `) {
			t.Errorf("message %q", got)
		}
		if r := do(t, "GET", f.cms+"/bad", nil); r.code != http.StatusNotFound {
			t.Errorf("the denied object was stored: %d", r.code)
		}
		denied(t, do(t, "POST", f.cms, f.cm("many", map[string]any{"a": "", "b": "", "c": ""}, nil)), http.StatusForbidden, "msg", "msg", "too many keys: 3")
		denied(t, do(t, "POST", f.cms, f.cm("plain", nil, nil)), http.StatusUnprocessableEntity, "msg", "msg", "failed expression: object.metadata.name != 'plain'")
		if r := do(t, "POST", f.cms, f.cm("good", map[string]any{"a": ""}, nil)); r.code != http.StatusCreated {
			t.Errorf("allowed object: %d %s", r.code, r.body)
		}
	})

	t.Run("Warn action warns and admits", func(t *testing.T) {
		f.install(t, vapPath, f.policy("warn", validations(map[string]any{"expression": "object.metadata.name != 'warned'", "message": "careful"})))
		f.install(t, vapbPath, f.binding("warn", "warn", map[string]any{"validationActions": []any{"Warn", "Audit"}}))
		r := do(t, "POST", f.cms, f.cm("warned", nil, nil))
		want := "Validation failed for ValidatingAdmissionPolicy 'warn-" + f.ns + "' with binding 'warn-" + f.ns + "': careful"
		if r.code != http.StatusCreated || !strings.Contains(r.header.Get("Warning"), want) {
			t.Errorf("got %d %v %s", r.code, r.header["Warning"], r.body)
		}
	})

	t.Run("params from ConfigMaps: by name, missing, by selector", func(t *testing.T) {
		f.install(t, vapPath, f.policy("params", map[string]any{
			"paramKind":       map[string]any{"apiVersion": "v1", "kind": "ConfigMap"},
			"matchConditions": []any{map[string]any{"name": "not-params", "expression": "!has(object.metadata.labels) || !('role' in object.metadata.labels)"}},
			"validations":     []any{map[string]any{"expression": "!has(object.data) || object.data.size() <= int(params.data.max)", "messageExpression": "'at most ' + params.data.max + ' keys'"}},
		}))
		f.install(t, vapbPath, f.binding("byname", "params", map[string]any{
			"paramRef":       map[string]any{"name": "limits", "namespace": f.ns, "parameterNotFoundAction": "Deny"},
			"matchResources": map[string]any{"objectSelector": map[string]any{"matchLabels": map[string]any{"check": "byname"}}},
		}))
		f.install(t, vapbPath, f.binding("allow", "params", map[string]any{
			"paramRef":       map[string]any{"name": "absent", "parameterNotFoundAction": "Allow"},
			"matchResources": map[string]any{"objectSelector": map[string]any{"matchLabels": map[string]any{"check": "allow"}}},
		}))
		f.install(t, vapbPath, f.binding("selector", "params", map[string]any{
			"paramRef":       map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"role": "limit"}}, "parameterNotFoundAction": "Allow"},
			"matchResources": map[string]any{"objectSelector": map[string]any{"matchLabels": map[string]any{"check": "selector"}}},
		}))
		three := map[string]any{"a": "", "b": "", "c": ""}
		// A binding that cannot be applied fails in Kubernetes' generic words, 403 Forbidden.
		r := do(t, "POST", f.cms, f.cm("noparam", three, map[string]any{"check": "byname"}))
		want := "policy 'params-" + f.ns + "' with binding 'byname-" + f.ns + "' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
		if r.code != http.StatusForbidden || get(r.object(t), "reason") != "Forbidden" || get(r.object(t), "message") != want {
			t.Errorf("got %d %s, want 403 %s", r.code, r.body, want)
		}
		if r := do(t, "POST", f.cms, f.cm("allowed", three, map[string]any{"check": "allow"})); r.code != http.StatusCreated {
			t.Errorf("missing param with Allow: %d %s", r.code, r.body)
		}
		if r := do(t, "POST", f.cms, f.cm("noselected", three, map[string]any{"check": "selector"})); r.code != http.StatusCreated {
			t.Errorf("no selected param with Allow: %d %s", r.code, r.body)
		}
		if r := do(t, "POST", f.cms, f.cm("limits", map[string]any{"max": "2"}, map[string]any{"role": "limit"})); r.code != http.StatusCreated {
			t.Fatalf("param: %d %s", r.code, r.body)
		}
		// Policies read params from the watch cache, as Kubernetes' from an informer.
		eventually(t, "the param in the watch cache", func() bool {
			return do(t, "GET", f.cms+"/limits?resourceVersion=0", nil).code == http.StatusOK
		})
		denied(t, do(t, "POST", f.cms, f.cm("byname", three, map[string]any{"check": "byname"})), http.StatusUnprocessableEntity, "params", "byname", "at most 2 keys")
		denied(t, do(t, "POST", f.cms, f.cm("selected", three, map[string]any{"check": "selector"})), http.StatusUnprocessableEntity, "params", "selector", "at most 2 keys")
		if r := do(t, "POST", f.cms, f.cm("small", map[string]any{"a": ""}, map[string]any{"check": "byname"})); r.code != http.StatusCreated {
			t.Errorf("within the param's limit: %d %s", r.code, r.body)
		}
	})

	t.Run("variables and namespaceObject", func(t *testing.T) {
		f.install(t, vapPath, f.policy("vars", map[string]any{
			"variables": []any{
				map[string]any{"name": "keys", "expression": "has(object.data) ? object.data.size() : 0"},
				map[string]any{"name": "limit", "expression": "namespaceObject.metadata.labels.policies == request.namespace ? 1 : 0"},
			},
			"validations": []any{map[string]any{"expression": "object.metadata.name != 'varcheck' || variables.keys <= variables.limit", "messageExpression": "string(variables.keys) + ' > ' + string(variables.limit)"}},
		}))
		f.install(t, vapbPath, f.binding("vars", "vars", nil))
		denied(t, do(t, "POST", f.cms, f.cm("varcheck", map[string]any{"a": "", "b": ""}, nil)), http.StatusUnprocessableEntity, "vars", "vars", "2 > 1")
	})

	t.Run("failurePolicy on an evaluation error", func(t *testing.T) {
		for _, fp := range []string{"Fail", "Ignore"} {
			name := "fp" + strings.ToLower(fp)
			f.install(t, vapPath, f.policy(name, map[string]any{
				"failurePolicy":   fp,
				"matchConditions": []any{map[string]any{"name": "mine", "expression": "object.metadata.name == '" + name + "'"}},
				"validations":     []any{map[string]any{"expression": "object.data.missing == 'x'"}},
			}))
			f.install(t, vapbPath, f.binding(name, name, nil))
		}
		r := do(t, "POST", f.cms, f.cm("fpfail", map[string]any{"a": ""}, nil))
		denied(t, r, http.StatusUnprocessableEntity, "fpfail", "fpfail", "expression 'object.data.missing == 'x'' resulted in error: no such key: missing")
		if r := do(t, "POST", f.cms, f.cm("fpignore", map[string]any{"a": ""}, nil)); r.code != http.StatusCreated {
			t.Errorf("Ignore: %d %s", r.code, r.body)
		}
	})

	t.Run("runtime cost limit", func(t *testing.T) {
		// A cost that grows with the object is limited when the expression runs.
		expr := "object.data.all(a, object.data.all(b, object.data.all(c, a + b + c != '')))"
		f.install(t, vapPath, f.policy("cost", map[string]any{
			"matchConditions": []any{map[string]any{"name": "mine", "expression": "object.metadata.name == 'costly'"}},
			"validations":     []any{map[string]any{"expression": expr}},
		}))
		f.install(t, vapbPath, f.binding("cost", "cost", nil))
		data := map[string]any{}
		for i := range 100 {
			data[fmt.Sprint("k", i)] = ""
		}
		r := do(t, "POST", f.cms, f.cm("costly", data, nil))
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "cost limit exceeded") {
			t.Errorf("got %d %s", r.code, r.body)
		}
	})

	t.Run("DELETE is judged on the stored object", func(t *testing.T) {
		p := f.policy("del", validations(map[string]any{"expression": "oldObject.metadata.name != 'kept' && object == null", "message": "stays"}))
		p["spec"].(map[string]any)["matchConstraints"].(map[string]any)["resourceRules"].([]any)[0].(map[string]any)["operations"] = []any{"DELETE"}
		f.install(t, vapPath, p)
		f.install(t, vapbPath, f.binding("del", "del", nil))
		for _, name := range []string{"kept", "gone"} {
			if r := do(t, "POST", f.cms, f.cm(name, nil, nil)); r.code != http.StatusCreated {
				t.Fatalf("create: %d %s", r.code, r.body)
			}
		}
		denied(t, do(t, "DELETE", f.cms+"/kept", nil), http.StatusUnprocessableEntity, "del", "del", "stays")
		if r := do(t, "DELETE", f.cms+"/gone", nil); r.code != http.StatusOK {
			t.Errorf("delete: %d %s", r.code, r.body)
		}
	})

	t.Run("params of a cluster-scoped custom resource", func(t *testing.T) {
		group := "params-" + f.ns + ".example.com"
		createCRD(t, map[string]any{"metadata": map[string]any{"name": "limits." + group}, "spec": map[string]any{
			"group": group, "scope": "Cluster", "names": map[string]any{"plural": "limits", "singular": "limit", "kind": "Limit"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{"openAPIV3Schema": map[string]any{
				"type": "object", "properties": map[string]any{"max": map[string]any{"type": "integer"}}}}}},
		}})
		t.Cleanup(func() { do(t, "DELETE", crdsPath+"/limits."+group, nil) })
		if r := do(t, "POST", "/apis/"+group+"/v1/limits", map[string]any{"apiVersion": group + "/v1", "kind": "Limit", "metadata": map[string]any{"name": "one"}, "max": 1}); r.code != http.StatusCreated {
			t.Fatalf("create param: %d %s", r.code, r.body)
		}
		// Params are read from the watch cache: a consistent list waits until it holds the one
		// just created.
		if r := do(t, "GET", "/apis/"+group+"/v1/limits", nil); r.code != http.StatusOK {
			t.Fatalf("list params: %d %s", r.code, r.body)
		}
		f.install(t, vapPath, f.policy("crparams", map[string]any{
			"paramKind":       map[string]any{"apiVersion": group + "/v1", "kind": "Limit"},
			"matchConditions": []any{map[string]any{"name": "mine", "expression": "object.metadata.name.startsWith('cr-')"}},
			"validations":     []any{map[string]any{"expression": "!has(object.data) || object.data.size() <= params.max", "messageExpression": "params.kind + ' ' + params.metadata.name"}},
		}))
		f.install(t, vapbPath, f.binding("crparams", "crparams", map[string]any{"paramRef": map[string]any{"name": "one", "parameterNotFoundAction": "Deny"}}))
		denied(t, do(t, "POST", f.cms, f.cm("cr-big", map[string]any{"a": "", "b": ""}, nil)), http.StatusUnprocessableEntity, "crparams", "crparams", "Limit one")
		if r := do(t, "POST", f.cms, f.cm("cr-small", map[string]any{"a": ""}, nil)); r.code != http.StatusCreated {
			t.Errorf("within the limit: %d %s", r.code, r.body)
		}
	})

	t.Run("policies do not judge admission configurations", func(t *testing.T) {
		// It denies everything it matches: the admission configurations, and (to show it is in
		// force) ConfigMaps of this namespace.
		f.install(t, vapPath, map[string]any{"metadata": map[string]any{"name": "self-" + f.ns}, "spec": map[string]any{
			"matchConstraints": map[string]any{
				"resourceRules": []any{
					map[string]any{"operations": []any{"*"}, "apiGroups": []any{"admissionregistration.k8s.io"}, "apiVersions": []any{"*"}, "resources": []any{"*"}},
					map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"configmaps"}},
				},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"policies": f.ns}},
			},
			"validations": []any{map[string]any{"expression": "false"}},
		}})
		f.install(t, vapbPath, f.binding("self", "self", nil))
		if r := do(t, "POST", f.cms, f.cm("self-probe", nil, nil)); r.code != http.StatusUnprocessableEntity {
			t.Fatalf("the deny-all policy is not in force: %d %s", r.code, r.body)
		}
		f.install(t, vapPath, f.policy("after", validations(map[string]any{"expression": "true"})))
	})
}

func TestAdmissionCELRefusedWhenWritten(t *testing.T) {
	f := newPolicyFixture(t)
	ten := "[0,1,2,3,4,5,6,7,8,9]"
	costly := ten + ".all(a, " + ten + ".all(b, " + ten + ".all(c, " + ten + ".all(d, " + ten + ".all(e, " + ten + ".all(g, a+b+c+d+e+g >= 0))))))"
	cases := []struct {
		name, path string
		obj        map[string]any
		field, msg string
	}{
		{"validation does not compile", vapPath, f.policy("c1", validations(map[string]any{"expression": "object.data.("})),
			"spec.validations[0].expression", "compilation failed: "},
		{"validation not a bool", vapPath, f.policy("c2", validations(map[string]any{"expression": "1 + 1"})),
			"spec.validations[0].expression", "must evaluate to bool but got int"},
		{"messageExpression not a string", vapPath, f.policy("c3", validations(map[string]any{"expression": "true", "messageExpression": "1"})),
			"spec.validations[0].messageExpression", "must evaluate to string but got int"},
		{"variable does not compile", vapPath, f.policy("c4", map[string]any{"variables": []any{map[string]any{"name": "v", "expression": "nope("}}, "validations": []any{map[string]any{"expression": "true"}}}),
			"spec.variables[0].expression", "compilation failed: "},
		{"cost over the budget whatever the object", vapPath, f.policy("c9", validations(map[string]any{"expression": costly})),
			"spec.validations[0].expression", "estimated expression cost exceeds budget by factor of"},
		{"webhook match condition over the budget", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", map[string]any{
			"metadata": map[string]any{"name": "c10-" + f.ns},
			"webhooks": []any{map[string]any{"name": "c10.example.com", "clientConfig": map[string]any{"url": "https://example.com/x"}, "sideEffects": "None", "admissionReviewVersions": []any{"v1"},
				"matchConditions": []any{map[string]any{"name": "m", "expression": costly}}}},
		}, "webhooks[0].matchConditions[0].expression", "estimated expression cost exceeds budget"},
		{"mutation does not compile", mapPath, f.policy("c7", mutations(applyConfig("Object{"))),
			"spec.mutations[0].applyConfiguration.expression", "compilation failed: "},
		{"apply configuration not an Object", mapPath, f.policy("c8", mutations(applyConfig("'x'"))),
			"spec.mutations[0].applyConfiguration.expression", "must evaluate to Object but got string"},
		{"match condition of a policy", vapPath, f.policy("c5", map[string]any{"matchConditions": []any{map[string]any{"name": "m", "expression": "unknownVar"}}, "validations": []any{map[string]any{"expression": "true"}}}),
			"spec.matchConditions[0].expression", "compilation failed: "},
		{"match condition of a webhook", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", map[string]any{
			"metadata": map[string]any{"name": "c6-" + f.ns},
			"webhooks": []any{map[string]any{"name": "c6.example.com", "clientConfig": map[string]any{"url": "https://example.com/x"}, "sideEffects": "None", "admissionReviewVersions": []any{"v1"},
				"matchConditions": []any{map[string]any{"name": "m", "expression": "object.("}}}},
		}, "webhooks[0].matchConditions[0].expression", "compilation failed: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", c.path, c.obj)
			if r.code != http.StatusUnprocessableEntity {
				t.Fatalf("got %d %s", r.code, r.body)
			}
			causes, _ := get(r.object(t), "details", "causes").([]any)
			found := false
			for _, cause := range causes {
				if get(cause, "field") == c.field && strings.Contains(get(cause, "message").(string), c.msg) {
					found = true
				}
			}
			if !found {
				t.Errorf("no cause on %s with %q: %s", c.field, c.msg, r.body)
			}
		})
	}
}

const (
	mapPath  = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
	mapbPath = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings"
)

func mutations(m ...map[string]any) map[string]any {
	list := make([]any, len(m))
	for i := range m {
		list[i] = m[i]
	}
	return map[string]any{"mutations": list, "reinvocationPolicy": "Never"}
}

func applyConfig(expr string) map[string]any {
	return map[string]any{"patchType": "ApplyConfiguration", "applyConfiguration": map[string]any{"expression": expr}}
}

func TestMutatingAdmissionPolicies(t *testing.T) {
	f := newPolicyFixture(t)
	if r := do(t, "PATCH", "/api/v1/namespaces/"+f.ns, `{"metadata":{"labels":{"webhooks":"`+f.ns+`"}}}`, "Content-Type", "application/merge-patch+json"); r.code != http.StatusOK {
		t.Fatalf("label namespace: %d %s", r.code, r.body)
	}
	mpBinding := func(name, policy string, spec map[string]any) map[string]any {
		b := f.binding(name, policy, spec)
		delete(b["spec"].(map[string]any), "validationActions")
		return b
	}
	if r := do(t, "POST", f.cms, f.cm("defaults", map[string]any{"team": "blue"}, nil)); r.code != http.StatusCreated {
		t.Fatalf("param: %d %s", r.code, r.body)
	}

	t.Run("policies mutate before the webhooks and are reinvoked after them", func(t *testing.T) {
		a := newAdmissionServer(t)
		policy := f.policy("team", mutations(
			applyConfig(`Object{data: {"team": params.data.team}}`),
			applyConfig(`Object{metadata: Object.metadata{annotations: {"policy-saw-b": object.metadata.?labels[?"b"].orValue("no")}}}`),
		))
		policy["spec"].(map[string]any)["paramKind"] = map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}
		policy["spec"].(map[string]any)["reinvocationPolicy"] = "IfNeeded"
		policy["spec"].(map[string]any)["matchConditions"] = []any{map[string]any{"name": "not-params", "expression": "object.metadata.name != 'defaults'"}}
		f.install(t, mapPath, policy)
		f.install(t, mapbPath, mpBinding("team", "team", map[string]any{"paramRef": map[string]any{"name": "defaults", "parameterNotFoundAction": "Deny"}}))
		f.install(t, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", a.webhookConfig("MutatingWebhookConfiguration", "b-mutate", f.ns, "/mutate-b", nil))
		// Params come from the watch cache.
		if r := do(t, "GET", f.cms+"?resourceVersion=0", nil); r.code != http.StatusOK {
			t.Fatal(r.body)
		}

		r := do(t, "POST", f.cms, f.cm("mutated", map[string]any{"own": "x"}, nil))
		if r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		o := r.object(t)
		if get(o, "data", "team") != "blue" || get(o, "data", "own") != "x" || get(o, "metadata", "labels", "b") != "set" ||
			get(o, "metadata", "annotations", "policy-saw-b") != "set" {
			t.Errorf("not mutated as expected: %s", r.body)
		}
		// An update is mutated too, and a dry run changes nothing stored.
		r = do(t, "PUT", f.cms+"/mutated", map[string]any{"metadata": map[string]any{"name": "mutated"}, "data": map[string]any{"team": "red"}})
		if r.code != http.StatusOK || get(r.object(t), "data", "team") != "blue" {
			t.Errorf("update: %d %s", r.code, r.body)
		}
		r = do(t, "POST", f.cms+"?dryRun=All", f.cm("dry", nil, nil))
		if r.code != http.StatusCreated || get(r.object(t), "data", "team") != "blue" {
			t.Errorf("dry run: %d %s", r.code, r.body)
		}
		if r := do(t, "GET", f.cms+"/dry", nil); r.code != http.StatusNotFound {
			t.Errorf("dry run stored: %d", r.code)
		}
	})

	t.Run("a failing policy refuses the write per its failure policy", func(t *testing.T) {
		bad := f.policy("bad", mutations(map[string]any{"patchType": "JSONPatch", "jsonPatch": map[string]any{"expression": `[JSONPatch{op: "remove", path: "/data/missing"}]`}}))
		bad["spec"].(map[string]any)["matchConditions"] = []any{map[string]any{"name": "bad-only", "expression": "object.metadata.name.startsWith('bad')"}}
		f.install(t, mapPath, bad)
		f.install(t, mapbPath, mpBinding("bad", "bad", nil))
		r := do(t, "POST", f.cms, f.cm("bad-one", map[string]any{"a": "b"}, nil))
		want := "policy 'bad-" + f.ns + "' with binding 'bad-" + f.ns + "' denied request: JSON Patch: "
		if r.code != http.StatusForbidden || get(r.object(t), "reason") != "Invalid" || !strings.Contains(get(r.object(t), "message").(string), want) {
			t.Errorf("got %d %s, want 403 Invalid ...%s", r.code, r.body, want)
		}
		if r := do(t, "GET", f.cms+"/bad-one", nil); r.code != http.StatusNotFound {
			t.Errorf("refused object stored: %d", r.code)
		}
		if r := do(t, "PATCH", mapPath+"/bad-"+f.ns, `{"spec":{"failurePolicy":"Ignore"}}`, "Content-Type", "application/merge-patch+json"); r.code != http.StatusOK {
			t.Fatalf("patch policy: %d %s", r.code, r.body)
		}
		eventually(t, "the Ignore policy admitting", func() bool {
			r := do(t, "POST", f.cms, f.cm("bad-two", map[string]any{"a": "b"}, nil))
			return r.code == http.StatusCreated
		})
	})

	t.Run("a scale write is mutated as its Scale", func(t *testing.T) {
		p := map[string]any{"metadata": map[string]any{"name": "cap-" + f.ns}, "spec": map[string]any{
			"matchConstraints": map[string]any{
				"resourceRules":     []any{map[string]any{"operations": []any{"UPDATE"}, "apiGroups": []any{"apps"}, "apiVersions": []any{"v1"}, "resources": []any{"deployments/scale"}}},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"policies": f.ns}},
			},
			"matchConditions":    []any{map[string]any{"name": "too-many", "expression": "object.spec.replicas > 3"}},
			"mutations":          []any{applyConfig(`Object{spec: Object.spec{replicas: 3}}`)},
			"reinvocationPolicy": "Never",
		}}
		f.install(t, mapPath, p)
		f.install(t, mapbPath, mpBinding("cap", "cap", nil))
		deployments := "/apis/apps/v1/namespaces/" + f.ns + "/deployments"
		d := map[string]any{"metadata": map[string]any{"name": "capped"}, "spec": map[string]any{"replicas": 1,
			"selector": map[string]any{"matchLabels": map[string]any{"app": "capped"}}, "template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "capped"}}, "spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}}}}}
		if r := do(t, "POST", deployments, d); r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		r := do(t, "PATCH", deployments+"/capped/scale", `{"spec":{"replicas":10}}`, "Content-Type", "application/merge-patch+json")
		if r.code != http.StatusOK || get(r.object(t), "spec", "replicas") != 3.0 {
			t.Errorf("scale to 10, capped at 3: %d %s", r.code, r.body)
		}
		if got := get(do(t, "GET", deployments+"/capped", nil).object(t), "spec", "replicas"); got != 3.0 {
			t.Errorf("stored replicas %v, want 3", got)
		}
	})

	t.Run("custom resources merge by their schema", func(t *testing.T) {
		g := "map-" + f.ns + ".example.com"
		createCRD(t, crdOf(t, g, widgetCRD))
		t.Cleanup(func() { do(t, "DELETE", crdsPath+"/widgets."+g, nil) })
		p := map[string]any{"metadata": map[string]any{"name": "widgets-" + f.ns}, "spec": map[string]any{
			"matchConstraints":   map[string]any{"resourceRules": []any{map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{g}, "apiVersions": []any{"*"}, "resources": []any{"widgets"}}}},
			"mutations":          []any{applyConfig(`Object{spec: Object.spec{replicas: 3}}`)},
			"reinvocationPolicy": "Never",
		}}
		f.install(t, mapPath, p)
		f.install(t, mapbPath, mpBinding("widgets", "widgets", nil))
		w := widget("w", "red")
		w["apiVersion"] = g + "/v1"
		r := do(t, "POST", "/apis/"+g+"/v1/namespaces/"+f.ns+"/widgets", w)
		if r.code != http.StatusCreated || get(r.object(t), "spec", "replicas") != 3.0 || get(r.object(t), "spec", "color") != "red" {
			t.Errorf("create: %d %s", r.code, r.body)
		}
	})
}

func TestValidatingAdmissionPolicyTypeChecking(t *testing.T) {
	f := newPolicyFixture(t)
	name := "typed-" + f.ns
	p := map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{
		"matchConstraints": map[string]any{"resourceRules": []any{
			map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{"apps"}, "apiVersions": []any{"v1"}, "resources": []any{"deployments"}},
		}},
		"validations": []any{
			map[string]any{"expression": "object.spec.replicass > 1", "messageExpression": "'replicas: ' + string(object.spec.replicas)"},
		},
	}}
	f.install(t, vapPath, p)
	status := func(generation int64) map[string]any {
		var st map[string]any
		eventually(t, fmt.Sprintf("observedGeneration %d", generation), func() bool {
			r := do(t, "GET", vapPath+"/"+name, nil)
			st, _ = get(r.object(t), "status").(map[string]any)
			g, _ := get(st, "observedGeneration").(float64)
			return int64(g) == generation
		})
		return st
	}
	st := status(1)
	warnings, _ := get(st, "typeChecking", "expressionWarnings").([]any)
	if len(warnings) != 1 {
		t.Fatalf("expressionWarnings %v, want one", st)
	}
	w := warnings[0].(map[string]any)
	if w["fieldRef"] != "spec.validations[0].expression" ||
		!strings.HasPrefix(w["warning"].(string), "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replicass'") {
		t.Errorf("warning %v", w)
	}
	r := do(t, "GET", vapPath+"/"+name, nil)
	var managers []string
	for _, m := range get(r.object(t), "metadata", "managedFields").([]any) {
		managers = append(managers, fmt.Sprint(get(m, "manager"), "/", get(m, "operation"), "/", get(m, "subresource")))
	}
	if !strings.Contains(strings.Join(managers, " "), "validatingadmissionpolicy-status/Apply/status") {
		t.Errorf("managedFields %v", managers)
	}

	fix := `[{"op":"replace","path":"/spec/validations/0/expression","value":"object.spec.replicas > 1"}]`
	if r := do(t, "PATCH", vapPath+"/"+name, fix, "Content-Type", "application/json-patch+json"); r.code != http.StatusOK {
		t.Fatalf("fix: %d %s", r.code, r.body)
	}
	st = status(2)
	if tc, ok := st["typeChecking"].(map[string]any); !ok || len(tc) != 0 {
		t.Errorf("typeChecking %v, want {}", st["typeChecking"])
	}
}

// Policies whose expressions check against the served kinds' schemas get an empty
// typeChecking: a large built-in kind with params, and one whose schema contains itself.
func TestValidatingAdmissionPolicyTypeCheckingPasses(t *testing.T) {
	ns := namespace(t)
	for _, tc := range []struct {
		name, group, resource, expr string
		paramKind                   map[string]any
	}{
		{"pods", "", "pods", "object.spec.containers.all(c, c.image.startsWith(params.data.prefix)) && object.metadata.labels['app'] != ''",
			map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}},
		{"crds", "apiextensions.k8s.io", "customresourcedefinitions", "object.spec.versions.all(v, v.schema.openAPIV3Schema.type == 'object')", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.name + "-" + ns
			spec := map[string]any{
				"matchConstraints": map[string]any{"resourceRules": []any{
					map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{tc.group}, "apiVersions": []any{"v1"}, "resources": []any{tc.resource}},
				}},
				// The second, misspelt, shows the kind's schema was checked at all: a
				// schema that could not be built would leave typeChecking empty too.
				"validations": []any{map[string]any{"expression": tc.expr}, map[string]any{"expression": "object.spec.nope == 1"}},
			}
			if tc.paramKind != nil {
				spec["paramKind"] = tc.paramKind
			}
			if r := do(t, "POST", vapPath, map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}); r.code != http.StatusCreated {
				t.Fatalf("create: %d %s", r.code, r.body)
			}
			t.Cleanup(func() { do(t, "DELETE", vapPath+"/"+name, nil) })
			var st any
			eventually(t, "observedGeneration 1", func() bool {
				st = get(do(t, "GET", vapPath+"/"+name, nil).object(t), "status")
				return get(st, "observedGeneration") == float64(1)
			})
			warnings, _ := get(st, "typeChecking", "expressionWarnings").([]any)
			if len(warnings) != 1 || get(warnings[0], "fieldRef") != "spec.validations[1].expression" ||
				!strings.Contains(fmt.Sprint(get(warnings[0], "warning")), "undefined field 'nope'") {
				t.Errorf("status %v, want one warning, on the misspelt validation", st)
			}
		})
	}
}

// A policy and binding written through this apiserver judge the very next write, and a
// deleted binding stops judging at once: admission reads its configurations from the watch
// cache only once the cache holds the server's own writes of them.
func TestAdmissionConfigurationsReadTheirOwnWrites(t *testing.T) {
	f := newPolicyFixture(t)
	f.install(t, vapPath, f.policy("own", validations(map[string]any{"expression": "false", "message": "refused"})))
	binding := f.binding("own", "own", nil)
	name := get(binding, "metadata", "name").(string)
	t.Cleanup(func() { do(t, "DELETE", vapbPath+"/"+name, nil) })
	for i := range 5 {
		if r := do(t, "POST", vapbPath, binding); r.code != http.StatusCreated {
			t.Fatalf("create binding: %d %s", r.code, r.body)
		}
		if r := do(t, "POST", f.cms, f.cm(fmt.Sprintf("refused-%d", i), nil, nil)); r.code != http.StatusUnprocessableEntity {
			t.Errorf("round %d: a write right after the binding was created: %d %s", i, r.code, r.body)
		}
		if r := do(t, "DELETE", vapbPath+"/"+name, nil); r.code != http.StatusOK {
			t.Fatalf("delete binding: %d %s", r.code, r.body)
		}
		if r := do(t, "POST", f.cms, f.cm(fmt.Sprintf("admitted-%d", i), nil, nil)); r.code != http.StatusCreated {
			t.Errorf("round %d: a write right after the binding was deleted: %d %s", i, r.code, r.body)
		}
	}
}
