package admission

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"
)

// The types mutation expressions build their results with. An ApplyConfiguration expression
// constructs the fields to set as `Object{spec: Object.spec{replicas: 1}}`: every type named
// Object or Object.<field path> exists, takes any field of any type, and holds what it is
// given; the names must follow the field path (checked after evaluation, as Kubernetes does,
// since the fields' types are not known when the policy is written). A JSONPatch expression
// returns a list of `JSONPatch{op: "add", path: "/spec/x", value: ...}`.

const (
	objectTypeName    = "Object"
	jsonPatchTypeName = "JSONPatch"
)

var jsonPatchType = types.NewObjectType(jsonPatchTypeName)

// mutationTypes adds the Object and JSONPatch types to an environment's types.
type mutationTypes struct {
	types.Provider
}

func isObjectType(name string) bool {
	return name == objectTypeName || strings.HasPrefix(name, objectTypeName+".")
}

func (p mutationTypes) FindStructType(name string) (*types.Type, bool) {
	if isObjectType(name) || name == jsonPatchTypeName {
		return types.NewTypeTypeWithParam(types.NewObjectType(name)), true
	}
	return p.Provider.FindStructType(name)
}

func (p mutationTypes) FindStructFieldNames(name string) ([]string, bool) {
	switch {
	case isObjectType(name):
		return nil, true
	case name == jsonPatchTypeName:
		return []string{"op", "path", "from", "value"}, true
	}
	return p.Provider.FindStructFieldNames(name)
}

func (p mutationTypes) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	switch {
	case isObjectType(name):
		return &types.FieldType{Type: types.DynType, IsSet: objectFieldSet(field), GetFrom: objectField(field)}, true
	case name == jsonPatchTypeName:
		switch field {
		case "op", "path", "from":
			return &types.FieldType{Type: types.StringType}, true
		case "value":
			return &types.FieldType{Type: types.DynType}, true
		}
		return nil, false
	}
	return p.Provider.FindStructFieldType(name, field)
}

func (p mutationTypes) NewValue(name string, fields map[string]ref.Val) ref.Val {
	switch {
	case isObjectType(name):
		return &objectVal{typeName: name, fields: fields}
	case name == jsonPatchTypeName:
		return newJSONPatch(fields)
	}
	return p.Provider.NewValue(name, fields)
}

func objectFieldSet(field string) ref.FieldTester {
	return func(target any) bool {
		o, ok := target.(*objectVal)
		if !ok {
			return false
		}
		_, set := o.fields[field]
		return set
	}
}

func objectField(field string) ref.FieldGetter {
	return func(target any) (any, error) {
		if o, ok := target.(*objectVal); ok {
			if v, set := o.fields[field]; set {
				return v, nil
			}
		}
		return nil, fmt.Errorf("no such key: %s", field)
	}
}

// objectVal is a value of an Object type: its fields as the expression gave them.
type objectVal struct {
	typeName string
	fields   map[string]ref.Val
}

var (
	_ ref.Val        = (*objectVal)(nil)
	_ traits.Indexer = (*objectVal)(nil)
)

func (o *objectVal) ConvertToNative(t reflect.Type) (any, error) {
	m, err := jsonOf(o)
	if err != nil {
		return nil, err
	}
	switch t {
	case reflect.TypeOf(map[string]any{}), reflect.TypeFor[any]():
		return m, nil
	case reflect.TypeOf(&structpb.Value{}):
		return structpb.NewValue(m)
	}
	return nil, fmt.Errorf("type conversion error from '%s' to '%v'", o.typeName, t)
}

func (o *objectVal) ConvertToType(t ref.Type) ref.Val {
	switch {
	case t.TypeName() == o.typeName:
		return o
	case t == types.TypeType:
		return types.NewTypeTypeWithParam(types.NewObjectType(o.typeName))
	}
	return types.NewErr("type conversion error from '%s' to '%s'", o.typeName, t.TypeName())
}

func (o *objectVal) Equal(other ref.Val) ref.Val {
	p, ok := other.(*objectVal)
	if !ok || p.typeName != o.typeName || len(p.fields) != len(o.fields) {
		return types.False
	}
	for k, v := range o.fields {
		w, ok := p.fields[k]
		if !ok || v.Equal(w) != types.True {
			return types.False
		}
	}
	return types.True
}

func (o *objectVal) Type() ref.Type { return types.NewObjectType(o.typeName) }

func (o *objectVal) Value() any {
	m, err := jsonOf(o)
	if err != nil {
		return types.WrapErr(err)
	}
	return m
}

func (o *objectVal) Get(key ref.Val) ref.Val {
	name, ok := key.Value().(string)
	if !ok {
		return types.NewErr("no such overload")
	}
	if v, set := o.fields[name]; set {
		return v
	}
	return types.NewErr("no such key: %s", name)
}

// checkTypeNames reports the Object values whose type name does not follow the field path
// they are at: `Object{spec: Object.metadata{}}` is a mistake a type check would have caught.
func checkTypeNames(v ref.Val, path string) error {
	var errs []error
	switch v := v.(type) {
	case *objectVal:
		if v.typeName != path {
			errs = append(errs, fmt.Errorf("unexpected type name %q, expected %q, which matches field name path from root Object type", v.typeName, path))
		}
		for k, f := range v.fields {
			errs = append(errs, checkTypeNames(f, path+"."+k))
		}
	case traits.Lister:
		for it := v.Iterator(); it.HasNext() == types.True; {
			errs = append(errs, checkTypeNames(it.Next(), path))
		}
	case traits.Mapper:
		for it := v.Iterator(); it.HasNext() == types.True; {
			errs = append(errs, checkTypeNames(v.Get(it.Next()), path))
		}
	}
	return errors.Join(errs...)
}

// jsonOf is a CEL value as JSON data (what json.Marshal and the unstructured converter take).
func jsonOf(v ref.Val) (any, error) {
	switch v := v.(type) {
	case *objectVal:
		out := make(map[string]any, len(v.fields))
		for k, f := range v.fields {
			j, err := jsonOf(f)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", k, err)
			}
			out[k] = j
		}
		return out, nil
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(v), nil
	case types.Int:
		return int64(v), nil
	case types.Uint:
		return int64(v), nil
	case types.Double:
		return float64(v), nil
	case types.String:
		return string(v), nil
	case traits.Lister:
		out := []any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			j, err := jsonOf(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, j)
		}
		return out, nil
	case traits.Mapper:
		out := map[string]any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			s, ok := k.Value().(string)
			if !ok {
				return nil, fmt.Errorf("map key %v is of type %s, not string", k, k.Type().TypeName())
			}
			j, err := jsonOf(v.Get(k))
			if err != nil {
				return nil, err
			}
			out[s] = j
		}
		return out, nil
	}
	// Durations, timestamps, bytes, quantities: their JSON form as CEL gives it.
	pb, err := v.ConvertToNative(reflect.TypeOf(&structpb.Value{}))
	if err != nil {
		return nil, fmt.Errorf("a value of type %s cannot be JSON: %w", v.Type().TypeName(), err)
	}
	return pb.(*structpb.Value).AsInterface(), nil
}

// jsonPatchOp is a value of the JSONPatch type: one operation of a JSON patch.
type jsonPatchOp struct {
	op, path, from string
	value          ref.Val
}

func newJSONPatch(fields map[string]ref.Val) ref.Val {
	p := &jsonPatchOp{}
	for name, v := range fields {
		if name == "value" {
			p.value = v
			continue
		}
		s, ok := v.Value().(string)
		if !ok {
			return types.NewErr("unexpected type %s for JSONPatch '%s' field", v.Type().TypeName(), name)
		}
		switch name {
		case "op":
			p.op = s
		case "path":
			p.path = s
		case "from":
			p.from = s
		default:
			return types.NewErr("unexpected JSONPatch field: %s", name)
		}
	}
	return p
}

var _ ref.Val = (*jsonPatchOp)(nil)

func (p *jsonPatchOp) ConvertToNative(t reflect.Type) (any, error) {
	if t == reflect.TypeOf(p) {
		return p, nil
	}
	return nil, fmt.Errorf("type conversion error from 'JSONPatch' to '%v'", t)
}

func (p *jsonPatchOp) ConvertToType(t ref.Type) ref.Val {
	switch {
	case t.TypeName() == jsonPatchTypeName:
		return p
	case t == types.TypeType:
		return types.NewTypeTypeWithParam(jsonPatchType)
	}
	return types.NewErr("type conversion error from 'JSONPatch' to '%s'", t.TypeName())
}

func (p *jsonPatchOp) Equal(other ref.Val) ref.Val {
	q, ok := other.(*jsonPatchOp)
	if !ok || p.op != q.op || p.path != q.path || p.from != q.from || (p.value == nil) != (q.value == nil) {
		return types.False
	}
	if p.value == nil {
		return types.True
	}
	return p.value.Equal(q.value)
}

func (p *jsonPatchOp) Type() ref.Type { return jsonPatchType }
func (p *jsonPatchOp) Value() any     { return p }

// jsonOp is the operation as JSON patch data.
func (p *jsonPatchOp) jsonOp() (map[string]any, error) {
	op := map[string]any{"op": p.op, "path": p.path}
	if p.from != "" {
		op["from"] = p.from
	}
	if p.value != nil {
		if o, isObject := p.value.(*objectVal); isObject {
			if err := checkTypeNames(o, o.typeName); err != nil {
				return nil, fmt.Errorf("type mismatch: %w", err)
			}
		}
		v, err := jsonOf(p.value)
		if err != nil {
			return nil, fmt.Errorf("JSONPatch value evaluated to a type that could not marshal to JSON: %w", err)
		}
		op["value"] = v
	}
	return op, nil
}

// jsonPatchLibrary is jsonpatch.escapeKey, which escapes a key for use in a JSON patch path
// ("~" as "~0", "/" as "~1").
func jsonPatchLibrary() cel.EnvOption {
	return cel.Function("jsonpatch.escapeKey",
		cel.Overload("string_jsonpatch_escapeKey", []*cel.Type{cel.StringType}, cel.StringType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				s, ok := v.(types.String)
				if !ok {
					return types.NoSuchOverloadErr()
				}
				return types.String(strings.NewReplacer("~", "~0", "/", "~1").Replace(string(s)))
			})))
}
