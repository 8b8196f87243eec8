package fieldmanager

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/kplane/kplane/internal/jsonfields"

	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/managedfields"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// Types is the structured-merge-diff type information of a set of kinds: what is a field, which
// lists are sets or maps keyed by which fields, which structs and maps are atomic. It implements
// managedfields.TypeConverter, the interface apimachinery's field manager reads objects through.
// Types are immutable once built and safe for concurrent use.
type Types struct {
	parser *typed.Parser
	kinds  map[schema.GroupVersionKind]typed.ParseableType
}

var _ managedfields.TypeConverter = (*Types)(nil)

// Kinds lists the kinds t knows.
func (t *Types) Kinds() []schema.GroupVersionKind {
	out := make([]schema.GroupVersionKind, 0, len(t.kinds))
	for gvk := range t.kinds {
		out = append(out, gvk)
	}
	return out
}

// ObjectToTyped implements managedfields.TypeConverter: typed Go objects are read by
// reflection (no conversion to maps first), unstructured ones as they are.
func (t *Types) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	pt, ok := t.kinds[gvk]
	if !ok {
		return nil, fmt.Errorf("no type information for %v", gvk)
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return pt.FromUnstructured(u.Object, opts...)
	}
	return pt.FromStructured(obj, opts...)
}

// TypedToObject implements managedfields.TypeConverter.
func (t *Types) TypedToObject(v *typed.TypedValue) (runtime.Object, error) {
	m, ok := v.AsValue().Unstructured().(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a typed value of %T is not an object", v.AsValue().Unstructured())
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Names of the structured-merge-diff types every schema carries: values of unknown shape, kept
// whole (atomic) or merged field by field where they are maps (deduced), as Kubernetes names them.
const (
	untypedAtomic  = "__untyped_atomic_"
	untypedDeduced = "__untyped_deduced_"
)

func untypedDefs() []smdschema.TypeDef {
	atomic, deduced := untypedAtomic, untypedDeduced
	scalar := smdschema.Scalar("untyped")
	return []smdschema.TypeDef{
		{Name: atomic, Atom: smdschema.Atom{
			Scalar: &scalar,
			List:   &smdschema.List{ElementType: smdschema.TypeRef{NamedType: &atomic}, ElementRelationship: smdschema.Atomic},
			Map:    &smdschema.Map{ElementType: smdschema.TypeRef{NamedType: &atomic}, ElementRelationship: smdschema.Atomic},
		}},
		{Name: deduced, Atom: smdschema.Atom{
			Scalar: &scalar,
			List:   &smdschema.List{ElementType: smdschema.TypeRef{NamedType: &atomic}, ElementRelationship: smdschema.Atomic},
			Map:    &smdschema.Map{ElementType: smdschema.TypeRef{NamedType: &deduced}, ElementRelationship: smdschema.Separable},
		}},
	}
}

// The Go types that serialize as something other than their fields.
var (
	timeType      = reflect.TypeOf(metav1.Time{})
	microTimeType = reflect.TypeOf(metav1.MicroTime{})
	durationType  = reflect.TypeOf(metav1.Duration{})
	intOrString   = reflect.TypeOf(intstr.IntOrString{})
	quantityType  = reflect.TypeOf(apiresource.Quantity{})
	rawExtension  = reflect.TypeOf(runtime.RawExtension{})
	fieldsV1Type  = reflect.TypeOf(metav1.FieldsV1{})
	jsonMarshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
)

// TypeName names a Go type as Kubernetes' OpenAPI does (k8s.io/api/core/v1.Pod →
// io.k8s.api.core.v1.Pod), the names the list-type table and JSON schema references use.
func TypeName(t reflect.Type) string {
	pkg := t.PkgPath()
	if host, rest, ok := strings.Cut(pkg, "/"); ok {
		parts := strings.Split(host, ".")
		for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
		pkg = strings.Join(parts, ".") + "." + strings.ReplaceAll(rest, "/", ".")
	}
	return pkg + "." + t.Name()
}

// ForGoTypes builds the types of kinds from their Go types (k8s.io/api structs), walking
// their fields by reflection as encoding/json sees them. Lists take their semantics from the
// patchStrategy/patchMergeKey struct tags, corrected by the listTypes table where Kubernetes'
// +listType markers (which are comments, not tags) say otherwise.
func ForGoTypes(kinds map[schema.GroupVersionKind]reflect.Type) (*Types, error) {
	b := &goSchema{done: map[reflect.Type]string{}}
	t := &Types{kinds: map[schema.GroupVersionKind]typed.ParseableType{}}
	names := map[schema.GroupVersionKind]string{}
	for gvk, typ := range kinds {
		if typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return nil, fmt.Errorf("%v: %v is not a struct", gvk, typ)
		}
		names[gvk] = b.named(typ)
	}
	b.keyDefaults()
	b.types = append(b.types, untypedDefs()...)
	t.parser = &typed.Parser{Schema: smdschema.Schema{Types: b.types}}
	for gvk, name := range names {
		t.kinds[gvk] = t.parser.Type(name)
	}
	return t, nil
}

// goSchema accumulates one named structured-merge-diff type per Go struct.
type goSchema struct {
	done  map[reflect.Type]string
	types []smdschema.TypeDef
}

func (b *goSchema) named(t reflect.Type) string {
	if name, ok := b.done[t]; ok {
		return name
	}
	name := TypeName(t)
	b.done[t] = name // before the fields: types may refer to themselves
	i := len(b.types)
	b.types = append(b.types, smdschema.TypeDef{Name: name})
	m := &smdschema.Map{}
	if overrides[name] == "atomic" {
		m.ElementRelationship = smdschema.Atomic
	}
	b.fields(t, name, m)
	b.types[i].Atom = smdschema.Atom{Map: m}
	return name
}

// keyDefaults gives the key fields of every list map a default, the value an entry that omits
// the key is taken to have: a port applied without its protocol is the live TCP port, not
// another one. Kubernetes' OpenAPI declares these defaults (TCP for ports' protocol, the zero
// value for the required keys); the Go types only imply them.
func (b *goSchema) keyDefaults() {
	index := map[string]int{}
	for i, td := range b.types {
		index[td.Name] = i
	}
	visit := func(ref smdschema.TypeRef) {
		l := ref.Inlined.List
		if l == nil || len(l.Keys) == 0 || l.ElementType.NamedType == nil {
			return
		}
		elem := *l.ElementType.NamedType
		td := &b.types[index[elem]]
		for j := range td.Map.Fields {
			f := &td.Map.Fields[j]
			if !slices.Contains(l.Keys, f.Name) || f.Default != nil || f.Type.Inlined.Scalar == nil {
				continue
			}
			if d, ok := keyDefaults[elem+"."+f.Name]; ok {
				f.Default = d
				continue
			}
			switch *f.Type.Inlined.Scalar {
			case smdschema.String:
				f.Default = ""
			case smdschema.Numeric:
				f.Default = int64(0)
			case smdschema.Boolean:
				f.Default = false
			}
		}
	}
	for _, td := range b.types {
		if td.Map != nil {
			for _, f := range td.Map.Fields {
				visit(f.Type)
			}
		}
	}
}

// keyDefaults are the list-map keys whose default is not their zero value.
var keyDefaults = map[string]any{
	"io.k8s.api.core.v1.ContainerPort.protocol": "TCP",
	"io.k8s.api.core.v1.ServicePort.protocol":   "TCP",
}

// fields adds t's JSON fields to m, inlined structs' fields included.
func (b *goSchema) fields(t reflect.Type, owner string, m *smdschema.Map) {
	for _, f := range jsonfields.Of(t) {
		name := f.Name
		ref := b.ref(f.Type)
		key := owner + "." + name
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8 && ref.Inlined.List != nil:
			rel, keys := listSemantics(f.Tag)
			if o, ok := overrides[key]; ok {
				rel, keys = parseListType(o)
			}
			ref.Inlined.List.ElementRelationship, ref.Inlined.List.Keys = rel, keys
		case overrides[key] == "atomic" || overrides[key] == "granular":
			rel := smdschema.Atomic
			if overrides[key] == "granular" {
				rel = smdschema.Separable
			}
			if ref.Inlined.Map != nil {
				ref.Inlined.Map.ElementRelationship = rel
			} else {
				ref.ElementRelationship = &rel
			}
		}
		m.Fields = append(m.Fields, smdschema.StructField{Name: name, Type: ref})
	}
}

// ref is the type reference of a field of Go type t.
func (b *goSchema) ref(t reflect.Type) smdschema.TypeRef {
	scalar := func(s smdschema.Scalar) smdschema.TypeRef {
		return smdschema.TypeRef{Inlined: smdschema.Atom{Scalar: &s}}
	}
	named := func(n string) smdschema.TypeRef { return smdschema.TypeRef{NamedType: &n} }
	switch t {
	case timeType, microTimeType, intOrString, quantityType:
		return scalar("untyped")
	case durationType:
		return scalar(smdschema.String)
	case rawExtension:
		return named(untypedAtomic)
	case fieldsV1Type:
		// managedFields' own sets are opaque values, never merged.
		return named(untypedAtomic)
	}
	if t.Kind() == reflect.Struct && t.Implements(jsonMarshaler) {
		// Any other type that writes its own JSON (a CRD's JSON and JSONSchemaPropsOr*
		// values) is of no declared shape in Kubernetes' OpenAPI either.
		return named(untypedDeduced)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return b.ref(t.Elem())
	case reflect.Struct:
		return named(b.named(t))
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return scalar(smdschema.String)
		}
		return smdschema.TypeRef{Inlined: smdschema.Atom{List: &smdschema.List{ElementType: b.ref(t.Elem()), ElementRelationship: smdschema.Atomic}}}
	case reflect.Map:
		return smdschema.TypeRef{Inlined: smdschema.Atom{Map: &smdschema.Map{ElementType: b.ref(t.Elem())}}}
	case reflect.String:
		return scalar(smdschema.String)
	case reflect.Bool:
		return scalar(smdschema.Boolean)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return scalar(smdschema.Numeric)
	}
	// interface{} and anything else of unknown shape.
	return named(untypedDeduced)
}

// listSemantics reads a list's merge semantics from its strategic-merge-patch tags, as
// Kubernetes does where no +listType marker is given: merge with a key is a map keyed by it,
// merge without one is a set, anything else is replaced whole.
func listSemantics(tag reflect.StructTag) (smdschema.ElementRelationship, []string) {
	strategy := tag.Get("patchStrategy")
	if strategy != "merge" && strategy != "merge,retainKeys" {
		return smdschema.Atomic, nil
	}
	if key := tag.Get("patchMergeKey"); key != "" {
		return smdschema.Associative, []string{key}
	}
	return smdschema.Associative, nil
}

// parseListType reads the table's notation: "atomic", "set" or "map:key1,key2".
func parseListType(s string) (smdschema.ElementRelationship, []string) {
	switch {
	case s == "set":
		return smdschema.Associative, nil
	case strings.HasPrefix(s, "map:"):
		return smdschema.Associative, strings.Split(strings.TrimPrefix(s, "map:"), ",")
	}
	return smdschema.Atomic, nil
}
