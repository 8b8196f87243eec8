package customresource

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Schema is a compiled structural schema: the tree a CRD version's openAPIV3Schema describes,
// with its patterns parsed and its enums and defaults decoded once, so validating, pruning
// and defaulting an object walk it without re-reading the CRD.
type Schema struct {
	Type        string // object, array, string, integer, number, boolean, or "" (any)
	Format      string
	Description string
	Nullable    bool

	Properties map[string]*Schema
	// Additional is the schema of the values of a map (additionalProperties with a schema).
	Additional *Schema
	Items      *Schema
	Required   []string

	Enum       []any
	Pattern    *regexp.Regexp
	Minimum    *float64
	Maximum    *float64
	ExclMin    bool
	ExclMax    bool
	MultipleOf *float64
	MinLength  *int64
	MaxLength  *int64
	MinItems   *int64
	MaxItems   *int64
	MinProps   *int64
	MaxProps   *int64
	Unique     bool

	Default    any
	HasDefault bool

	PreserveUnknown bool
	Embedded        bool
	IntOrString     bool
	ListType        string
	ListMapKeys     []string
	MapType         string

	// AllOf, AnyOf, OneOf and Not are value validations only (structural schemas forbid
	// them to add structure).
	AllOf, AnyOf, OneOf []*Schema
	Not                 *Schema

	// Rules are the x-kubernetes-validations CEL rules of this node.
	Rules []apiextv1.ValidationRule
}

// Compile turns a JSONSchemaProps tree into a Schema. It assumes the schema was accepted by
// ValidateSchema; a pattern that does not compile is an error.
func Compile(p *apiextv1.JSONSchemaProps) (*Schema, error) {
	if p == nil {
		return nil, nil
	}
	s := &Schema{
		Type: p.Type, Format: p.Format, Description: p.Description, Nullable: p.Nullable,
		Required: p.Required, Minimum: p.Minimum, Maximum: p.Maximum, ExclMin: p.ExclusiveMinimum, ExclMax: p.ExclusiveMaximum,
		MultipleOf: p.MultipleOf, MinLength: p.MinLength, MaxLength: p.MaxLength, MinItems: p.MinItems, MaxItems: p.MaxItems,
		MinProps: p.MinProperties, MaxProps: p.MaxProperties, Unique: p.UniqueItems,
		PreserveUnknown: p.XPreserveUnknownFields != nil && *p.XPreserveUnknownFields,
		Embedded:        p.XEmbeddedResource, IntOrString: p.XIntOrString, ListMapKeys: p.XListMapKeys,
		Rules: p.XValidations,
	}
	if p.XListType != nil {
		s.ListType = *p.XListType
	}
	if p.XMapType != nil {
		s.MapType = *p.XMapType
	}
	if p.Pattern != "" {
		re, err := regexp.Compile(p.Pattern)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", p.Pattern, err)
		}
		s.Pattern = re
	}
	for _, e := range p.Enum {
		var v any
		if err := json.Unmarshal(e.Raw, &v); err != nil {
			return nil, fmt.Errorf("enum: %w", err)
		}
		s.Enum = append(s.Enum, normalize(v))
	}
	if p.Default != nil {
		if err := json.Unmarshal(p.Default.Raw, &s.Default); err != nil {
			return nil, fmt.Errorf("default: %w", err)
		}
		s.Default, s.HasDefault = normalize(s.Default), true
	}
	var err error
	if len(p.Properties) > 0 {
		s.Properties = make(map[string]*Schema, len(p.Properties))
		for name, prop := range p.Properties {
			if s.Properties[name], err = Compile(&prop); err != nil {
				return nil, err
			}
		}
	}
	if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
		if s.Additional, err = Compile(p.AdditionalProperties.Schema); err != nil {
			return nil, err
		}
	} else if p.AdditionalProperties != nil && p.AdditionalProperties.Allows && len(p.Properties) == 0 {
		s.Additional = &Schema{PreserveUnknown: true}
	}
	if p.Items != nil && p.Items.Schema != nil {
		if s.Items, err = Compile(p.Items.Schema); err != nil {
			return nil, err
		}
	}
	for _, group := range []struct {
		in  []apiextv1.JSONSchemaProps
		out *[]*Schema
	}{{p.AllOf, &s.AllOf}, {p.AnyOf, &s.AnyOf}, {p.OneOf, &s.OneOf}} {
		for i := range group.in {
			c, err := Compile(&group.in[i])
			if err != nil {
				return nil, err
			}
			*group.out = append(*group.out, c)
		}
	}
	if p.Not != nil {
		if s.Not, err = Compile(p.Not); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// child is the schema of the value at key of an object node (nil: unknown field).
func (s *Schema) child(key string) *Schema {
	if s == nil {
		return nil
	}
	if c, ok := s.Properties[key]; ok {
		return c
	}
	return s.Additional
}

// Validate checks v, the JSON value at path, against s: the errors read as kube-apiserver's
// do (the field path, "in body", the rule broken).
func (s *Schema) Validate(path *field.Path, v any) field.ErrorList {
	return s.validate(path, v, nil)
}

// ValidateUpdate is Validate for a value replacing old. It ratchets, as Kubernetes does
// (CRDValidationRatcheting): a value equal to the old value it correlates with (the same
// property, or the item of a map list with the same keys) is not judged, nor is anything
// inside it, so that tightening a schema does not lock objects written before.
func (s *Schema) ValidateUpdate(path *field.Path, v, old any) field.ErrorList {
	return s.validate(path, v, &old)
}

// validate checks v; old points to the old value v correlates with, nil when there is none.
func (s *Schema) validate(path *field.Path, v any, old *any) field.ErrorList {
	if s == nil || (old != nil && jsonEqual(v, *old)) {
		return nil
	}
	var errs field.ErrorList
	name := path.String()
	if v == nil {
		if s.Nullable || s.Type == "" {
			return nil
		}
		return field.ErrorList{field.TypeInvalid(path, "null", fmt.Sprintf("%s in body must be of type %s: %q", name, s.Type, "null"))}
	}
	if !s.typeMatches(v) {
		return field.ErrorList{field.TypeInvalid(path, jsonType(v), fmt.Sprintf("%s in body must be of type %s: %q", name, typeName(s, v), jsonType(v)))}
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return jsonEqual(e, v) }) {
		var allowed []string
		for _, e := range s.Enum {
			if str, ok := e.(string); ok {
				allowed = append(allowed, str)
			} else {
				b, _ := json.Marshal(e)
				allowed = append(allowed, string(b))
			}
		}
		errs = append(errs, field.NotSupported(path, v, allowed))
	}
	switch val := v.(type) {
	case string:
		n := int64(len([]rune(val)))
		if s.MaxLength != nil && n > *s.MaxLength {
			errs = append(errs, field.TooLong(path, "", int(*s.MaxLength)))
		}
		if s.MinLength != nil && n < *s.MinLength {
			errs = append(errs, field.Invalid(path, val, fmt.Sprintf("%s in body should be at least %d chars long", name, *s.MinLength)))
		}
		if s.Pattern != nil && !s.Pattern.MatchString(val) {
			errs = append(errs, field.Invalid(path, val, fmt.Sprintf("%s in body should match '%s'", name, s.Pattern.String())))
		}
		if s.Format != "" && !s.IntOrString {
			if ok, want := checkFormat(s.Format, val); !ok {
				errs = append(errs, field.Invalid(path, val, fmt.Sprintf("%s in body must be of type %s: %q", name, want, val)))
			}
		}
	case float64, int64:
		errs = append(errs, s.validateNumber(path, toFloat(val), v)...)
	case []any:
		n := int64(len(val))
		if s.MaxItems != nil && n > *s.MaxItems {
			errs = append(errs, field.TooMany(path, int(n), int(*s.MaxItems)))
		}
		if s.MinItems != nil && n < *s.MinItems {
			errs = append(errs, field.Invalid(path, n, fmt.Sprintf("%s in body should have at least %d items", name, *s.MinItems)))
		}
		if s.Unique || s.ListType == "set" {
			errs = append(errs, duplicates(path, val, func(e any) any { return e })...)
		}
		if s.ListType == "map" && len(s.ListMapKeys) > 0 {
			errs = append(errs, duplicates(path, val, func(e any) any {
				m, _ := e.(map[string]any)
				key := make(map[string]any, len(s.ListMapKeys))
				for _, k := range s.ListMapKeys {
					if v, ok := m[k]; ok {
						key[k] = v
					}
				}
				return key
			})...)
		}
		oldItems, _ := deref(old).([]any)
		for i, item := range val {
			var oldItem *any
			if o, ok := s.correlatedItem(item, oldItems); ok {
				oldItem = &o
			}
			errs = append(errs, s.Items.validate(path.Index(i), item, oldItem)...)
		}
	case map[string]any:
		n := int64(len(val))
		if s.MaxProps != nil && n > *s.MaxProps {
			errs = append(errs, field.TooMany(path, int(n), int(*s.MaxProps)))
		}
		if s.MinProps != nil && n < *s.MinProps {
			errs = append(errs, field.Invalid(path, n, fmt.Sprintf("%s in body should have at least %d properties", name, *s.MinProps)))
		}
		for _, req := range s.Required {
			if _, ok := val[req]; !ok {
				errs = append(errs, field.Required(path.Child(req), ""))
			}
		}
		if s.Embedded {
			errs = append(errs, validateEmbedded(path, val)...)
		}
		oldMap, _ := deref(old).(map[string]any)
		for _, k := range sortedKeys(val) {
			if c := s.child(k); c != nil {
				var oldChild *any
				if o, ok := oldMap[k]; ok {
					oldChild = &o
				}
				errs = append(errs, c.validate(path.Child(k), val[k], oldChild)...)
			}
		}
	}
	errs = append(errs, s.validateCombinators(path, v)...)
	return errs
}

func deref(p *any) any {
	if p == nil {
		return nil
	}
	return *p
}

// correlatedItem is the item of old that item of a list of type map correlates with: the
// one with the same keys. Items of other lists correlate with none.
func (s *Schema) correlatedItem(item any, old []any) (any, bool) {
	if s.ListType != "map" || len(s.ListMapKeys) == 0 {
		return nil, false
	}
	m, ok := item.(map[string]any)
	if !ok {
		return nil, false
	}
	for _, o := range old {
		om, ok := o.(map[string]any)
		if ok && !slices.ContainsFunc(s.ListMapKeys, func(k string) bool { return !jsonEqual(m[k], om[k]) }) {
			return o, true
		}
	}
	return nil, false
}

func (s *Schema) validateNumber(path *field.Path, f float64, v any) field.ErrorList {
	var errs field.ErrorList
	name := path.String()
	if s.Maximum != nil {
		if s.ExclMax && f >= *s.Maximum {
			errs = append(errs, field.Invalid(path, v, fmt.Sprintf("%s in body should be less than %v", name, *s.Maximum)))
		} else if f > *s.Maximum {
			errs = append(errs, field.Invalid(path, v, fmt.Sprintf("%s in body should be less than or equal to %v", name, *s.Maximum)))
		}
	}
	if s.Minimum != nil {
		if s.ExclMin && f <= *s.Minimum {
			errs = append(errs, field.Invalid(path, v, fmt.Sprintf("%s in body should be greater than %v", name, *s.Minimum)))
		} else if f < *s.Minimum {
			errs = append(errs, field.Invalid(path, v, fmt.Sprintf("%s in body should be greater than or equal to %v", name, *s.Minimum)))
		}
	}
	if s.MultipleOf != nil && *s.MultipleOf > 0 {
		if q := f / *s.MultipleOf; q != math.Trunc(q) {
			errs = append(errs, field.Invalid(path, v, fmt.Sprintf("%s in body should be a multiple of %v", name, *s.MultipleOf)))
		}
	}
	return errs
}

// validateCombinators checks allOf, anyOf, oneOf and not: value validations that must (or,
// for not, must not) hold as well.
func (s *Schema) validateCombinators(path *field.Path, v any) field.ErrorList {
	var errs field.ErrorList
	name := path.String()
	for _, sub := range s.AllOf {
		errs = append(errs, sub.valueOnly().Validate(path, v)...)
	}
	if len(s.AnyOf) > 0 {
		var suberrs field.ErrorList
		ok := false
		for _, sub := range s.AnyOf {
			e := sub.valueOnly().Validate(path, v)
			if len(e) == 0 {
				ok = true
				break
			}
			suberrs = append(suberrs, e...)
		}
		if !ok {
			errs = append(errs, field.Invalid(path, v, fmt.Sprintf("%s in body must validate at least one schema (anyOf)", name)))
			errs = append(errs, suberrs...)
		}
	}
	if len(s.OneOf) > 0 {
		matched := 0
		for _, sub := range s.OneOf {
			if len(sub.valueOnly().Validate(path, v)) == 0 {
				matched++
			}
		}
		if matched != 1 {
			errs = append(errs, field.Invalid(path, v, fmt.Sprintf("%s in body must validate one and only one schema (oneOf). Found %d valid alternatives", name, matched)))
		}
	}
	if s.Not != nil && len(s.Not.valueOnly().Validate(path, v)) == 0 {
		errs = append(errs, field.Invalid(path, v, fmt.Sprintf("%s in body must not validate the schema (not)", name)))
	}
	return errs
}

// valueOnly is s as used inside a combinator: a node there has no type of its own (structural
// schemas forbid it), so it must not fail on the value's type.
func (s *Schema) valueOnly() *Schema {
	if s.Type == "" {
		return s
	}
	c := *s
	c.Type = ""
	return &c
}

func (s *Schema) typeMatches(v any) bool {
	if s.IntOrString {
		switch n := v.(type) {
		case string, int64:
			return true
		case float64:
			return n == math.Trunc(n)
		}
		return false
	}
	switch s.Type {
	case "":
		return true
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "integer":
		switch n := v.(type) {
		case int64:
			return true
		case float64:
			return n == math.Trunc(n) && !math.IsInf(n, 0)
		}
		return false
	case "number":
		switch v.(type) {
		case int64, float64:
			return true
		}
	}
	return false
}

func typeName(s *Schema, v any) string {
	if s.IntOrString {
		return "integer or string"
	}
	return s.Type
}

func jsonType(v any) string {
	switch n := v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case int64:
		return "integer"
	case float64:
		if n == math.Trunc(n) {
			return "integer"
		}
		return "number"
	}
	return "null"
}

func toFloat(v any) float64 {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return 0
}

// jsonEqual compares two decoded JSON values, numbers by value whatever their Go type.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case int64, float64:
		switch b.(type) {
		case int64, float64:
			return toFloat(x) == toFloat(b)
		}
		return false
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

// duplicates reports the items of a set or map list whose key repeats an earlier item's,
// with that key (a map list's key fields) as the value.
func duplicates(path *field.Path, items []any, key func(any) any) field.ErrorList {
	var errs field.ErrorList
	for i := range items {
		ki := key(items[i])
		for j := 0; j < i; j++ {
			if jsonEqual(ki, key(items[j])) {
				errs = append(errs, field.Duplicate(path.Index(i), ki))
				break
			}
		}
	}
	return errs
}

// validateEmbedded checks an x-kubernetes-embedded-resource value: it has apiVersion and
// kind, and its metadata is object metadata.
func validateEmbedded(path *field.Path, obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	if v, _ := obj["apiVersion"].(string); v == "" {
		errs = append(errs, field.Required(path.Child("apiVersion"), "must not be empty"))
	}
	if v, _ := obj["kind"].(string); v == "" {
		errs = append(errs, field.Required(path.Child("kind"), "must not be empty"))
	}
	if md, ok := obj["metadata"]; ok {
		if _, isMap := md.(map[string]any); !isMap {
			errs = append(errs, field.Invalid(path.Child("metadata"), md, "must be an object"))
		}
	}
	return errs
}

// checkFormat reports whether val has the format, and the format's name in the message.
// Only the formats Kubernetes checks are known; others pass.
func checkFormat(format, val string) (bool, string) {
	switch format {
	case "int32":
		_, err := strconv.ParseInt(val, 10, 32)
		return err == nil, format
	case "int64":
		_, err := strconv.ParseInt(val, 10, 64)
		return err == nil, format
	case "byte":
		return base64Like.MatchString(val), format
	case "date":
		return dateRE.MatchString(val), format
	case "date-time", "datetime":
		return dateTimeRE.MatchString(val), "date-time"
	case "uuid":
		return uuidRE.MatchString(strings.ToLower(val)), format
	case "hostname":
		return len(val) <= 253 && hostnameRE.MatchString(val), format
	case "ipv4":
		return ipv4RE.MatchString(val), format
	case "email":
		return emailRE.MatchString(val), format
	}
	return true, format
}

var (
	base64Like = regexp.MustCompile(`^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`)
	dateRE     = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	dateTimeRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?$`)
	uuidRE     = regexp.MustCompile(`^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`)
	hostnameRE = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?)*$`)
	ipv4RE     = regexp.MustCompile(`^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$`)
	emailRE    = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
