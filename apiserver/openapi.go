package apiserver

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/kplane/kplane/internal/jsonfields"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"github.com/kplane/kplane/apiserver/fieldmanager"
	"google.golang.org/protobuf/proto"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// openAPICache holds the OpenAPI documents, built on first use and again after CRDs change
// the served resources.
type openAPICache struct {
	mu    sync.Mutex
	built *openAPIDocs
}

type openAPIDocs struct {
	docs map[string][]byte // v3: "api/v1", "apis/apps/v1" → document
	hash map[string]string
	v2   []byte // Swagger 2.0 of everything, gnostic protobuf
	v2js []byte // the same in JSON
}

// get returns the documents, building them if needed.
func (c *openAPICache) get(build func() *openAPIDocs) *openAPIDocs {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.built == nil {
		c.built = build()
	}
	return c.built
}

// invalidate drops the documents; the next request builds them anew.
func (c *openAPICache) invalidate() {
	c.mu.Lock()
	c.built = nil
	c.mu.Unlock()
}

// mimeOpenAPIv2Protobuf is the media type kube-openapi answers protobuf requests with (clients
// ask for it with "@v1.0" or ".v1.0", but only the latter parses as a media type).
const mimeOpenAPIv2Protobuf = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

// serveOpenAPI serves /openapi/v3 (the index), /openapi/v3/<group-version path> and /openapi/v2.
// Schemas are derived from the k8s.io/api Go types and their field documentation, so kubectl
// explain works; every PATCH declares fieldValidation, which kubectl checks before it leaves
// validation to the server; v2 is what kubectl validates List manifests against.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request, path string) {
	docs := s.openapi.get(s.buildOpenAPI)
	switch path {
	case "/openapi/v3":
		paths := map[string]any{}
		for gv, h := range docs.hash {
			paths[gv] = map[string]string{"serverRelativeURL": "/openapi/v3/" + gv + "?hash=" + h}
		}
		writeJSON(w, http.StatusOK, map[string]any{"paths": paths})
		return
	case "/openapi/v2":
		if strings.Contains(r.Header.Get("Accept"), "protobuf") {
			w.Header().Set("Content-Type", mimeOpenAPIv2Protobuf)
			_, _ = w.Write(docs.v2)
			return
		}
		w.Header().Set("Content-Type", mimeJSON)
		_, _ = w.Write(docs.v2js)
		return
	}
	doc, ok := docs.docs[strings.TrimPrefix(path, "/openapi/v3/")]
	if !ok {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{}, path))
		return
	}
	w.Header().Set("Content-Type", mimeJSON)
	if r.URL.Query().Get("hash") != "" {
		w.Header().Set("Cache-Control", "public, immutable")
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc)
}

// apiPaths describes the served operations of the resources in gv, with schemas from g.
func (s *Server) apiPaths(g *schemaGen, gv schema.GroupVersion, paths map[string]any) {
	prefix := "/apis/" + gv.String()
	if gv.Group == "" {
		prefix = "/api/v1"
	}
	for _, res := range s.servedResources() {
		info := res.info
		if info.GroupVersion != gv {
			continue
		}
		ref := g.kindRef(res)
		if res.custom == nil {
			g.ref(reflect.TypeOf(res.strategy.NewListObject()).Elem(), gv.WithKind(info.Kind+"List"))
		}
		op := func(verb string) map[string]any { return g.operation(verb, info.GVK(), ref) }
		item, collection := prefix+"/"+info.Resource+"/{name}", prefix+"/"+info.Resource
		if info.Namespaced {
			item, collection = prefix+"/namespaces/{namespace}/"+info.Resource+"/{name}", prefix+"/namespaces/{namespace}/"+info.Resource
		}
		paths[item] = map[string]any{"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}
		paths[collection] = map[string]any{"post": op("create")}
	}
	// The kinds that are only created (answered, not stored): kubectl validates them too.
	for _, c := range s.createOnly() {
		if c.gv == gv {
			paths[c.path] = map[string]any{"post": g.operation("create", c.gvk, g.ref(c.typ, c.gvk))}
		}
	}
}

// kindRef returns a reference to the schema of a served resource's kind, generating it.
func (g *schemaGen) kindRef(res *resource) map[string]any {
	if res.custom != nil {
		return g.customRef(res)
	}
	return g.ref(reflect.TypeOf(res.strategy.NewObject()).Elem(), res.info.GVK())
}

// operation describes one operation (verb: read, replace, patch, delete, create) on kind gvk
// whose body and answer have the schema ref.
func (g *schemaGen) operation(verb string, gvk schema.GroupVersionKind, ref map[string]any) map[string]any {
	o := map[string]any{"operationId": verb + gvk.Kind, "x-kubernetes-group-version-kind": map[string]string{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}}
	if g.v2 {
		o["responses"] = map[string]any{"200": map[string]any{"description": "OK", "schema": ref}}
	} else {
		o["responses"] = map[string]any{"200": map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{"schema": ref}}}}
	}
	if verb != "read" {
		param := func(name string) map[string]any {
			if g.v2 {
				return map[string]any{"name": name, "in": "query", "type": "string", "uniqueItems": true}
			}
			return map[string]any{"name": name, "in": "query", "schema": map[string]any{"type": "string", "uniqueItems": true}}
		}
		o["parameters"] = []any{param("dryRun"), param("fieldValidation")}
	}
	return o
}

func (s *Server) buildOpenAPI() *openAPIDocs {
	d := &openAPIDocs{docs: map[string][]byte{}, hash: map[string]string{}}
	info := map[string]string{"title": "Kubernetes", "version": KubernetesVersion}
	v2 := &schemaGen{schemas: map[string]any{}, v2: true}
	v2paths := map[string]any{}
	for _, gv := range s.groupVersions() {
		key := "apis/" + gv.String()
		if gv.Group == "" {
			key = "api/v1"
		}
		g := &schemaGen{schemas: map[string]any{}}
		paths := map[string]any{}
		s.apiPaths(g, gv, paths)
		s.apiPaths(v2, gv, v2paths)
		doc, _ := json.Marshal(map[string]any{"openapi": "3.0.0", "info": info, "paths": paths, "components": map[string]any{"schemas": g.schemas}})
		sum := sha512.Sum512(doc)
		d.docs[key], d.hash[key] = doc, strings.ToUpper(hex.EncodeToString(sum[:]))
	}
	d.v2js, _ = json.Marshal(map[string]any{"swagger": "2.0", "info": info, "paths": v2paths, "definitions": v2.schemas})
	doc, err := openapiv2.ParseDocument(d.v2js)
	if err == nil {
		d.v2, err = proto.Marshal(doc)
	}
	if err != nil {
		slog.Error("openapi v2 document", "err", err)
	}
	return d
}

// customRef returns a reference to the schema of a custom resource's kind, made from its
// CRD's openAPIV3Schema with the object metadata and type fields every resource has; Swagger
// 2.0 gets the schema without what it cannot say (nullable, the combinators).
func (g *schemaGen) customRef(res *resource) map[string]any {
	info := res.info
	parts := strings.Split(info.GroupVersion.Group, ".")
	slices.Reverse(parts)
	name := strings.Join(parts, ".") + "." + info.GroupVersion.Version + "." + info.Kind
	if _, done := g.schemas[name]; !done {
		sch := res.custom.OpenAPISchema()
		if g.v2 {
			sch = swagger2(sch)
		}
		props, _ := sch["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
		}
		props["apiVersion"] = map[string]any{"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}
		props["kind"] = map[string]any{"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}
		props["metadata"] = g.typeSchema(reflect.TypeOf(metav1.ObjectMeta{}))
		sch["properties"] = props
		sch["type"] = "object"
		sch["x-kubernetes-group-version-kind"] = []map[string]string{{"group": info.GroupVersion.Group, "version": info.GroupVersion.Version, "kind": info.Kind}}
		g.schemas[name] = sch
	}
	if g.v2 {
		return map[string]any{"$ref": "#/definitions/" + name}
	}
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

// swagger2 drops from a JSON schema what Swagger 2.0 does not know.
func swagger2(sch map[string]any) map[string]any {
	out := make(map[string]any, len(sch))
	for k, v := range sch {
		switch k {
		case "nullable", "anyOf", "oneOf", "allOf", "not", "x-kubernetes-validations":
			continue
		}
		switch x := v.(type) {
		case map[string]any:
			if k == "properties" {
				props := make(map[string]any, len(x))
				for pk, pv := range x {
					if pm, ok := pv.(map[string]any); ok {
						props[pk] = swagger2(pm)
					}
				}
				v = props
			} else {
				v = swagger2(x)
			}
		}
		out[k] = v
	}
	return out
}

// schemaGen turns Go types into OpenAPI v3 schemas, one component per named struct.
type schemaGen struct {
	schemas map[string]any
	// v2 writes Swagger 2.0 schemas (references into #/definitions, int-or-string as a string).
	v2 bool
}

type swaggerDoc interface{ SwaggerDoc() map[string]string }

var (
	timeType      = reflect.TypeOf(metav1.Time{})
	microTimeType = reflect.TypeOf(metav1.MicroTime{})
	durationType  = reflect.TypeOf(metav1.Duration{})
	intOrString   = reflect.TypeOf(intstr.IntOrString{})
	quantityType  = reflect.TypeOf(apiresource.Quantity{})
	rawExtension  = reflect.TypeOf(runtime.RawExtension{})
)

// schemaName names a type as Kubernetes' OpenAPI does: k8s.io/api/core/v1.Pod → io.k8s.api.core.v1.Pod.
// The field manager names its types alike.
var schemaName = fieldmanager.TypeName

// ref returns a reference to t's component, generating it (and what it uses) if needed.
func (g *schemaGen) ref(t reflect.Type, gvk schema.GroupVersionKind) map[string]any {
	name := schemaName(t)
	if _, done := g.schemas[name]; !done {
		g.schemas[name] = nil // placeholder: breaks cycles
		sch := g.structSchema(t)
		if !gvk.Empty() {
			sch["x-kubernetes-group-version-kind"] = []map[string]string{{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}}
		}
		g.schemas[name] = sch
	}
	if g.v2 {
		return map[string]any{"$ref": "#/definitions/" + name}
	}
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

func (g *schemaGen) structSchema(t reflect.Type) map[string]any {
	props := map[string]any{}
	docs := map[string]string{}
	if d, ok := reflect.New(t).Interface().(swaggerDoc); ok {
		docs = d.SwaggerDoc()
	} else if d, ok := reflect.Zero(t).Interface().(swaggerDoc); ok {
		docs = d.SwaggerDoc()
	}
	var required []string
	for _, f := range jsonfields.Of(t) {
		name, opts := f.Name, f.Options
		p := g.typeSchema(f.Type)
		if d := docs[name]; d != "" {
			if _, isRef := p["$ref"]; isRef {
				p = map[string]any{"allOf": []any{p}, "description": d}
			} else {
				p["description"] = d
			}
		}
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && f.Type.Kind() != reflect.Pointer && f.Type.Kind() != reflect.Slice && f.Type.Kind() != reflect.Map {
			required = append(required, name)
		}
		props[name] = p
	}
	sch := map[string]any{"type": "object", "properties": props}
	if d := docs[""]; d != "" {
		sch["description"] = d
	}
	if len(required) > 0 {
		sch["required"] = required
	}
	return sch
}

func (g *schemaGen) typeSchema(t reflect.Type) map[string]any {
	switch t {
	case timeType, microTimeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case durationType:
		return map[string]any{"type": "string"}
	case intOrString:
		if g.v2 {
			return map[string]any{"type": "string", "format": "int-or-string"}
		}
		return map[string]any{"x-kubernetes-int-or-string": true, "format": "int-or-string"}
	case quantityType:
		if g.v2 {
			return map[string]any{"type": "string"}
		}
		return map[string]any{"x-kubernetes-int-or-string": true}
	case rawExtension:
		return map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.typeSchema(t.Elem())
	case reflect.Struct:
		return g.ref(t, schema.GroupVersionKind{})
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": g.typeSchema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.typeSchema(t.Elem())}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int32, reflect.Uint32, reflect.Int16, reflect.Uint16, reflect.Int8, reflect.Uint8:
		return map[string]any{"type": "integer", "format": "int32"}
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number", "format": "double"}
	}
	return map[string]any{"type": "object"}
}
