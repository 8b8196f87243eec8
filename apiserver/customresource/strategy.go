package customresource

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kplane/kplane/apiserver/registry"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Resource serves one version of a CRD's custom resources: it is the registry.Strategy of
// that version, over *unstructured.Unstructured objects.
type Resource struct {
	info     registry.Info
	listKind string
	schema   *Schema
	columns  []column
	fields   []selectable
	scale    *Scale
	// Rules are the CEL rules of the schema, compiled (nil without rules).
	rules *ruleSet
	// openapi is the version's openAPIV3Schema as JSON, for the OpenAPI documents.
	openapi []byte
}

type column struct {
	def  metav1.TableColumnDefinition
	path *Path
}

type selectable struct {
	name string // "spec.color", the field selector's name
	path *Path
}

// Scale locates the scale subresource's fields in the objects.
type Scale struct {
	SpecReplicas, StatusReplicas, LabelSelector *Path
	// Raw paths as the CRD wrote them, for writing spec replicas back.
	SpecReplicasPath string
	// ReplicasPaths holds, for every version of the CRD ("group/version"), the fields of
	// its spec replicas path, nil for a version without a scale subresource: what the
	// managedFields of a scale write are translated with.
	ReplicasPaths map[string][]string
}

// NewResource builds the strategy of version v of crd, whose accepted names are names.
// The CRD must be valid (ValidateCRD).
func NewResource(crd *apiextv1.CustomResourceDefinition, v *apiextv1.CustomResourceDefinitionVersion) (*Resource, error) {
	names := crd.Status.AcceptedNames
	r := &Resource{
		info: registry.Info{
			GroupVersion: schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name},
			Resource:     names.Plural, Singular: names.Singular, Kind: names.Kind,
			ShortNames: names.ShortNames, Categories: names.Categories,
			Namespaced: crd.Spec.Scope == apiextv1.NamespaceScoped,
		},
		listKind: names.ListKind,
	}
	if r.listKind == "" {
		r.listKind = names.Kind + "List"
	}
	if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
		s, err := Compile(v.Schema.OpenAPIV3Schema)
		if err != nil {
			return nil, err
		}
		r.schema = s
		if r.openapi, err = json.Marshal(v.Schema.OpenAPIV3Schema); err != nil {
			return nil, err
		}
		if r.rules, err = compileRules(s); err != nil {
			return nil, err
		}
	}
	if sub := v.Subresources; sub != nil {
		r.info.Status = sub.Status != nil
		if sc := sub.Scale; sc != nil {
			r.info.Scale = true
			r.scale = &Scale{SpecReplicasPath: sc.SpecReplicasPath, ReplicasPaths: map[string][]string{}}
			for _, other := range crd.Spec.Versions {
				gv := schema.GroupVersion{Group: crd.Spec.Group, Version: other.Name}.String()
				r.scale.ReplicasPaths[gv] = nil
				if other.Subresources != nil && other.Subresources.Scale != nil {
					r.scale.ReplicasPaths[gv] = strings.Split(strings.TrimPrefix(other.Subresources.Scale.SpecReplicasPath, "."), ".")
				}
			}
			var err error
			if r.scale.SpecReplicas, err = ParsePath(sc.SpecReplicasPath); err != nil {
				return nil, err
			}
			if r.scale.StatusReplicas, err = ParsePath(sc.StatusReplicasPath); err != nil {
				return nil, err
			}
			if sc.LabelSelectorPath != nil {
				if r.scale.LabelSelector, err = ParsePath(*sc.LabelSelectorPath); err != nil {
					return nil, err
				}
			}
		}
	}
	cols := v.AdditionalPrinterColumns
	if len(cols) == 0 {
		cols = []apiextv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}}
	}
	for _, c := range cols {
		p, err := ParsePath(c.JSONPath)
		if err != nil {
			return nil, err
		}
		r.columns = append(r.columns, column{def: metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description, Priority: c.Priority}, path: p})
	}
	for _, f := range v.SelectableFields {
		p, err := ParsePath(f.JSONPath)
		if err != nil {
			return nil, err
		}
		r.fields = append(r.fields, selectable{name: strings.TrimPrefix(f.JSONPath, "."), path: p})
	}
	return r, nil
}

// OpenAPISchema returns a fresh copy of the version's schema as decoded JSON.
func (r *Resource) OpenAPISchema() map[string]any {
	out := map[string]any{}
	if len(r.openapi) > 0 {
		_ = json.Unmarshal(r.openapi, &out)
	}
	return out
}

// ScaleSpec returns where the scale subresource's fields are (nil without one).
func (r *Resource) ScaleSpec() *Scale { return r.scale }

// ListKind is the kind of this resource's lists.
func (r *Resource) ListKind() string { return r.listKind }

// Describe implements registry.Strategy.
func (r *Resource) Describe() *registry.Info { return &r.info }

// NewObject implements registry.Strategy.
func (r *Resource) NewObject() registry.Object {
	return &unstructured.Unstructured{Object: map[string]any{}}
}

// NewListObject implements registry.Strategy.
func (r *Resource) NewListObject() runtime.Object {
	l := &unstructured.UnstructuredList{Object: map[string]any{}}
	l.SetAPIVersion(r.info.GroupVersion.String())
	l.SetKind(r.listKind)
	return l
}

// Prune drops the fields the schema does not specify and returns their paths, for
// fieldValidation's unknown-field warnings and errors. Defaults are filled when the write is
// prepared (PrepareCreate, PrepareUpdate), once.
func (r *Resource) Prune(o registry.Object) []string {
	u := o.(*unstructured.Unstructured)
	if r.schema == nil {
		return nil
	}
	return r.schema.Prune(u.Object)
}

// Default fills the schema's defaults into an object read from storage, as Kubernetes
// defaults stored objects on read (a default added to a CRD shows on old objects).
func (r *Resource) Default(u *unstructured.Unstructured) {
	if r.schema != nil {
		r.schema.ApplyDefaults(u.Object)
	}
}

// PrepareCreate implements registry.Strategy.
func (r *Resource) PrepareCreate(o registry.Object) {
	u := o.(*unstructured.Unstructured)
	if r.info.Status {
		delete(u.Object, "status")
	}
	u.SetGeneration(1)
	r.Default(u)
}

// PrepareForAdmission implements registry.Strategy: PrepareCreate, which has no step that
// needs the object's identity.
func (r *Resource) PrepareForAdmission(o registry.Object) { r.PrepareCreate(o) }

// PrepareUpdate implements registry.Strategy: a write of the object keeps the stored status
// (with a status subresource), a status write keeps everything but the status; generation
// counts changes of anything but metadata and status.
func (r *Resource) PrepareUpdate(o, oldo registry.Object, subresource string) {
	u, old := o.(*unstructured.Unstructured), oldo.(*unstructured.Unstructured)
	if subresource == "status" {
		status, has := u.Object["status"]
		rv := u.GetResourceVersion()
		u.Object = runtime.DeepCopyJSON(old.Object)
		u.SetResourceVersion(rv)
		if has {
			u.Object["status"] = status
		} else {
			delete(u.Object, "status")
		}
		return
	}
	if r.info.Status && subresource == "" {
		if st, ok := old.Object["status"]; ok {
			u.Object["status"] = runtime.DeepCopyJSONValue(st)
		} else {
			delete(u.Object, "status")
		}
	}
	u.SetGeneration(old.GetGeneration())
	r.Default(u)
	if !apiequality.Semantic.DeepEqual(content(u, r.info.Status), content(old, r.info.Status)) {
		u.SetGeneration(old.GetGeneration() + 1)
	}
}

// content is what generation counts: everything but metadata (and status, if it has its own
// subresource).
func content(u *unstructured.Unstructured, status bool) map[string]any {
	out := make(map[string]any, len(u.Object))
	for k, v := range u.Object {
		if k == "metadata" || (status && k == "status") || k == "apiVersion" || k == "kind" {
			continue
		}
		out[k] = v
	}
	return out
}

// AllocateFor implements registry.Strategy: custom resources allocate nothing.
func (r *Resource) AllocateFor(context.Context, registry.Hooks, registry.Object, registry.Object) field.ErrorList {
	return nil
}

// AdmitFor implements registry.Strategy: no built-in admission of its own.
func (r *Resource) AdmitFor(context.Context, registry.Objects, registry.Object, registry.Object, string) error {
	return nil
}

// ValidateAdmissionFor implements registry.Strategy: no built-in admission of its own.
func (r *Resource) ValidateAdmissionFor(context.Context, registry.Objects, registry.Object, registry.Object, string) error {
	return nil
}

// PrepareCreateFromRequest implements registry.Strategy: nothing comes from the request.
func (r *Resource) PrepareCreateFromRequest(context.Context, registry.Object) {}

// ValidateObject implements registry.Strategy: metadata, kind, the schema and its CEL rules.
func (r *Resource) ValidateObject(o, oldo registry.Object) field.ErrorList {
	errs, _ := r.ValidateUpdateWithWarnings(o, oldo)
	return errs
}

// ValidateUpdateWithWarnings implements registry.RatchetingValidator: ValidateObject, with
// the failed rules of values the update did not change as warnings (the schema's own checks
// let such values through silently, as Kubernetes' do).
func (r *Resource) ValidateUpdateWithWarnings(o, oldo registry.Object) (field.ErrorList, []string) {
	var warnings []string
	u := o.(*unstructured.Unstructured)
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(u, r.info.Namespaced, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	var old *unstructured.Unstructured
	if oldo != nil {
		old = oldo.(*unstructured.Unstructured)
		errs = append(errs, apimachineryvalidation.ValidateObjectMetaAccessorUpdate(u, old, field.NewPath("metadata"))...)
	}
	if u.GetKind() != r.info.Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), u.GetKind(), "must be "+r.info.Kind))
	}
	if u.GetAPIVersion() != r.info.GroupVersion.String() {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), u.GetAPIVersion(), "must be "+r.info.GroupVersion.String()))
	}
	if r.schema != nil {
		for _, k := range sortedKeys(u.Object) {
			if k == "metadata" || k == "apiVersion" || k == "kind" {
				continue
			}
			if old, ok := oldValue(old, k); ok {
				errs = append(errs, r.schema.child(k).ValidateUpdate(field.NewPath(k), u.Object[k], old)...)
			} else {
				errs = append(errs, r.schema.child(k).Validate(field.NewPath(k), u.Object[k])...)
			}
		}
		for _, req := range r.schema.Required {
			if _, ok := u.Object[req]; !ok {
				errs = append(errs, field.Required(field.NewPath(req), ""))
			}
		}
		if md, ok := r.schema.Properties["metadata"]; ok {
			errs = append(errs, validateMetadataFields(md, u)...)
		}
		if r.rules != nil {
			var oldObj map[string]any
			if old != nil {
				oldObj = old.Object
			}
			ruleErrs, ruleWarnings := r.rules.validateUnlessBlocked(errs, u.Object, oldObj)
			errs, warnings = append(errs, ruleErrs...), ruleWarnings
		}
	}
	return errs, warnings
}

// oldValue is the old object's top-level field k, if there is an old object and it has k.
func oldValue(old *unstructured.Unstructured, k string) (any, bool) {
	if old == nil {
		return nil, false
	}
	v, ok := old.Object[k]
	return v, ok
}

// validateMetadataFields applies a root metadata schema's name and generateName restrictions.
func validateMetadataFields(md *Schema, u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if s, ok := md.Properties["name"]; ok && u.GetName() != "" {
		errs = append(errs, s.Validate(field.NewPath("metadata", "name"), u.GetName())...)
	}
	if s, ok := md.Properties["generateName"]; ok && u.GetGenerateName() != "" {
		errs = append(errs, s.Validate(field.NewPath("metadata", "generateName"), u.GetGenerateName())...)
	}
	return errs
}

// ValidateSubresourceWrite implements registry.Strategy: custom resources' subresources check
// nothing beyond the object's own validation.
func (r *Resource) ValidateSubresourceWrite(registry.Object, registry.Object, string) field.ErrorList {
	return nil
}

// ClaimsOf implements registry.Strategy.
func (r *Resource) ClaimsOf(registry.Object) []string { return nil }

// SelectableFields implements registry.Strategy: metadata.name, metadata.namespace and the
// CRD's selectableFields.
func (r *Resource) SelectableFields(o registry.Object) fields.Set {
	set := fields.Set{"metadata.name": o.GetName()}
	if r.info.Namespaced {
		set["metadata.namespace"] = o.GetNamespace()
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return set
	}
	for _, f := range r.fields {
		if v, ok := f.path.First(u.Object); ok {
			set[f.name] = fmt.Sprint(v)
		} else {
			set[f.name] = ""
		}
	}
	return set
}

// TableColumns implements registry.Strategy.
func (r *Resource) TableColumns() []metav1.TableColumnDefinition {
	cols := []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."}}
	for _, c := range r.columns {
		cols = append(cols, c.def)
	}
	return cols
}

// TableRow implements registry.Strategy: each printer column's value, dates as ages, absent
// values empty, lists and objects as JSON.
func (r *Resource) TableRow(o registry.Object) []any {
	u := o.(*unstructured.Unstructured)
	row := []any{u.GetName()}
	for _, c := range r.columns {
		v, ok := c.path.First(u.Object)
		if !ok {
			row = append(row, nil)
			continue
		}
		row = append(row, cell(c.def.Type, v))
	}
	return row
}

func cell(typ string, v any) any {
	switch typ {
	case "date":
		if s, ok := v.(string); ok {
			var t metav1.Time
			if err := t.UnmarshalQueryParameter(s); err == nil {
				return registry.Age(t)
			}
		}
	case "integer":
		switch n := v.(type) {
		case int64:
			return n
		case float64:
			return int64(n)
		}
	case "number":
		switch n := v.(type) {
		case int64:
			return float64(n)
		case float64:
			return n
		}
	case "boolean":
		if b, ok := v.(bool); ok {
			return b
		}
	case "string":
		if s, ok := v.(string); ok {
			return s
		}
	}
	switch v.(type) {
	case map[string]any, []any:
		b, _ := json.Marshal(v)
		return string(b)
	}
	return fmt.Sprint(v)
}

// StoredVersion implements registry.Strategy: nil, the apiserver converts a CRD's versions
// (Converter) around one store of its objects.
func (r *Resource) StoredVersion() registry.Conversion { return nil }
