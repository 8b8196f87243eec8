package customresource

import (
	"encoding/base64"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// Sizes Kubernetes assumes when it estimates how large a value of a schema can be: a request
// is at most 3 MiB, and the smallest serializations of values bound how many fit in it.
const (
	maxRequestBytes   = 3 * 1024 * 1024
	minStringBytes    = 2  // ""
	minDurationBytes  = 3  // "0s"
	maxDurationBytes  = 32 // the longest duration kube-apiserver prints
	minDateTimeBytes  = 21 // "2006-01-02T15:04:05Z" quoted
	maxDateTimeBytes  = 32
	dateBytes         = 12 // "2006-01-02" quoted
	unboundedElements = maxRequestBytes - 2
)

// celType is the CEL type of a schema node, with what the cost estimator needs to know of
// it: how many elements (items, properties, characters) a value can have at most, and the
// smallest size of its JSON serialization.
type celType struct {
	cel    *cel.Type
	schema *Schema
	// fields of an object type by their CEL (escaped) names.
	fields map[string]*celField
	// elem is the type of a list's items or a map's values.
	elem        *celType
	maxElements int64
	minSize     int64
	nullable    bool
}

type celField struct {
	property string // the JSON property name
	typ      *celType
}

// celTypes declares the object types of one schema tree to the CEL type checker, so that
// rules select declared properties as fields (and a misspelt one does not compile).
type celTypes struct {
	types.Provider
	objects map[string]*celType
}

func (p *celTypes) FindStructType(name string) (*types.Type, bool) {
	if t, ok := p.objects[name]; ok {
		return types.NewTypeTypeWithParam(t.cel), true
	}
	return p.Provider.FindStructType(name)
}

func (p *celTypes) FindStructFieldNames(name string) ([]string, bool) {
	if t, ok := p.objects[name]; ok {
		return sortedKeys(t.fields), true
	}
	return p.Provider.FindStructFieldNames(name)
}

func (p *celTypes) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if t, ok := p.objects[name]; ok {
		f, ok := t.fields[field]
		if !ok {
			return nil, false
		}
		return &types.FieldType{Type: f.typ.cel}, true
	}
	return p.Provider.FindStructFieldType(name, field)
}

// declare builds the CEL type of s, named after name when it is an object; root says s is
// a resource (the CRD's root or an embedded resource), whose apiVersion, kind and
// metadata.name/generateName rules may read whether the schema declares them or not. Nodes
// CEL cannot type (no type and only x-kubernetes-preserve-unknown-fields) are nil: their
// properties are not visible to rules, as in Kubernetes.
func (p *celTypes) declare(s *Schema, name string, root bool) *celType {
	if s == nil {
		return nil
	}
	t := &celType{schema: s, nullable: s.Nullable}
	if s.IntOrString {
		t.cel, t.minSize = cel.DynType, 1
		t.maxElements = unboundedElements
		if s.MaxLength != nil {
			t.maxElements = max(*s.MaxLength, 0) * 4
		}
		return t
	}
	if root {
		s = withResourceFields(s)
		t.schema = s
	}
	switch s.Type {
	case "array":
		if s.Items == nil {
			return nil
		}
		if t.elem = p.declare(s.Items, name+".@items", s.Items.Embedded); t.elem == nil {
			return nil
		}
		t.cel, t.minSize = cel.ListType(t.elem.cel), 2
		t.maxElements = bounded(s.MaxItems, (maxRequestBytes-2)/(t.elem.minSize+1))
	case "object":
		if s.Additional != nil && len(s.Properties) == 0 && (s.Additional.Type != "" || s.Additional.IntOrString) {
			if t.elem = p.declare(s.Additional, name+".@values", s.Additional.Embedded); t.elem == nil {
				return nil
			}
			t.cel, t.minSize = cel.MapType(cel.StringType, t.elem.cel), 2
			t.maxElements = bounded(s.MaxProps, (maxRequestBytes-2)/(t.elem.minSize+6))
			return t
		}
		t.cel, t.minSize = cel.ObjectType(name), 2
		t.fields = map[string]*celField{}
		for _, prop := range sortedKeys(s.Properties) {
			ps := s.Properties[prop]
			escaped, ok := escapeProperty(prop)
			if !ok {
				continue
			}
			ft := p.declare(ps, name+"."+escaped, ps.Embedded)
			if ft == nil {
				continue
			}
			t.fields[escaped] = &celField{property: prop, typ: ft}
			if containsString(s.Required, prop) && !ps.HasDefault {
				t.minSize += int64(len(prop)) + ft.minSize + 4
			}
		}
		t.maxElements = 1
		p.objects[name] = t
	case "string":
		t.minSize = minStringBytes
		switch s.Format {
		case "byte":
			t.cel, t.maxElements = cel.BytesType, bounded(s.MaxLength, unboundedElements)
		case "duration":
			t.cel, t.minSize, t.maxElements = cel.DurationType, minDurationBytes, maxDurationBytes
		case "date":
			t.cel, t.minSize, t.maxElements = cel.TimestampType, dateBytes, dateBytes
		case "date-time":
			t.cel, t.minSize, t.maxElements = cel.TimestampType, minDateTimeBytes, maxDateTimeBytes
		default:
			t.cel = cel.StringType
			switch {
			case s.MaxLength != nil:
				t.maxElements = max(*s.MaxLength, 0) * 4 // up to 4 bytes a character
			case len(s.Enum) > 0:
				for _, e := range s.Enum {
					if str, ok := e.(string); ok {
						t.maxElements = max(t.maxElements, int64(len(str)))
					}
				}
			default:
				t.maxElements = unboundedElements
			}
		}
	case "boolean":
		t.cel, t.minSize = cel.BoolType, 4
	case "number":
		t.cel, t.minSize = cel.DoubleType, 1
	case "integer":
		t.cel, t.minSize = cel.IntType, 1
	default:
		return nil
	}
	return t
}

func bounded(limit *int64, estimate int64) int64 {
	if limit != nil {
		return max(*limit, 0)
	}
	return estimate
}

func containsString(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// withResourceFields is s with apiVersion, kind and metadata's name and generateName
// declared as strings, the part of a resource rules may always read.
func withResourceFields(s *Schema) *Schema {
	md := s.Properties["metadata"]
	if s.Properties["apiVersion"] != nil && s.Properties["kind"] != nil && md != nil && md.Properties["name"] != nil && md.Properties["generateName"] != nil {
		return s
	}
	c := *s
	c.Properties = make(map[string]*Schema, len(s.Properties)+3)
	for k, v := range s.Properties {
		c.Properties[k] = v
	}
	str := &Schema{Type: "string"}
	c.Properties["apiVersion"] = str
	c.Properties["kind"] = str
	c.Properties["metadata"] = &Schema{Type: "object", Properties: map[string]*Schema{"name": str, "generateName": str}}
	return &c
}

// celReserved are the words CEL reserves; a property so named is read as __<name>__.
var celReserved = map[string]bool{
	"true": true, "false": true, "null": true, "in": true, "as": true, "break": true, "const": true,
	"continue": true, "else": true, "for": true, "function": true, "if": true, "import": true, "let": true,
	"loop": true, "package": true, "namespace": true, "return": true, "var": true, "void": true, "while": true,
}

var escapable = regexp.MustCompile(`^[a-zA-Z_./-][a-zA-Z0-9_./-]*$`)

// escapeProperty is the CEL field name of a property, as Kubernetes escapes it: "__" is
// __underscores__, "." __dot__, "-" __dash__, "/" __slash__. Properties with other characters,
// or starting with a digit, cannot be named in CEL.
func escapeProperty(prop string) (string, bool) {
	if celReserved[prop] {
		return "__" + prop + "__", true
	}
	if !escapable.MatchString(prop) {
		return "", false
	}
	var out []byte
	for i := 0; i < len(prop); i++ {
		switch c := prop[i]; {
		case c == '_' && i+1 < len(prop) && prop[i+1] == '_':
			out = append(out, "__underscores__"...)
			i++
		case c == '.':
			out = append(out, "__dot__"...)
		case c == '-':
			out = append(out, "__dash__"...)
		case c == '/':
			out = append(out, "__slash__"...)
		default:
			out = append(out, c)
		}
	}
	return string(out), true
}

// toCEL converts v, a decoded JSON value typed by t, to the CEL value rules see. Objects
// become maps from the CEL field names of their declared properties (undeclared ones are
// not visible), lists of type set and map compare regardless of order.
func toCEL(v any, t *celType) ref.Val {
	if v == nil {
		if t.nullable {
			return types.NullValue
		}
		return types.NewErr("invalid data, got null for schema with nullable=false")
	}
	s := t.schema
	if s.IntOrString {
		switch n := v.(type) {
		case string:
			return types.String(n)
		case int64:
			return types.Int(n)
		case float64:
			if n == math.Trunc(n) {
				return types.Int(int64(n))
			}
		}
		return types.NewErr("invalid data, expected an integer or a string")
	}
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return types.NewErr("invalid data, expected an object")
		}
		out := make(map[ref.Val]ref.Val, len(m))
		if t.fields == nil {
			for k, e := range m {
				out[types.String(k)] = toCEL(e, t.elem)
			}
		} else {
			for name, f := range t.fields {
				if e, ok := m[f.property]; ok {
					out[types.String(name)] = toCEL(e, f.typ)
				}
			}
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, out)
	case "array":
		l, ok := v.([]any)
		if !ok {
			return types.NewErr("invalid data, expected an array")
		}
		items := make([]ref.Val, len(l))
		for i, e := range l {
			items[i] = toCEL(e, t.elem)
		}
		list := types.NewRefValList(types.DefaultTypeAdapter, items)
		switch s.ListType {
		case "set":
			return unorderedList{Lister: list, key: func(v ref.Val) any { return v.Value() }}
		case "map":
			return unorderedList{Lister: list, key: mapListKey(t.elem, s.ListMapKeys)}
		}
		return list
	case "string":
		str, ok := v.(string)
		if !ok {
			return types.NewErr("invalid data, expected a string")
		}
		switch s.Format {
		case "byte":
			b, err := base64.StdEncoding.DecodeString(str)
			if err != nil {
				return types.NewErr("invalid byte formatted string %s: %v", str, err)
			}
			return types.Bytes(b)
		case "duration":
			d, err := time.ParseDuration(str)
			if err != nil {
				return types.NewErr("invalid duration %s: %v", str, err)
			}
			return types.Duration{Duration: d}
		case "date":
			d, err := time.Parse(time.DateOnly, str)
			if err != nil {
				return types.NewErr("invalid date formatted string %s: %v", str, err)
			}
			return types.Timestamp{Time: d}
		case "date-time":
			d, err := parseDateTime(str)
			if err != nil {
				return types.NewErr("invalid date-time formatted string %s: %v", str, err)
			}
			return types.Timestamp{Time: d}
		}
		return types.String(str)
	case "integer":
		switch n := v.(type) {
		case int64:
			return types.Int(n)
		case float64:
			return types.Int(int64(n))
		}
		return types.NewErr("invalid data, expected an integer")
	case "number":
		switch n := v.(type) {
		case int64:
			return types.Double(float64(n))
		case float64:
			return types.Double(n)
		}
		return types.NewErr("invalid data, expected a number")
	case "boolean":
		b, ok := v.(bool)
		if !ok {
			return types.NewErr("invalid data, expected a boolean")
		}
		return types.Bool(b)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// mapListKey reads the key of an item of a list of type map as a comparable value.
func mapListKey(item *celType, keys []string) func(ref.Val) any {
	return func(v ref.Val) any {
		m, ok := v.(traits.Mapper)
		if !ok {
			return nil
		}
		parts := make([]any, len(keys))
		for i, k := range keys {
			name, _ := escapeProperty(k)
			if e, found := m.Find(types.String(name)); found {
				parts[i] = e.Value()
			}
		}
		return fmt.Sprint(parts...)
	}
}

// unorderedList is a list of type set or map: two are equal when they hold equal items
// (matched by key), in any order.
type unorderedList struct {
	traits.Lister
	key func(ref.Val) any
}

func (l unorderedList) Equal(other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	if l.Size() != o.Size() {
		return types.False
	}
	byKey := map[any]ref.Val{}
	for it := l.Iterator(); it.HasNext() == types.True; {
		v := it.Next()
		byKey[fmt.Sprint(l.key(v))] = v
	}
	for it := o.Iterator(); it.HasNext() == types.True; {
		v := it.Next()
		mine, ok := byKey[fmt.Sprint(l.key(v))]
		if !ok {
			return types.False
		}
		if eq := mine.Equal(v); eq != types.True {
			return eq
		}
	}
	return types.True
}

// parseDateTime reads the date-times the schema's date-time format accepts: RFC 3339, with
// a "t" or space between date and time and, without a zone, UTC.
func parseDateTime(s string) (time.Time, error) {
	if len(s) > 10 && (s[10] == 't' || s[10] == ' ') {
		s = s[:10] + "T" + s[11:]
	}
	s = strings.Replace(s, "z", "Z", 1)
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		if t, err2 := time.Parse("2006-01-02T15:04:05.999999999", s); err2 == nil {
			return t, nil
		}
	}
	return t, err
}

// TypeDeclarations declares CEL object types outside CRD validation rules: a resource's
// schema, or an object of named fields, for expressions (admission policies) that are
// type-checked against what they read. Names must be unique within one TypeDeclarations.
type TypeDeclarations struct{ p *celTypes }

// NewTypeDeclarations starts an empty set of declarations over the base environment's types.
func NewTypeDeclarations() (*TypeDeclarations, error) {
	env, err := baseEnv()
	if err != nil {
		return nil, err
	}
	return &TypeDeclarations{p: &celTypes{Provider: env.CELTypeProvider(), objects: map[string]*celType{}}}, nil
}

// Resource declares the type of a resource of schema s, named name (its nested types are
// named below it); apiVersion, kind and metadata.name are always readable. A schema CEL
// cannot type is dyn.
func (d *TypeDeclarations) Resource(s *Schema, name string) *cel.Type {
	if t := d.p.declare(s, name, true); t != nil {
		return t.cel
	}
	return cel.DynType
}

// Object declares an object type with the given fields.
func (d *TypeDeclarations) Object(name string, fields map[string]*cel.Type) *cel.Type {
	t := &celType{cel: cel.ObjectType(name), fields: make(map[string]*celField, len(fields))}
	for n, ft := range fields {
		t.fields[n] = &celField{property: n, typ: &celType{cel: ft}}
	}
	d.p.objects[name] = t
	return t.cel
}

// EnvOption makes the declared types known to an environment extended with it.
func (d *TypeDeclarations) EnvOption() cel.EnvOption { return cel.CustomTypeProvider(d.p) }
