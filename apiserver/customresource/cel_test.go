package customresource

import (
	"slices"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

func errorStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

const widgetSchema = `
type: object
properties:
  spec:
    type: object
    x-kubernetes-validations:
    - rule: "self.minReplicas <= self.replicas"
      message: "replicas must be at least minReplicas"
    - rule: "!has(self.mode) || self.mode != 'broken'"
      messageExpression: "'mode ' + self.mode + ' is not allowed'"
      reason: FieldValueForbidden
      fieldPath: ".mode"
    - rule: "self.replicas < 100"
    - rule: "!has(self.labels) || !('bad.key' in self.labels)"
      message: "bad key"
      fieldPath: ".labels['bad.key']"
    properties:
      replicas: {type: integer}
      minReplicas: {type: integer}
      mode: {type: string, maxLength: 20}
      immutable:
        type: string
        x-kubernetes-validations:
        - rule: "self == oldSelf"
          message: "is immutable"
      grow:
        type: integer
        x-kubernetes-validations:
        - rule: "!oldSelf.hasValue() || self >= oldSelf.value()"
          optionalOldSelf: true
          message: "may only grow"
      tags:
        type: array
        maxItems: 10
        items: {type: string, maxLength: 10}
        x-kubernetes-validations:
        - rule: "self.all(t, t.startsWith('t-'))"
          reason: FieldValueRequired
          message: "tags must start with t-"
        - rule: "self.isSorted()"
          message: "tags must be sorted"
      ports:
        type: array
        x-kubernetes-list-type: map
        x-kubernetes-list-map-keys: [name]
        items:
          type: object
          required: [name]
          properties:
            name: {type: string, maxLength: 10}
            port:
              type: integer
              x-kubernetes-validations:
              - rule: "self == oldSelf"
                message: "port of a named entry is immutable"
      labels:
        type: object
        maxProperties: 10
        additionalProperties: {type: string, maxLength: 63}
        x-kubernetes-validations:
        - rule: "self.all(k, self[k] != '')"
          message: "label values must not be empty"
      size:
        x-kubernetes-int-or-string: true
        x-kubernetes-validations:
        - rule: "self != 0 && self != '0'"
          message: "size must not be zero"
      memory:
        type: string
        maxLength: 20
        x-kubernetes-validations:
        - rule: "quantity(self).isLessThan(quantity('1Gi'))"
          message: "at most 1Gi"
      dup:
        type: string
        x-kubernetes-validations:
        - rule: "self != 'x'"
          reason: FieldValueDuplicate
      raw:
        type: object
        x-kubernetes-preserve-unknown-fields: true
  status:
    type: object
    properties:
      ready: {type: boolean}
x-kubernetes-validations:
- rule: "self.metadata.name.startsWith('w')"
  message: "name must start with w"
- rule: "!has(self.status) || !self.status.ready || self.spec.replicas > 0"
  message: "a ready widget has replicas"
`

func TestRules(t *testing.T) {
	rs, err := compileRules(mustCompile(t, schemaOf(t, widgetSchema)))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		obj, old string
		want     []string
	}{
		{name: "valid", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":3,"minReplicas":1,"tags":["t-a","t-b"],"labels":{"a":"b"},"size":"50%","memory":"512Mi"}}`},
		{name: "object rule with message", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":2}}`,
			want: []string{"spec: Invalid value: replicas must be at least minReplicas"}},
		{name: "no message: failed rule", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":100,"minReplicas":2}}`,
			want: []string{"spec: Invalid value: failed rule: self.replicas < 100"}},
		{name: "root rule reads metadata.name", obj: `{"metadata":{"name":"x1"},"spec":{"replicas":1,"minReplicas":1}}`,
			want: []string{"<nil>: Invalid value: name must start with w"}},
		{name: "messageExpression, reason and fieldPath", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"mode":"broken"}}`,
			want: []string{"spec.mode: Forbidden: mode broken is not allowed"}},
		{name: "list rules, reason Required", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"tags":["t-b","a"]}}`,
			want: []string{"spec.tags: Required value: tags must start with t-", "spec.tags: Invalid value: tags must be sorted"}},
		{name: "map rule", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"labels":{"a":""}}}`,
			want: []string{"spec.labels: Invalid value: label values must not be empty"}},
		{name: "fieldPath to a map key", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"labels":{"bad.key":"x"}}}`,
			want: []string{"spec.labels[bad.key]: Invalid value: bad key"}},
		{name: "int-or-string", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"size":"0"}}`,
			want: []string{`spec.size: Invalid value: "0": size must not be zero`}},
		{name: "int-or-string int", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"size":0}}`,
			want: []string{`spec.size: Invalid value: 0: size must not be zero`}},
		{name: "quantity", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"memory":"2Gi"}}`,
			want: []string{`spec.memory: Invalid value: "2Gi": at most 1Gi`}},
		{name: "reason Duplicate", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"dup":"x"}}`,
			want: []string{`spec.dup: Duplicate value: "x"`}},
		{name: "nested rule beside a root rule", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":0,"minReplicas":0,"dup":"x"},"status":{"ready":true}}`,
			want: []string{"<nil>: Invalid value: a ready widget has replicas", `spec.dup: Duplicate value: "x"`}},
		{name: "transition rule skipped on create", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"immutable":"a"}}`},
		{name: "transition rule holds", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"immutable":"a"}}`,
			old: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"immutable":"a"}}`},
		{name: "transition rule broken", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"immutable":"b"}}`,
			old:  `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"immutable":"a"}}`,
			want: []string{`spec.immutable: Invalid value: "b": is immutable`}},
		{name: "transition rule: no old value of the field", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"immutable":"b"}}`,
			old: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1}}`},
		{name: "ratcheting: an unchanged value is not re-judged", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":2},"status":{"ready":false}}`,
			old: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":2}}`},
		{name: "ratcheting: a changed value is", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":3}}`,
			old:  `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":2}}`,
			want: []string{"spec: Invalid value: replicas must be at least minReplicas"}},
		{name: "optionalOldSelf on create", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"grow":1}}`},
		{name: "optionalOldSelf on update", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"grow":1}}`,
			old:  `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"grow":2}}`,
			want: []string{`spec.grow: Invalid value: 1: may only grow`}},
		{name: "map list items correlate by key", obj: `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"ports":[{"name":"b","port":2},{"name":"a","port":3}]}}`,
			old:  `{"metadata":{"name":"w1"},"spec":{"replicas":1,"minReplicas":1,"ports":[{"name":"a","port":1},{"name":"b","port":2}]}}`,
			want: []string{`spec.ports[1].port: Invalid value: 3: port of a named entry is immutable`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := errorStrings(rs.validate(objectOf(t, c.obj), objectOf(t, c.old)))
			if !slices.Equal(got, c.want) {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func mustCompile(t *testing.T, p *apiextv1.JSONSchemaProps) *Schema {
	t.Helper()
	if errs := ValidateSchema(field.NewPath("schema"), p); len(errs) > 0 {
		t.Fatalf("schema: %v", errs)
	}
	if errs := validateRuleDeclarations(field.NewPath("schema"), p); len(errs) > 0 {
		t.Fatalf("rules: %v", errs)
	}
	s, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRuleDeclarations(t *testing.T) {
	const base = `
type: object
properties:
  spec:
    type: object
    properties:
      replicas: {type: integer}
      names:
        type: array
        items: {type: string}
      shortNames:
        type: array
        maxItems: 600
        items: {type: string, maxLength: 10}
`
	cases := []struct {
		name  string
		rules string // x-kubernetes-validations of spec, as YAML
		want  []string
	}{
		{name: "valid", rules: `[{rule: "self.replicas > 0"}]`},
		{name: "undefined field", rules: `[{rule: "self.replica == 0"}]`,
			want: []string{`spec.properties[spec].x-kubernetes-validations[0].rule: Invalid value: {"Rule":"self.replica == 0","Message":"","MessageExpression":"","Reason":null,"FieldPath":"","OptionalOldSelf":null}: compilation failed: ERROR: <input>:1:5: undefined field 'replica'`}},
		{name: "not a bool", rules: `[{rule: "self.replicas"}]`,
			want: []string{`x-kubernetes-validations[0].rule: Invalid value: {"Rule":"self.replicas",`, `: cel expression must evaluate to a bool`}},
		{name: "messageExpression not a string", rules: `[{rule: "self.replicas == 0", messageExpression: "self.replicas"}]`,
			want: []string{`x-kubernetes-validations[0].messageExpression: Invalid value: {"Rule":"self.replicas == 0",`, `: messageExpression must evaluate to a string`}},
		{name: "estimated cost", rules: `[{rule: "self.names.all(x, self.names.all(y, x == y))"}]`,
			want: []string{`spec.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)`}},
		{name: "bounded by maxItems and maxLength", rules: `[{rule: "self.shortNames.all(x, self.shortNames.all(y, x == y || true))"}]`},
		{name: "empty rule", rules: `[{rule: " "}]`,
			want: []string{`spec.properties[spec].x-kubernetes-validations[0].rule: Required value: rule is not specified`}},
		{name: "reason", rules: `[{rule: "true", reason: FieldValueOdd}]`,
			want: []string{`spec.properties[spec].x-kubernetes-validations[0].reason: Unsupported value: "FieldValueOdd": supported values: "FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"`}},
		{name: "fieldPath", rules: `[{rule: "true", fieldPath: ".nope"}]`,
			want: []string{`spec.properties[spec].x-kubernetes-validations[0].fieldPath: Invalid value: ".nope": must be a valid path`}},
		{name: "optionalOldSelf without oldSelf", rules: `[{rule: "true", optionalOldSelf: true}]`,
			want: []string{`spec.properties[spec].x-kubernetes-validations[0].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := schemaOf(t, base)
			spec := p.Properties["spec"]
			if err := yaml.Unmarshal([]byte(c.rules), &spec.XValidations); err != nil {
				t.Fatal(err)
			}
			p.Properties["spec"] = spec
			got := errorStrings(validateRuleDeclarations(field.NewPath("spec"), p))
			if (len(got) == 0) != (len(c.want) == 0) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("got %q, want the first to contain %q", got, w)
				}
			}
		})
	}
}

func TestOldSelfOnListItems(t *testing.T) {
	p := schemaOf(t, `
type: object
properties:
  items:
    type: array
    maxItems: 10
    items:
      type: string
      maxLength: 10
      x-kubernetes-validations: [{rule: "self == oldSelf"}]
`)
	got := errorStrings(validateRuleDeclarations(field.NewPath("s"), p))
	want := []string{`s.properties[items].items.x-kubernetes-validations[0].rule: Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within s.properties[items]`}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestRuntimeCostLimit(t *testing.T) {
	// Matching a regular expression costs the string's length times the pattern's; this
	// one is within the estimate for a string of maxLength but over the per-call limit.
	letters := "a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p|q|r|s|t|u|v|w|x|y|z|A|B|C|D|E|F|G|H|I|J|K|L|M|N|O|P|Q|R|S|T|U|V|W|X|Y|Z"
	rule := "self.matches('^(" + letters + ")*$')"
	rs, err := compileRules(mustCompile(t, schemaOf(t, `
type: object
properties:
  text:
    type: string
    maxLength: 500000
    x-kubernetes-validations:
    - rule: "`+rule+`"
    - rule: "false"
`)))
	if err != nil {
		t.Fatal(err)
	}
	got := errorStrings(rs.validate(map[string]any{"text": strings.Repeat("a", 500000)}, nil))
	want := []string{`text: Invalid value: "string": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: ` + rule}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// One rule per case, at the root of a schema with escaped names, sets, maps, formats and an
// embedded resource: the libraries and types rules see.
func TestRuleExpressions(t *testing.T) {
	const props = `
type: object
properties:
  spec:
    type: object
    properties:
      x-name: {type: string, maxLength: 10}
      namespace: {type: string, maxLength: 10}
      set:
        type: array
        maxItems: 5
        x-kubernetes-list-type: set
        items: {type: string, maxLength: 5}
      limits:
        type: object
        maxProperties: 5
        additionalProperties: {type: string, maxLength: 10}
      timeout: {type: string, format: duration}
      since: {type: string, format: date-time}
      ratio: {type: number}
      template:
        type: object
        x-kubernetes-embedded-resource: true
        x-kubernetes-preserve-unknown-fields: true
`
	obj := `{"metadata":{"name":"w"},"spec":{"x-name":"Abc","namespace":"ns","set":["b","a"],"limits":{"cpu":"500m"},
		"timeout":"90s","since":"2026-01-02T03:04:05Z","ratio":1,"template":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}}}`
	old := `{"metadata":{"name":"w"},"spec":{"x-name":"Abc","namespace":"ns","set":["a","b"]}}`
	cases := []struct {
		rule string
		old  bool
		want string // "" when the rule holds
	}{
		{rule: "self.spec.x__dash__name.lowerAscii() == 'abc'"},
		{rule: "self.spec.__namespace__ == 'ns'"},
		{rule: "self.spec.x__dash__name.find('[a-z]+') == 'bc' && 'a1b22'.findAll('[0-9]+') == ['1', '22']"},
		{rule: "self.spec.set == oldSelf.spec.set", old: true},
		{rule: "sets.contains(self.spec.set, ['a']) && self.spec.set.sort() == ['a', 'b']"},
		{rule: "[3, 1, 2].max() == 3 && [1, 2].sum() == 3 && [1, 2, 3].isSorted() && [1, 2, 1].lastIndexOf(1) == 2"},
		{rule: "self.spec.limits.all(k, quantity(self.spec.limits[k]).isLessThan(quantity('1')))"},
		{rule: "quantity('1') == quantity('1000m') && quantity('1').add(1).compareTo(quantity('2')) == 0 && sign(quantity('-1')) == -1 && isQuantity('1Gi') && !isQuantity('x') && quantity('1k').asInteger() == 1000"},
		{rule: "self.spec.timeout > duration('1m') && self.spec.since < timestamp('2027-01-01T00:00:00Z')"},
		{rule: "self.spec.ratio == 1.0 && self.spec.ratio > 0"},
		{rule: "self.spec.template.kind == 'Pod' && self.spec.template.metadata.name == 'p'"},
		{rule: "self.spec.?missing.orValue('') == ''", want: "undefined field 'missing'"},
		{rule: "self.spec.__namespace__.size() > 5", want: "<nil>: Invalid value: failed rule: self.spec.__namespace__.size() > 5"},
		{rule: "self.spec.limits['memory'] == '1'", want: "<nil>: Invalid value: \"object\": no such key: memory evaluating rule: self.spec.limits['memory'] == '1'"},
		{rule: "self.spec.limits.exists(k, v, v == '500m')"},
		{rule: "self.spec.limits.exists(k, self.spec.limits[k] == '500m') && self.spec.limits.all(k, v, v != '')"},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			p := schemaOf(t, props)
			p.XValidations = apiextv1.ValidationRules{{Rule: c.rule}}
			if errs := validateRuleDeclarations(field.NewPath("s"), p); len(errs) > 0 {
				if c.want == "" || !strings.Contains(errs.ToAggregate().Error(), c.want) {
					t.Fatalf("rule refused: %v", errs)
				}
				return
			}
			rs, err := compileRules(mustCompile(t, p))
			if err != nil {
				t.Fatal(err)
			}
			var o map[string]any
			if c.old {
				o = objectOf(t, old)
			}
			got := errs(rs.validate(objectOf(t, obj), o))
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func errs(l field.ErrorList) string {
	if len(l) == 0 {
		return ""
	}
	return l.ToAggregate().Error()
}
