package customresource

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// schemaOf parses a JSONSchemaProps from YAML.
func schemaOf(t *testing.T, src string) *apiextv1.JSONSchemaProps {
	t.Helper()
	var p apiextv1.JSONSchemaProps
	if err := yaml.Unmarshal([]byte(src), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// objectOf parses a custom resource from YAML the way the apiserver decodes one (integers
// as int64).
func objectOf(t *testing.T, src string) map[string]any {
	t.Helper()
	if src == "" {
		return nil
	}
	js, err := yaml.YAMLToJSON([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

const cronTabSchema = `
type: object
properties:
  spec:
    type: object
    required: [cronSpec]
    properties:
      cronSpec: {type: string, pattern: '^\d+ \*$', maxLength: 8}
      replicas: {type: integer, minimum: 1, maximum: 10, default: 1}
      ratio: {type: number, exclusiveMaximum: true, maximum: 1, multipleOf: 0.25}
      mode: {type: string, enum: [Fast, Slow], default: Slow}
      port: {x-kubernetes-int-or-string: true}
      when: {type: string, format: date-time}
      tags:
        type: array
        maxItems: 2
        x-kubernetes-list-type: set
        items: {type: string}
      ports:
        type: array
        x-kubernetes-list-type: map
        x-kubernetes-list-map-keys: [name]
        items:
          type: object
          required: [name]
          properties:
            name: {type: string}
            port: {type: integer, default: 80}
      labels:
        type: object
        additionalProperties: {type: string}
      template:
        type: object
        x-kubernetes-embedded-resource: true
        x-kubernetes-preserve-unknown-fields: true
      extra:
        type: object
        x-kubernetes-preserve-unknown-fields: true
        properties:
          known: {type: integer}
      nullable: {type: string, nullable: true}
  status:
    type: object
    properties:
      replicas: {type: integer}
`

func TestValidate(t *testing.T) {
	s, err := Compile(schemaOf(t, cronTabSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, obj string
		want      []string // error strings, in order
	}{
		{"valid", `
spec:
  cronSpec: "5 *"
  replicas: 3
  ratio: 0.5
  mode: Fast
  port: http
  when: "2024-01-02T03:04:05Z"
  tags: [a, b]
  ports: [{name: a, port: 1}, {name: b}]
  labels: {a: b}
  template: {apiVersion: v1, kind: Pod, metadata: {name: x}}
  extra: {known: 1, anything: [1, 2]}
  nullable: null`, nil},
		{"types", `
spec:
  cronSpec: 5
  replicas: "3"
  port: 1.5
  labels: {a: 1}`, []string{
			`spec.cronSpec: Invalid value: "integer": spec.cronSpec in body must be of type string: "integer"`,
			`spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer"`,
			`spec.port: Invalid value: "number": spec.port in body must be of type integer or string: "number"`,
			`spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`,
		}},
		{"bounds, pattern, enum, format", `
spec:
  cronSpec: "nope"
  replicas: 0
  ratio: 1
  mode: Medium
  when: yesterday`, []string{
			`spec.cronSpec: Invalid value: "nope": spec.cronSpec in body should match '^\d+ \*$'`,
			`spec.mode: Unsupported value: "Medium": supported values: "Fast", "Slow"`,
			`spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1`,
			`spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1`,
			`spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"`,
		}},
		{"required, too long, too many, multipleOf", `
spec:
  ratio: 0.3
  tags: [a, b, c]
  extra: {known: x}`, []string{
			`spec.cronSpec: Required value`,
			`spec.extra.known: Invalid value: "string": spec.extra.known in body must be of type integer: "string"`,
			`spec.ratio: Invalid value: 0.3: spec.ratio in body should be a multiple of 0.25`,
			`spec.tags: Too many: 3: must have at most 2 items`,
		}},
		{"list types", `
spec:
  cronSpec: "1 *"
  tags: [a, a]
  ports: [{name: x}, {name: x, port: 2}]`, []string{
			`spec.ports[1]: Duplicate value: {"name":"x"}`,
			`spec.tags[1]: Duplicate value: "a"`,
		}},
		{"embedded resource", `
spec:
  cronSpec: "1 *"
  template: {metadata: 3}`, []string{
			`spec.template.apiVersion: Required value: must not be empty`,
			`spec.template.kind: Required value: must not be empty`,
			`spec.template.metadata: Invalid value: 3: must be an object`,
		}},
		{"null where not nullable", `
spec:
  cronSpec: null`, []string{
			`spec.cronSpec: Invalid value: "null": spec.cronSpec in body must be of type string: "null"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := objectOf(t, tc.obj)
			var got []string
			for _, k := range sortedKeys(obj) {
				for _, e := range s.child(k).Validate(field.NewPath(k), obj[k]) {
					got = append(got, e.Error())
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestPruneAndDefault(t *testing.T) {
	s, err := Compile(schemaOf(t, cronTabSchema))
	if err != nil {
		t.Fatal(err)
	}
	obj := objectOf(t, `
apiVersion: example.com/v1
kind: CronTab
metadata: {name: x, labels: {a: b}}
spec:
  cronSpec: "1 *"
  unknown: 1
  ports: [{name: a, color: red}]
  template: {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {anything: 1}}
  extra: {known: 1, kept: true}
  replicas: null
status:
  replicas: 1
  bogus: x
top: level`)
	pruned := s.Prune(obj)
	slices.Sort(pruned)
	if want := []string{"spec.ports[0].color", "spec.unknown", "status.bogus", "top"}; !slices.Equal(pruned, want) {
		t.Errorf("pruned %q, want %q", pruned, want)
	}
	s.ApplyDefaults(obj)
	want := objectOf(t, `
apiVersion: example.com/v1
kind: CronTab
metadata: {name: x, labels: {a: b}}
spec:
  cronSpec: "1 *"
  replicas: 1
  mode: Slow
  ports: [{name: a, port: 80}]
  template: {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {anything: 1}}
  extra: {known: 1, kept: true}
status:
  replicas: 1`)
	if !reflect.DeepEqual(obj, want) {
		t.Errorf("after pruning and defaults:\n got %v\nwant %v", obj, want)
	}
}

func TestValidateSchema(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		want         []string
	}{
		{"structural", cronTabSchema, nil},
		{"missing types", `
type: object
properties:
  spec:
    properties:
      list: {type: array}
      any: {}`, []string{
			`<root>.properties[spec].properties[any].type: Required value: must not be empty for specified object fields`,
			`<root>.properties[spec].properties[list].items: Required value: must be specified`,
			`<root>.properties[spec].type: Required value: must not be empty for specified object fields`,
		}},
		{"root not object", `type: string`, []string{`<root>.type: Invalid value: "string": must be object at the root`}},
		{"metadata beyond name", `
type: object
properties:
  metadata:
    type: object
    properties:
      labels: {type: object}`, []string{`<root>.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified`}},
		{"metadata name only", `
type: object
properties:
  metadata:
    type: object
    properties:
      name: {type: string, maxLength: 10}`, nil},
		{"combinators with structure", `
type: object
properties:
  a:
    type: string
    anyOf: [{type: string}]`, []string{`<root>.properties[a].anyOf[0].type: Forbidden: must be empty to be structural`}},
		{"unsupported keywords", `
type: object
properties:
  a: {type: array, uniqueItems: true, items: {type: string}}
  b: {$ref: '#/definitions/x'}`, []string{
			`<root>.properties[a].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic`,
			`<root>.properties[b].$ref: Forbidden: $ref is not supported`,
			`<root>.properties[b].type: Required value: must not be empty for specified object fields`,
		}},
		{"properties and additionalProperties", `
type: object
properties:
  a:
    type: object
    properties: {x: {type: string}}
    additionalProperties: {type: string}`, []string{`<root>.properties[a].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive`}},
		{"bad default and pattern", `
type: object
properties:
  a: {type: integer, default: "x"}
  b: {type: string, pattern: "("}
  c: {type: object, properties: {x: {type: string}}, default: {z: 1}}`, []string{
			"<root>.properties[a].default: Invalid value: \"x\": <root>.properties[a].default: Invalid value: \"string\": <root>.properties[a].default in body must be of type integer: \"string\"",
			"<root>.properties[b].pattern: Invalid value: \"(\": must be a valid regular expression, but isn't: error parsing regexp: missing closing ): `(`",
			`<root>.properties[c].default: Invalid value: {"z":1}: must not have unknown fields`,
		}},
		{"map list without keys", `
type: object
properties:
  a:
    type: array
    x-kubernetes-list-type: map
    items: {type: object, properties: {name: {type: string}}}`, []string{`<root>.properties[a].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range ValidateSchema(field.NewPath("<root>"), schemaOf(t, tc.schema)) {
				got = append(got, e.Error())
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateCRD(t *testing.T) {
	valid := func() *apiextv1.CustomResourceDefinition {
		var c apiextv1.CustomResourceDefinition
		src := `
metadata: {name: crontabs.stable.example.com}
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, kind: CronTab}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object}}
    additionalPrinterColumns: [{name: Spec, type: string, jsonPath: .spec.cronSpec}]
`
		if err := yaml.Unmarshal([]byte(src), &c); err != nil {
			t.Fatal(err)
		}
		defaultCRD(&c)
		return &c
	}
	for _, tc := range []struct {
		name   string
		change func(*apiextv1.CustomResourceDefinition)
		want   []string
	}{
		{"valid", func(*apiextv1.CustomResourceDefinition) {}, nil},
		{"name", func(c *apiextv1.CustomResourceDefinition) { c.Name = "crontabs.example.com" }, []string{
			`metadata.name: Invalid value: "crontabs.example.com": must be spec.names.plural+"."+spec.group`,
		}},
		{"group without dot", func(c *apiextv1.CustomResourceDefinition) { c.Spec.Group, c.Name = "example", "crontabs.example" }, []string{
			`spec.group: Invalid value: "example": should be a domain with at least one dot`,
		}},
		{"scope and kind", func(c *apiextv1.CustomResourceDefinition) { c.Spec.Scope, c.Spec.Names.Kind = "Everywhere", "" }, []string{
			`spec.names.kind: Required value`,
			`spec.scope: Unsupported value: "Everywhere": supported values: "Cluster", "Namespaced"`,
		}},
		{"no storage version", func(c *apiextv1.CustomResourceDefinition) { c.Spec.Versions[0].Storage = false }, []string{
			`must have exactly one version marked as storage version`,
		}},
		{"one schema for every version is judged once, at spec.validation", func(c *apiextv1.CustomResourceDefinition) {
			c.Spec.Versions[0].Schema.OpenAPIV3Schema.Type = ""
			v2 := *c.Spec.Versions[0].DeepCopy()
			v2.Name, v2.Storage = "v2", false
			c.Spec.Versions = append(c.Spec.Versions, v2)
		}, []string{
			`spec.validation.openAPIV3Schema.type: Required value: must not be empty at the root`,
		}},
		{"different schemas are judged per version", func(c *apiextv1.CustomResourceDefinition) {
			c.Spec.Versions[0].Schema.OpenAPIV3Schema.Type = ""
			v2 := *c.Spec.Versions[0].DeepCopy()
			v2.Name, v2.Storage = "v2", false
			v2.Schema.OpenAPIV3Schema.Description = "other"
			c.Spec.Versions = append(c.Spec.Versions, v2)
		}, []string{
			`spec.versions[0].schema.openAPIV3Schema.type: Required value: must not be empty at the root`,
			`spec.versions[1].schema.openAPIV3Schema.type: Required value: must not be empty at the root`,
		}},
		{"no schema", func(c *apiextv1.CustomResourceDefinition) { c.Spec.Versions[0].Schema = nil }, []string{
			`spec.versions[0].schema.openAPIV3Schema: Required value`,
		}},
		{"printer column", func(c *apiextv1.CustomResourceDefinition) {
			c.Spec.Versions[0].AdditionalPrinterColumns[0].Type, c.Spec.Versions[0].AdditionalPrinterColumns[0].JSONPath = "text", "spec"
		}, []string{
			`spec.versions[0].additionalPrinterColumns[0].JSONPath: Invalid value: "spec": must be a simple json path starting with .`,
			`spec.versions[0].additionalPrinterColumns[0].type: Invalid value: "text": must be one of boolean,date,integer,number,string`,
		}},
		{"webhook conversion without config", func(c *apiextv1.CustomResourceDefinition) {
			c.Spec.Conversion = &apiextv1.CustomResourceConversion{Strategy: apiextv1.WebhookConverter}
		}, []string{`spec.conversion.webhook.clientConfig: Required value: required when strategy is set to Webhook`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.change(c)
			var got []string
			for _, e := range ValidateCRD(c) {
				got = append(got, e.Error())
			}
			slices.Sort(got)
			if len(got) != len(tc.want) {
				t.Fatalf("errors:\n got %q\nwant %q", got, tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("error %d:\n got %q\nwant %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPath(t *testing.T) {
	obj := objectOf(t, `
spec: {replicas: 3, "dotted.key": x}
status:
  conditions:
  - {type: Ready, status: "True"}
  - {type: Synced, status: "False", generation: 2}
  list: [1, 2, 3]`)
	for _, tc := range []struct {
		path string
		want []any
	}{
		{".spec.replicas", []any{int64(3)}},
		{".spec['dotted.key']", []any{"x"}},
		{`.status.conditions[?(@.type=="Ready")].status`, []any{"True"}},
		{`.status.conditions[?(@.type!="Ready")].type`, []any{"Synced"}},
		{`.status.conditions[?(@.generation==2)].type`, []any{"Synced"}},
		{".status.conditions[*].type", []any{"Ready", "Synced"}},
		{".status.list[-1]", []any{int64(3)}},
		{".status.missing", nil},
		{"{.status.list[0]}", []any{int64(1)}},
	} {
		p, err := ParsePath(tc.path)
		if err != nil {
			t.Errorf("%s: %v", tc.path, err)
			continue
		}
		if got := p.Find(obj); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.path, got, tc.want)
		}
	}
	for _, bad := range []string{".a[", ".a[?(@.x>1)]", ".a..b", "a"} {
		if _, err := ParsePath(bad); err == nil {
			t.Errorf("%s: parsed, want an error", bad)
		}
	}
}

// Schema checks ratchet on update: a value equal to the old value it correlates with is not
// judged again, whatever the schema says now.
func TestValidateUpdateRatchets(t *testing.T) {
	s := mustCompile(t, schemaOf(t, `
type: object
properties:
  name: {type: string, maxLength: 3}
  size: {type: integer, maximum: 5}
  tags:
    type: object
    additionalProperties: {type: string, pattern: "^[a-z]+$"}
  ports:
    type: array
    x-kubernetes-list-type: map
    x-kubernetes-list-map-keys: [name]
    items:
      type: object
      required: [name]
      properties:
        name: {type: string}
        port: {type: integer, maximum: 100}
  plain:
    type: array
    items: {type: integer, maximum: 100}
`))
	cases := []struct {
		name, obj, old string
		want           []string
	}{
		{name: "unchanged invalid values", obj: `{"name":"long","size":9,"tags":{"a":"BAD"}}`, old: `{"name":"long","size":9,"tags":{"a":"BAD"}}`},
		{name: "a changed value is judged, unchanged siblings are not",
			obj: `{"name":"longer","size":9,"tags":{"a":"BAD","b":"ALSO"}}`, old: `{"name":"long","size":9,"tags":{"a":"BAD"}}`,
			want: []string{`name: Too long: may not be more than 3 bytes`, `tags.b: Invalid value: "ALSO": tags.b in body should match '^[a-z]+$'`}},
		{name: "map list items correlate by key, wherever they moved",
			obj: `{"ports":[{"name":"b","port":101},{"name":"a","port":200}]}`, old: `{"ports":[{"name":"a","port":200},{"name":"b","port":100}]}`,
			want: []string{`ports[0].port: Invalid value: 101: ports[0].port in body should be less than or equal to 100`}},
		{name: "items of other lists correlate with nothing",
			obj: `{"plain":[200,1]}`, old: `{"plain":[200]}`,
			want: []string{`plain[0]: Invalid value: 200: plain[0] in body should be less than or equal to 100`}},
		{name: "no old value", obj: `{"size":9}`, old: `{"name":"a"}`,
			want: []string{`size: Invalid value: 9: size in body should be less than or equal to 5`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj, old := objectOf(t, c.obj), objectOf(t, c.old)
			var errs field.ErrorList
			for _, k := range sortedKeys(obj) {
				if o, ok := old[k]; ok {
					errs = append(errs, s.child(k).ValidateUpdate(field.NewPath(k), obj[k], o)...)
				} else {
					errs = append(errs, s.child(k).Validate(field.NewPath(k), obj[k])...)
				}
			}
			if got := errorStrings(errs); !slices.Equal(got, c.want) {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}
