// Package jsonfields lists the JSON fields of a Go API type as encoding/json sees them, the
// fields of inlined and embedded structs in their place: what the OpenAPI documents and the
// field manager's type information are both derived from.
package jsonfields

import (
	"reflect"
	"strings"
)

// Field is one JSON field of a struct.
type Field struct {
	reflect.StructField
	// Name is the field's JSON name; Options the rest of its json tag ("omitempty", ...).
	Name, Options string
}

// Of returns the JSON fields of struct type t, in declaration order.
func Of(t reflect.Type) []Field {
	var out []Field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") || (f.Anonymous && name == "") {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, Of(ft)...)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, Field{StructField: f, Name: name, Options: opts})
	}
	return out
}
