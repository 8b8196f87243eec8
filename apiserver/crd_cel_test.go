package apiserver_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A CRD with x-kubernetes-validations: objects breaking a rule, or a transition rule on
// update, are refused with 422 and the rule's message at the rule's path; a rule that does
// not compile refuses the CRD.
func TestCRDValidationRules(t *testing.T) {
	ns := namespace(t)
	const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "gadgets.cel.example.com"},
		"spec": map[string]any{
			"group": "cel.example.com",
			"scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"spec": map[string]any{
							"type": "object",
							"x-kubernetes-validations": []any{
								map[string]any{"rule": "self.min <= self.max", "message": "min must not exceed max"},
							},
							"properties": map[string]any{
								"min": map[string]any{"type": "integer"},
								"max": map[string]any{"type": "integer"},
								"class": map[string]any{"type": "string", "maxLength": 20,
									"x-kubernetes-validations": []any{
										map[string]any{"rule": "self == oldSelf", "message": "class is immutable"},
									}},
							},
						},
					},
				}},
			}},
		},
	}
	bad := deepCopyJSON(t, crd)
	bad["metadata"].(map[string]any)["name"] = "bads.cel.example.com"
	spec := bad["spec"].(map[string]any)
	spec["names"] = map[string]any{"plural": "bads", "kind": "Bad"}
	get(spec, "versions", 0, "schema", "openAPIV3Schema", "properties", "spec").(map[string]any)["x-kubernetes-validations"] =
		[]any{map[string]any{"rule": "self.minimum <= self.max"}}
	r := do(t, "POST", crdPath, bad)
	if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "undefined field 'minimum'") ||
		!strings.Contains(string(r.body), `spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule`) {
		t.Fatalf("CRD with a rule that does not compile: %d %s", r.code, r.body)
	}

	get(spec, "versions", 0, "schema", "openAPIV3Schema", "properties", "spec").(map[string]any)["x-kubernetes-validations"] =
		[]any{map[string]any{"rule": "self.class.split('').all(a, self.class.split('').all(b, a == b))"}}
	get(spec, "versions", 0, "schema", "openAPIV3Schema", "properties", "spec", "properties", "class").(map[string]any)["maxLength"] = 1000000
	r = do(t, "POST", crdPath, bad)
	if r.code != http.StatusUnprocessableEntity ||
		!strings.Contains(string(r.body), `spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of`) {
		t.Fatalf("CRD with a rule too expensive: %d %s", r.code, r.body)
	}

	if r := do(t, "POST", crdPath, crd); r.code != http.StatusCreated {
		t.Fatalf("create CRD: %d %s", r.code, r.body)
	}
	t.Cleanup(func() { do(t, "DELETE", crdPath+"/gadgets.cel.example.com", nil) })
	waitEstablished(t, crdPath+"/gadgets.cel.example.com")

	base := "/apis/cel.example.com/v1/namespaces/" + ns + "/gadgets"
	gadget := func(min, max int, class string) map[string]any {
		return map[string]any{"apiVersion": "cel.example.com/v1", "kind": "Gadget", "metadata": map[string]any{"name": "g"},
			"spec": map[string]any{"min": min, "max": max, "class": class}}
	}
	r = do(t, "POST", base, gadget(3, 1, "a"))
	wantInvalid(t, "create breaking a rule", r, "spec", "spec: Invalid value: min must not exceed max")

	r = do(t, "POST", base, gadget(3, 1, strings.Repeat("x", 21)))
	if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "Too long") ||
		!strings.Contains(string(r.body), "some validation rules were not checked because the object was invalid") {
		t.Errorf("create with a value too long: %d %s", r.code, r.body)
	}

	r = do(t, "POST", base, gadget(1, 3, "a"))
	if r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	update := gadget(1, 3, "b")
	update["metadata"].(map[string]any)["resourceVersion"] = get(r.object(t), "metadata", "resourceVersion")
	r = do(t, "PUT", base+"/g", update)
	wantInvalid(t, "update breaking a transition rule", r, "spec.class", `spec.class: Invalid value: "b": class is immutable`)

	update["spec"].(map[string]any)["class"] = "a"
	update["spec"].(map[string]any)["max"] = 5
	if r := do(t, "PUT", base+"/g", update); r.code != http.StatusOK {
		t.Fatalf("update keeping the rules: %d %s", r.code, r.body)
	}
}

// wantInvalid checks a 422 Status with one cause at field whose message is msg.
func wantInvalid(t *testing.T, what string, r response, fieldPath, msg string) {
	t.Helper()
	if r.code != http.StatusUnprocessableEntity {
		t.Fatalf("%s: %d %s", what, r.code, r.body)
	}
	st := r.object(t)
	if get(st, "reason") != "Invalid" || !strings.Contains(get(st, "message").(string), msg) {
		t.Errorf("%s: status %s", what, r.body)
	}
	causes, _ := get(st, "details", "causes").([]any)
	if len(causes) != 1 || get(causes[0], "field") != fieldPath {
		t.Errorf("%s: causes %v, want one at %s", what, causes, fieldPath)
	}
}

// waitEstablished waits until the CRD at path has condition Established=True.
func waitEstablished(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r := do(t, "GET", path, nil)
		conds, _ := get(r.object(t), "status", "conditions").([]any)
		for _, c := range conds {
			if get(c, "type") == "Established" && get(c, "status") == "True" {
				return
			}
		}
	}
	t.Fatalf("%s never became Established", path)
}

func deepCopyJSON(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	out := map[string]any{}
	for k, v := range m {
		switch x := v.(type) {
		case map[string]any:
			out[k] = deepCopyJSON(t, x)
		case []any:
			l := make([]any, len(x))
			for i, e := range x {
				if em, ok := e.(map[string]any); ok {
					l[i] = deepCopyJSON(t, em)
				} else {
					l[i] = e
				}
			}
			out[k] = l
		default:
			out[k] = v
		}
	}
	return out
}
