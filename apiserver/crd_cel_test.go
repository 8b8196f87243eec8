package apiserver_test

import (
	"net/http"
	"slices"
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
		!strings.Contains(string(r.body), `spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule`) {
		t.Fatalf("CRD with a rule that does not compile: %d %s", r.code, r.body)
	}

	get(spec, "versions", 0, "schema", "openAPIV3Schema", "properties", "spec").(map[string]any)["x-kubernetes-validations"] =
		[]any{map[string]any{"rule": "self.class.split('').all(a, self.class.split('').all(b, a == b))"}}
	get(spec, "versions", 0, "schema", "openAPIV3Schema", "properties", "spec", "properties", "class").(map[string]any)["maxLength"] = 1000000
	r = do(t, "POST", crdPath, bad)
	if r.code != http.StatusUnprocessableEntity ||
		!strings.Contains(string(r.body), `spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of`) {
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

// libsCRD has rules calling Kubernetes' URL, IP, CIDR, format and semver libraries, and a
// scale subresource.
const libsCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: libs.{{g}}}
spec:
  group: {{g}}
  scope: Namespaced
  names: {plural: libs, singular: lib, kind: Lib, listKind: LibList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          status:
            type: object
            properties:
              replicas: {type: integer}
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "isURL(self.endpoint) && url(self.endpoint).getScheme() == 'https'"
              message: "endpoint must be an https URL"
            - rule: "cidr(self.network).containsIP(self.address)"
              message: "address must be in network"
            - rule: "ip(self.address).family() == 4"
              fieldPath: ".address"
            - rule: "!format.dns1123Label().validate(self.name).hasValue()"
              messageExpression: "'name ' + self.name + ' is not a DNS label'"
              fieldPath: ".name"
            - rule: "semver(self.version, true).isGreaterThan(semver('1.0.0'))"
              message: "version must be above 1.0.0"
            properties:
              replicas: {type: integer}
              endpoint: {type: string, maxLength: 200}
              address: {type: string, maxLength: 50}
              network: {type: string, maxLength: 50}
              name: {type: string, maxLength: 63}
              version: {type: string, maxLength: 30}
`

// Rules using Kubernetes' CEL libraries judge objects as kube-apiserver v1.36 does (the
// messages below are the reference's), and a rule misusing them refuses the CRD.
func TestCRDValidationRuleLibraries(t *testing.T) {
	ns := namespace(t)
	crd := crdOf(t, "libs.example.com", libsCRD)

	bad := crdOf(t, "badlibs.example.com", libsCRD)
	rules := get(bad, "spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-validations").([]any)
	rules[2].(map[string]any)["rule"] = "ip(self.replicas).family() == 4 && semver(self.version).major(1) == 1"
	r := do(t, "POST", crdsPath, bad)
	for _, want := range []string{
		`spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[2].rule: Invalid value: `,
		`compilation failed: ERROR: \u003cinput\u003e:1:3: found no matching overload for 'ip' applied to '(int)'`,
		`ERROR: \u003cinput\u003e:1:62: found no matching overload for 'major' applied to 'kubernetes.Semver.(int)'`,
	} {
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), want) {
			t.Fatalf("CRD with a rule that does not compile: %d %s\nwant %s", r.code, r.body, want)
		}
	}

	// The list validate returns has no bound, so joining it is refused, as kube-apiserver does.
	costly := crdOf(t, "costlylibs.example.com", libsCRD)
	rules = get(costly, "spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-validations").([]any)
	rules[3].(map[string]any)["messageExpression"] = "format.dns1123Label().validate(self.name).value().join(', ')"
	r = do(t, "POST", crdsPath, costly)
	if want := `spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[3].messageExpression: Forbidden: estimated messageExpression cost exceeds budget by factor of more than 100x`; r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), want) {
		t.Fatalf("CRD with a messageExpression too expensive: %d %s\nwant %s", r.code, r.body, want)
	}

	createCRD(t, crd)
	t.Cleanup(func() { do(t, "DELETE", crdsPath+"/libs.libs.example.com", nil) })

	base := "/apis/libs.example.com/v1/namespaces/" + ns + "/libs"
	lib := func(name, endpoint, address, network, dnsName, version string) map[string]any {
		return map[string]any{"apiVersion": "libs.example.com/v1", "kind": "Lib", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"endpoint": endpoint, "address": address, "network": network, "name": dnsName, "version": version}}
	}
	cases := []struct {
		name string
		obj  map[string]any
		want []string // the causes' messages; none when the object is valid
	}{
		{name: "valid", obj: lib("ok", "https://example.com/x", "10.1.2.3", "10.0.0.0/8", "my-name", "v1.2")},
		{name: "every rule broken", obj: lib("bad", "http://example.com", "10.1.2.3", "192.168.0.0/16", "Bad_Name", "v0.9"), want: []string{
			"spec: Invalid value: endpoint must be an https URL",
			"spec: Invalid value: address must be in network",
			"spec.name: Invalid value: name Bad_Name is not a DNS label",
			"spec: Invalid value: version must be above 1.0.0",
		}},
		{name: "evaluation errors", obj: lib("evalerr", "https://example.com", "nope", "10.0.0.0/8", "ok", "2"), want: []string{
			`spec: Invalid value: "object": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: address must be in network`,
			`spec: Invalid value: "object": IP Address "nope" parse error during conversion from string: ParseAddr("nope"): unable to parse IP evaluating rule: ip(self.address).family() == 4`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", base, c.obj)
			if len(c.want) == 0 {
				if r.code != http.StatusCreated {
					t.Fatalf("create: %d %s", r.code, r.body)
				}
				return
			}
			if r.code != http.StatusUnprocessableEntity {
				t.Fatalf("create: %d %s", r.code, r.body)
			}
			var got []string
			for _, cause := range get(r.object(t), "details", "causes").([]any) {
				got = append(got, get(cause, "field").(string)+": "+get(cause, "message").(string))
			}
			msg := get(r.object(t), "message").(string)
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q\nlacks %q", msg, w)
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("causes %q, want %d", got, len(c.want))
			}
		})
	}
}

// Tightening a CRD's schema and rules does not lock the objects written before: an update
// is judged only on what it changes, and the rules that fail on unchanged values come back
// as warnings (what kube-apiserver v1.36 answers to the same requests).
func TestCRDValidationRatcheting(t *testing.T) {
	ns := namespace(t)
	crd := crdOf(t, "ratchet.example.com", libsCRD)
	spec := get(crd, "spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec").(map[string]any)
	spec["properties"].(map[string]any)["tight"] = map[string]any{"type": "string", "maxLength": 30}
	createCRD(t, crd)
	t.Cleanup(func() { do(t, "DELETE", crdsPath+"/libs.ratchet.example.com", nil) })
	base := "/apis/ratchet.example.com/v1/namespaces/" + ns + "/libs"
	obj := map[string]any{"apiVersion": "ratchet.example.com/v1", "kind": "Lib", "metadata": map[string]any{"name": "r1"},
		"spec": map[string]any{"endpoint": "https://example.com", "address": "10.1.2.3", "network": "10.0.0.0/8", "name": "ok", "version": "2", "tight": "abcdefghij", "replicas": 1}}
	if r := do(t, "POST", base, obj); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}

	crd = do(t, "GET", crdsPath+"/libs.ratchet.example.com", nil).object(t)
	spec = get(crd, "spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec").(map[string]any)
	spec["properties"].(map[string]any)["tight"] = map[string]any{"type": "string", "maxLength": 5,
		"x-kubernetes-validations": []any{map[string]any{"rule": "self.size() < 4", "message": "tight rule"}}}
	spec["x-kubernetes-validations"] = append(spec["x-kubernetes-validations"].([]any), map[string]any{"rule": "self.address != '10.1.2.3'", "message": "address rule"})
	if r := do(t, "PUT", crdsPath+"/libs.ratchet.example.com", crd); r.code != http.StatusOK {
		t.Fatalf("tighten CRD: %d %s", r.code, r.body)
	}
	other := deepCopyJSON(t, obj)
	other["metadata"] = map[string]any{"name": "r2"}
	// A dry run: a probe that came before the new schema must not store r2 (every later probe
	// would then get 409 AlreadyExists).
	eventually(t, "the tightened schema", func() bool { return do(t, "POST", base+"?dryRun=All", other).code == http.StatusUnprocessableEntity })

	patch := func(body string) response {
		return do(t, "PATCH", base+"/r1", body, "Content-Type", "application/merge-patch+json")
	}
	cases := []struct {
		name, patch string
		code        int
		message     string
		warnings    []string
	}{
		{name: "spec unchanged: every failure ratchets", patch: `{"metadata":{"labels":{"a":"b"}}}`, code: http.StatusOK, warnings: []string{
			`299 - "spec: Invalid value: address rule"`,
			`299 - "spec.tight: Invalid value: \"abcdefghij\": tight rule"`,
		}},
		{name: "spec changed: its rules judge it, the unchanged field still ratchets", patch: `{"spec":{"replicas":2}}`, code: http.StatusUnprocessableEntity,
			message:  `Lib.ratchet.example.com "r1" is invalid: spec: Invalid value: address rule`,
			warnings: []string{`299 - "spec.tight: Invalid value: \"abcdefghij\": tight rule"`}},
		{name: "changed field too long", patch: `{"spec":{"tight":"zyxwvutsrq"}}`, code: http.StatusUnprocessableEntity,
			message: `Lib.ratchet.example.com "r1" is invalid: [spec.tight: Too long: may not be more than 5 bytes, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := patch(c.patch)
			if r.code != c.code {
				t.Fatalf("patch: %d %s", r.code, r.body)
			}
			if c.message != "" && get(r.object(t), "message") != c.message {
				t.Errorf("message %q\nwant    %q", get(r.object(t), "message"), c.message)
			}
			if got := r.header.Values("Warning"); !slices.Equal(got, c.warnings) {
				t.Errorf("warnings %q\nwant     %q", got, c.warnings)
			}
		})
	}
}
