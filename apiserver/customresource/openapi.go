package customresource

import (
	"fmt"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// componentPrefix starts the references between the schemas of an OpenAPI v3 document.
const componentPrefix = "#/components/schemas/"

// CompileOpenAPI compiles the schema named root among the component schemas of an OpenAPI v3
// document (as /openapi/v3 serves them), each reference ($ref, or the allOf that wraps one to
// carry a description) replaced by the schema it names. A type that contains itself
// (JSONSchemaProps does) is an object without properties where it recurs, as in Kubernetes'
// type checking, so the tree stays finite.
func CompileOpenAPI(components map[string]*apiextv1.JSONSchemaProps, root string) (*Schema, error) {
	r := openAPIRefs{components: components, open: map[string]bool{}}
	resolved, err := r.resolve(&apiextv1.JSONSchemaProps{Ref: &[]string{componentPrefix + root}[0]})
	if err != nil {
		return nil, err
	}
	return Compile(resolved)
}

// openAPIRefs resolves references; open are the ones being resolved on the way down.
type openAPIRefs struct {
	components map[string]*apiextv1.JSONSchemaProps
	open       map[string]bool
}

func (r *openAPIRefs) resolve(p *apiextv1.JSONSchemaProps) (*apiextv1.JSONSchemaProps, error) {
	out := *p
	if ref, ok := refOf(p); ok {
		if r.open[ref] {
			return &apiextv1.JSONSchemaProps{Type: "object"}, nil
		}
		target, ok := r.components[strings.TrimPrefix(ref, componentPrefix)]
		if !ok || !strings.HasPrefix(ref, componentPrefix) {
			return nil, fmt.Errorf("schema reference %q not found", ref)
		}
		r.open[ref] = true
		defer delete(r.open, ref)
		out = *target
	}
	if len(out.Properties) > 0 {
		props := make(map[string]apiextv1.JSONSchemaProps, len(out.Properties))
		for name, prop := range out.Properties {
			c, err := r.resolve(&prop)
			if err != nil {
				return nil, err
			}
			props[name] = *c
		}
		out.Properties = props
	}
	if out.AdditionalProperties != nil && out.AdditionalProperties.Schema != nil {
		c, err := r.resolve(out.AdditionalProperties.Schema)
		if err != nil {
			return nil, err
		}
		out.AdditionalProperties = &apiextv1.JSONSchemaPropsOrBool{Allows: true, Schema: c}
	}
	if out.Items != nil && out.Items.Schema != nil {
		c, err := r.resolve(out.Items.Schema)
		if err != nil {
			return nil, err
		}
		out.Items = &apiextv1.JSONSchemaPropsOrArray{Schema: c}
	}
	return &out, nil
}

// refOf is the reference p stands for: its $ref, or one in its allOf.
func refOf(p *apiextv1.JSONSchemaProps) (string, bool) {
	if p.Ref != nil {
		return *p.Ref, true
	}
	for i := range p.AllOf {
		if ref, ok := refOf(&p.AllOf[i]); ok {
			return ref, true
		}
	}
	return "", false
}
