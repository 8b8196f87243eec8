package fieldmanager

import (
	"encoding/json"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/schemaconv"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

var objectMetaType = reflect.TypeOf(metav1.ObjectMeta{})

// ForJSONSchema builds the types of a custom resource kind from the openAPIV3Schema of its
// CRD version: a structural schema in its JSON form, with Kubernetes' extensions
// (x-kubernetes-list-type, -list-map-keys, -map-type, -preserve-unknown-fields,
// -embedded-resource, -int-or-string). As kube-apiserver does for custom resources, the
// object and every embedded resource get apiVersion, kind and metadata (ObjectMeta) fields
// whatever the schema says of them. A nil schema keeps every field (preserve unknown fields).
// The result is what New takes for the kind, with New returning *unstructured.Unstructured.
func ForJSONSchema(gvk schema.GroupVersionKind, openAPIV3Schema map[string]any) (managedfields.TypeConverter, error) {
	root := map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
	if openAPIV3Schema != nil {
		// A copy: the caller's schema is not ours to change.
		raw, err := json.Marshal(openAPIV3Schema)
		if err != nil {
			return nil, err
		}
		root = nil
		if err := json.Unmarshal(raw, &root); err != nil {
			return nil, err
		}
	}
	withObjectFields(root)
	raw, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	var s spec.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("schema of %v: %v", gvk, err)
	}
	name := "kplane.custom." + gvk.Group + "." + gvk.Version + "." + gvk.Kind
	smd, err := schemaconv.ToSchemaFromOpenAPI(map[string]*spec.Schema{name: &s}, false)
	if err != nil {
		return nil, fmt.Errorf("schema of %v: %v", gvk, err)
	}
	// ObjectMeta's types come from its Go type, as the built-in kinds' do.
	meta := &goSchema{done: map[reflect.Type]string{}}
	meta.named(objectMetaType)
	t := &Types{parser: &typed.Parser{}, kinds: map[schema.GroupVersionKind]typed.ParseableType{}}
	t.parser.Schema.Types = append(smd.Types, meta.types...)
	t.kinds[gvk] = t.parser.Type(name)
	return t, nil
}

// withObjectFields gives an object schema the fields every Kubernetes object has, and does the
// same for the embedded resources below it.
func withObjectFields(s map[string]any) {
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		s["properties"] = props
	}
	props["apiVersion"] = map[string]any{"type": "string"}
	props["kind"] = map[string]any{"type": "string"}
	props["metadata"] = map[string]any{"$ref": "#/components/schemas/" + TypeName(objectMetaType)}
	if s["type"] == nil {
		s["type"] = "object"
	}
	embedded(s, true)
}

// embedded walks s (below its own level when skipSelf) for x-kubernetes-embedded-resource.
func embedded(s map[string]any, skipSelf bool) {
	if !skipSelf && s["x-kubernetes-embedded-resource"] == true {
		withObjectFields(s)
		return
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for _, p := range props {
			if ps, ok := p.(map[string]any); ok {
				embedded(ps, false)
			}
		}
	}
	for _, key := range []string{"items", "additionalProperties"} {
		if sub, ok := s[key].(map[string]any); ok {
			embedded(sub, false)
		}
	}
}
