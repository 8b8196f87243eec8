package customresource

import (
	"encoding/json"
	"regexp"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// level is where a schema node sits, which decides what it must say about itself.
type level int

const (
	rootLevel level = iota
	fieldLevel
	itemLevel
	valueLevel // inside allOf, anyOf, oneOf or not: value validation only
)

// ValidateSchema checks that a CRD version's openAPIV3Schema is structural, as Kubernetes
// requires of every apiextensions.k8s.io/v1 CRD: every specified field has a type (or
// x-kubernetes-int-or-string / x-kubernetes-preserve-unknown-fields), arrays have items,
// combinators only validate values, metadata is at most restricted in name and generateName,
// defaults are valid and pruned; and that its keywords are the ones Kubernetes supports.
func ValidateSchema(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	if p == nil {
		return field.ErrorList{field.Required(path, "schemas are required")}
	}
	return validateNode(path, p, rootLevel, false)
}

func validateNode(path *field.Path, p *apiextv1.JSONSchemaProps, lvl level, embedded bool) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, unsupportedKeywords(path, p)...)
	if lvl == valueLevel {
		return append(errs, validateValueNode(path, p)...)
	}
	preserve := p.XPreserveUnknownFields != nil && *p.XPreserveUnknownFields
	switch {
	case p.XEmbeddedResource && p.Type != "object":
		if p.Type == "" {
			errs = append(errs, field.Required(path.Child("type"), "must be object if x-kubernetes-embedded-resource is true"))
		} else {
			errs = append(errs, field.Invalid(path.Child("type"), p.Type, "must be object if x-kubernetes-embedded-resource is true"))
		}
	case p.Type == "" && !p.XIntOrString && !preserve:
		msg := map[level]string{rootLevel: "must not be empty at the root", itemLevel: "must not be empty for specified array items", fieldLevel: "must not be empty for specified object fields"}[lvl]
		errs = append(errs, field.Required(path.Child("type"), msg))
	}
	if lvl == rootLevel && p.Type != "" && p.Type != "object" {
		errs = append(errs, field.Invalid(path.Child("type"), p.Type, "must be object at the root"))
	}
	switch p.Type {
	case "", "object", "array", "string", "integer", "number", "boolean":
	default:
		errs = append(errs, field.NotSupported(path.Child("type"), p.Type, []string{"array", "boolean", "integer", "number", "object", "string"}))
	}
	if p.XIntOrString && preserve {
		errs = append(errs, field.Invalid(path.Child("x-kubernetes-preserve-unknown-fields"), true, "must be false if x-kubernetes-int-or-string is true"))
	}
	if p.XIntOrString && p.XEmbeddedResource {
		errs = append(errs, field.Invalid(path.Child("x-kubernetes-embedded-resource"), true, "must be false if x-kubernetes-int-or-string is true"))
	}
	if p.Type == "array" && (p.Items == nil || p.Items.Schema == nil) {
		if p.Items != nil && len(p.Items.JSONSchemas) > 0 {
			errs = append(errs, field.Forbidden(path.Child("items"), "items must be a schema object and not an array"))
		} else {
			errs = append(errs, field.Required(path.Child("items"), "must be specified"))
		}
	}
	if p.AdditionalProperties != nil {
		switch {
		case lvl == rootLevel:
			errs = append(errs, field.Forbidden(path.Child("additionalProperties"), "must not be used at the root"))
		case len(p.Properties) > 0:
			errs = append(errs, field.Forbidden(path.Child("additionalProperties"), "additionalProperties and properties are mutual exclusive"))
		case p.AdditionalProperties.Schema == nil && !p.AdditionalProperties.Allows:
			errs = append(errs, field.Forbidden(path.Child("additionalProperties"), "additionalProperties cannot be set to false"))
		case p.XEmbeddedResource:
			errs = append(errs, field.Forbidden(path.Child("additionalProperties"), "must not be used if x-kubernetes-embedded-resource is set"))
		}
		if p.AdditionalProperties.Schema != nil {
			errs = append(errs, validateNode(path.Child("additionalProperties"), p.AdditionalProperties.Schema, fieldLevel, false)...)
		}
	}
	if p.XEmbeddedResource && !preserve && len(p.Properties) == 0 {
		errs = append(errs, field.Required(path.Child("properties"), "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"))
	}
	resource := lvl == rootLevel || p.XEmbeddedResource
	for _, name := range sortedKeys(p.Properties) {
		prop := p.Properties[name]
		pp := path.Child("properties").Key(name)
		if resource && (name == "kind" || name == "apiVersion") && prop.Type != "string" {
			errs = append(errs, field.Invalid(pp.Child("type"), prop.Type, "must be string"))
		}
		if name == "metadata" && resource {
			errs = append(errs, validateMetadataSchema(pp, &prop, lvl == rootLevel)...)
			continue
		}
		errs = append(errs, validateNode(pp, &prop, fieldLevel, false)...)
	}
	if p.Items != nil && p.Items.Schema != nil {
		errs = append(errs, validateNode(path.Child("items"), p.Items.Schema, itemLevel, false)...)
	}
	errs = append(errs, validateCombinators(path, p)...)
	errs = append(errs, validateListType(path, p)...)
	errs = append(errs, validateCommon(path, p)...)
	if p.Default != nil {
		errs = append(errs, validateDefault(path.Child("default"), p)...)
	}
	return errs
}

// validateMetadataSchema allows, at the root, only a metadata schema that restricts name and
// generateName (as strings); an embedded resource's metadata must be an object.
func validateMetadataSchema(path *field.Path, p *apiextv1.JSONSchemaProps, root bool) field.ErrorList {
	if !root {
		if p.Type != "object" {
			return field.ErrorList{field.Invalid(path.Child("type"), p.Type, "must be object")}
		}
		return nil
	}
	var errs field.ErrorList
	if p.Type != "" && p.Type != "object" {
		errs = append(errs, field.Invalid(path.Child("type"), p.Type, "must be object"))
	}
	c := *p
	c.Type, c.Description = "", ""
	for name, prop := range p.Properties {
		if name == "name" || name == "generateName" {
			errs = append(errs, validateNode(path.Child("properties").Key(name), &prop, fieldLevel, false)...)
		}
	}
	rest := map[string]apiextv1.JSONSchemaProps{}
	for name, prop := range p.Properties {
		if name != "name" && name != "generateName" {
			rest[name] = prop
		}
	}
	c.Properties = rest
	if len(c.Properties) == 0 {
		c.Properties = nil
	}
	if b, _ := json.Marshal(c); string(b) != "{}" {
		errs = append(errs, field.Forbidden(path, "must not specify anything other than name and generateName, but metadata is implicitly specified"))
	}
	return errs
}

// validateCombinators checks allOf, anyOf, oneOf and not, which may only validate values.
func validateCombinators(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	var errs field.ErrorList
	for name, group := range map[string][]apiextv1.JSONSchemaProps{"allOf": p.AllOf, "anyOf": p.AnyOf, "oneOf": p.OneOf} {
		for i := range group {
			if p.XIntOrString && name == "anyOf" && isIntOrStringType(group[i].Type) {
				continue
			}
			errs = append(errs, validateNode(path.Child(name).Index(i), &group[i], valueLevel, false)...)
		}
	}
	if p.Not != nil {
		errs = append(errs, validateNode(path.Child("not"), p.Not, valueLevel, false)...)
	}
	return errs
}

func isIntOrStringType(t string) bool { return t == "integer" || t == "string" }

// validateValueNode checks a node inside a combinator: it may not declare structure.
func validateValueNode(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	var errs field.ErrorList
	forbid := func(name string, set bool) {
		if set {
			errs = append(errs, field.Forbidden(path.Child(name), "must be empty to be structural"))
		}
	}
	forbid("type", p.Type != "")
	forbid("default", p.Default != nil)
	forbid("additionalProperties", p.AdditionalProperties != nil)
	forbid("nullable", p.Nullable)
	forbid("x-kubernetes-preserve-unknown-fields", p.XPreserveUnknownFields != nil)
	forbid("x-kubernetes-embedded-resource", p.XEmbeddedResource)
	forbid("x-kubernetes-int-or-string", p.XIntOrString)
	forbid("x-kubernetes-list-type", p.XListType != nil)
	forbid("x-kubernetes-list-map-keys", len(p.XListMapKeys) > 0)
	forbid("x-kubernetes-map-type", p.XMapType != nil)
	forbid("x-kubernetes-validations", len(p.XValidations) > 0)
	for _, name := range sortedKeys(p.Properties) {
		prop := p.Properties[name]
		errs = append(errs, validateNode(path.Child("properties").Key(name), &prop, valueLevel, false)...)
	}
	if p.Items != nil && p.Items.Schema != nil {
		errs = append(errs, validateNode(path.Child("items"), p.Items.Schema, valueLevel, false)...)
	}
	errs = append(errs, validateCombinators(path, p)...)
	errs = append(errs, validateCommon(path, p)...)
	return errs
}

// unsupportedKeywords refuses the JSON-schema keywords Kubernetes does not serve.
func unsupportedKeywords(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	var errs field.ErrorList
	forbid := func(name string, set bool, msg string) {
		if set {
			errs = append(errs, field.Forbidden(path.Child(name), msg))
		}
	}
	forbid("$ref", p.Ref != nil, "$ref is not supported")
	forbid("id", p.ID != "", "id is not supported")
	forbid("$schema", p.Schema != "", "$schema is not supported")
	forbid("definitions", len(p.Definitions) > 0, "definitions is not supported")
	forbid("dependencies", len(p.Dependencies) > 0, "dependencies is not supported")
	forbid("patternProperties", len(p.PatternProperties) > 0, "patternProperties is not supported")
	forbid("additionalItems", p.AdditionalItems != nil, "additionalItems is not supported")
	forbid("uniqueItems", p.UniqueItems, "uniqueItems cannot be set to true since the runtime complexity becomes quadratic")
	return errs
}

// validateCommon checks what every node may carry: a pattern that compiles, an enum of the
// node's type, a sensible format.
func validateCommon(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	var errs field.ErrorList
	if p.Pattern != "" {
		if _, err := regexp.Compile(p.Pattern); err != nil {
			errs = append(errs, field.Invalid(path.Child("pattern"), p.Pattern, "must be a valid regular expression, but isn't: "+err.Error()))
		}
	}
	if p.MultipleOf != nil && *p.MultipleOf <= 0 {
		errs = append(errs, field.Invalid(path.Child("multipleOf"), *p.MultipleOf, "must be greater than zero"))
	}
	if p.Type != "" && len(p.Enum) > 0 {
		s := &Schema{Type: p.Type, Nullable: p.Nullable}
		for i, e := range p.Enum {
			var v any
			if err := json.Unmarshal(e.Raw, &v); err != nil {
				errs = append(errs, field.Invalid(path.Child("enum").Index(i), string(e.Raw), err.Error()))
				continue
			}
			if !s.typeMatches(normalize(v)) && !(v == nil && p.Nullable) {
				errs = append(errs, field.Invalid(path.Child("enum").Index(i), v, "must be of type "+p.Type))
			}
		}
	}
	for i, rule := range p.XValidations {
		if rule.Rule == "" {
			errs = append(errs, field.Required(path.Child("x-kubernetes-validations").Index(i).Child("rule"), ""))
		}
	}
	return errs
}

// validateListType checks x-kubernetes-list-type and its map keys.
func validateListType(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	var errs field.ErrorList
	if p.XListType == nil {
		if len(p.XListMapKeys) > 0 {
			errs = append(errs, field.Forbidden(path.Child("x-kubernetes-list-map-keys"), "must not be set if x-kubernetes-list-type is not map"))
		}
		return errs
	}
	lt := *p.XListType
	if p.Type != "array" {
		return append(errs, field.Invalid(path.Child("x-kubernetes-list-type"), lt, "must only be used if type is array"))
	}
	switch lt {
	case "atomic":
	case "set":
		if it := p.Items.Schema; it != nil && it.Type != "" && it.Type != "string" && it.Type != "integer" && it.Type != "number" && it.Type != "boolean" && !it.XIntOrString {
			if !(it.Type == "object" && it.XMapType != nil && *it.XMapType == "atomic") && !(it.Type == "array" && it.XListType != nil && *it.XListType == "atomic") {
				errs = append(errs, field.Invalid(path.Child("items").Child("x-kubernetes-map-type"), it.XMapType, "must be atomic as item of a list with x-kubernetes-list-type=set"))
			}
		}
	case "map":
		if len(p.XListMapKeys) == 0 {
			errs = append(errs, field.Required(path.Child("x-kubernetes-list-map-keys"), "must not be empty if x-kubernetes-list-type is map"))
		}
		it := p.Items.Schema
		if it == nil || it.Type != "object" {
			errs = append(errs, field.Invalid(path.Child("items").Child("type"), "", "must be object if parent array's x-kubernetes-list-type is map"))
			break
		}
		for i, k := range p.XListMapKeys {
			kp, ok := it.Properties[k]
			switch {
			case !ok:
				errs = append(errs, field.Required(path.Child("items").Child("properties").Key(k), "entries for all x-kubernetes-list-map-keys must be set"))
			case kp.Type != "string" && kp.Type != "integer" && kp.Type != "number" && kp.Type != "boolean":
				errs = append(errs, field.Invalid(path.Child("items").Child("properties").Key(k).Child("type"), kp.Type, "must be a scalar type if parent array's x-kubernetes-list-type is map"))
			}
			_ = i
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("x-kubernetes-list-type"), lt, []string{"atomic", "set", "map"}))
	}
	return errs
}

// validateDefault requires a default to satisfy its own schema and to have no fields the
// schema would prune.
func validateDefault(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	s, err := Compile(p)
	if err != nil {
		return nil // reported by validateCommon
	}
	var errs field.ErrorList
	if obj, ok := s.Default.(map[string]any); ok && (s.Properties != nil || s.Additional != nil) {
		copied := runtime.DeepCopyJSONValue(obj).(map[string]any)
		if pruned := s.prunedPaths(copied); len(pruned) > 0 {
			errs = append(errs, field.Invalid(path, s.Default, "must not have unknown fields"))
		}
	}
	for _, e := range s.Validate(path, s.Default) {
		errs = append(errs, field.Invalid(path, s.Default, e.Error()))
	}
	return errs
}

// prunedPaths prunes a value of this (object) node, as for a field's default.
func (s *Schema) prunedPaths(obj map[string]any) []string {
	var pruned []string
	s.pruneObject(obj, "", s.Embedded, &pruned)
	return pruned
}
