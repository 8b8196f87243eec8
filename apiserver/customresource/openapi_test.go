package customresource

import (
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func TestCompileOpenAPI(t *testing.T) {
	var components map[string]*apiextv1.JSONSchemaProps
	err := yaml.Unmarshal([]byte(`
Widget:
  type: object
  properties:
    metadata:
      allOf: [{$ref: "#/components/schemas/Meta"}]
      description: wrapped to carry a description
    spec: {$ref: "#/components/schemas/Spec"}
Meta:
  type: object
  properties:
    name: {type: string}
    labels: {type: object, additionalProperties: {type: string}}
Spec:
  type: object
  properties:
    parts: {type: array, items: {$ref: "#/components/schemas/Spec"}}
    meta: {$ref: "#/components/schemas/Meta"}
Broken:
  type: object
  properties:
    x: {$ref: "#/components/schemas/Missing"}
`), &components)
	if err != nil {
		t.Fatal(err)
	}
	s, err := CompileOpenAPI(components, "Widget")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		got  *Schema
		want string // type and sorted property names
	}{
		{"the allOf-wrapped reference", s.Properties["metadata"], "object labels,name"},
		{"a map of a reference", s.Properties["metadata"].Properties["labels"].Additional, "string "},
		{"a direct reference", s.Properties["spec"], "object meta,parts"},
		{"a reference met twice, not recursively", s.Properties["spec"].Properties["meta"], "object labels,name"},
		{"a type inside itself is an object without properties", s.Properties["spec"].Properties["parts"].Items, "object "},
	} {
		if tc.got == nil {
			t.Errorf("%s: missing", tc.name)
			continue
		}
		if got := tc.got.Type + " " + strings.Join(sortedKeys(tc.got.Properties), ","); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, err := CompileOpenAPI(components, "Broken"); err == nil || !strings.Contains(err.Error(), `"#/components/schemas/Missing" not found`) {
		t.Errorf("missing reference: %v", err)
	}
	if _, err := CompileOpenAPI(components, "Nothing"); err == nil {
		t.Error("missing root: no error")
	}
}
