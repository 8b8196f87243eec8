package apiserver

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// openAPICache holds the OpenAPI v3 documents, built once on first use.
type openAPICache struct {
	once sync.Once
	docs map[string][]byte // "api/v1", "apis/apps/v1" → document
	hash map[string]string
}

// serveOpenAPI serves /openapi/v3 (the index) and /openapi/v3/<group-version path>. Schemas are
// derived from the k8s.io/api Go types and their field documentation, so kubectl explain works,
// and every PATCH declares fieldValidation, which kubectl checks before validating on the server.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request, path string) {
	s.openapi.once.Do(s.buildOpenAPI)
	if path == "/openapi/v3" {
		paths := map[string]any{}
		for gv, h := range s.openapi.hash {
			paths[gv] = map[string]string{"serverRelativeURL": "/openapi/v3/" + gv + "?hash=" + h}
		}
		writeJSON(w, http.StatusOK, map[string]any{"paths": paths})
		return
	}
	doc, ok := s.openapi.docs[strings.TrimPrefix(path, "/openapi/v3/")]
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

func (s *Server) buildOpenAPI() {
	s.openapi.docs, s.openapi.hash = map[string][]byte{}, map[string]string{}
	for _, gv := range s.groupVersions() {
		key := "apis/" + gv.String()
		if gv.Group == "" {
			key = "api/v1"
		}
		g := &schemaGen{schemas: map[string]any{}}
		paths := map[string]any{}
		for _, res := range s.ordered {
			info := res.info
			if info.GroupVersion != gv {
				continue
			}
			ref := g.ref(reflect.TypeOf(res.strategy.NewObject()).Elem(), info.GVK())
			gvk := map[string]string{"group": gv.Group, "version": gv.Version, "kind": info.Kind}
			op := func(verb string) map[string]any {
				o := map[string]any{
					"operationId":                     verb + info.Kind,
					"x-kubernetes-group-version-kind": gvk,
					"responses":                       map[string]any{"200": map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{"schema": ref}}}},
				}
				if verb != "read" {
					o["parameters"] = []any{
						map[string]any{"name": "dryRun", "in": "query", "schema": map[string]string{"type": "string"}},
						map[string]any{"name": "fieldValidation", "in": "query", "schema": map[string]string{"type": "string"}},
					}
				}
				return o
			}
			item := "/" + key + "/" + info.Resource + "/{name}"
			collection := "/" + key + "/" + info.Resource
			if info.Namespaced {
				item = "/" + key + "/namespaces/{namespace}/" + info.Resource + "/{name}"
				collection = "/" + key + "/namespaces/{namespace}/" + info.Resource
			}
			paths[item] = map[string]any{"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}
			paths[collection] = map[string]any{"post": op("create")}
		}
		doc, _ := json.Marshal(map[string]any{
			"openapi":    "3.0.0",
			"info":       map[string]string{"title": "Kubernetes", "version": KubernetesVersion},
			"paths":      paths,
			"components": map[string]any{"schemas": g.schemas},
		})
		sum := sha512.Sum512(doc)
		s.openapi.docs[key], s.openapi.hash[key] = doc, strings.ToUpper(hex.EncodeToString(sum[:]))
	}
}

// schemaGen turns Go types into OpenAPI v3 schemas, one component per named struct.
type schemaGen struct {
	schemas map[string]any
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
func schemaName(t reflect.Type) string {
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
	var addFields func(t reflect.Type)
	addFields = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if strings.Contains(opts, "inline") || (f.Anonymous && name == "") {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					addFields(ft)
				}
				continue
			}
			if name == "" {
				name = f.Name
			}
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
	}
	addFields(t)
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
		return map[string]any{"x-kubernetes-int-or-string": true, "format": "int-or-string"}
	case quantityType:
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
