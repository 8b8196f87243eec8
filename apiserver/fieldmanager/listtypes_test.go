package fieldmanager

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/kplane/kplane/scheme"
	"k8s.io/apimachinery/pkg/runtime/schema"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
)

// semantics describes each list field (and each atomic struct or map) of s in the notation of
// the reference file.
func semantics(s *smdschema.Schema) map[string]string {
	out := map[string]string{}
	for _, td := range s.Types {
		if td.Map == nil || strings.HasPrefix(td.Name, "__") {
			continue
		}
		if td.Map.ElementRelationship == smdschema.Atomic {
			out[td.Name] = "map-type:atomic"
		}
		for _, f := range td.Map.Fields {
			key := td.Name + "." + f.Name
			switch {
			case f.Type.Inlined.List != nil:
				l := f.Type.Inlined.List
				switch {
				case l.ElementRelationship == smdschema.Atomic:
					out[key] = "atomic"
				case len(l.Keys) == 0:
					out[key] = "set"
				default:
					out[key] = "map:" + strings.Join(l.Keys, ",")
				}
			case f.Type.Inlined.Map != nil && f.Type.Inlined.Map.ElementRelationship == smdschema.Atomic,
				f.Type.ElementRelationship != nil && *f.Type.ElementRelationship == smdschema.Atomic:
				out[key] = "map-type:atomic"
			case f.Type.Inlined.Map != nil && f.Type.Inlined.Map.ElementRelationship == smdschema.Separable,
				f.Type.ElementRelationship != nil && *f.Type.ElementRelationship == smdschema.Separable:
				out[key] = "map-type:granular"
			}
		}
	}
	return out
}

// servedTypes are the Types of every kind in kplane's scheme.
func servedTypes(t *testing.T) *Types {
	t.Helper()
	kinds := map[schema.GroupVersionKind]reflect.Type{}
	for gvk, typ := range scheme.Scheme.AllKnownTypes() {
		if strings.HasPrefix(typ.PkgPath(), "k8s.io/api/") {
			kinds[gvk] = typ
		}
	}
	types, err := ForGoTypes(kinds)
	if err != nil {
		t.Fatal(err)
	}
	return types
}

// TestListTypesMatchReference compares the merge semantics of every list (and atomic map or
// struct) of the served types with those kube-apiserver v1.36 publishes for the same types.
func TestListTypesMatchReference(t *testing.T) {
	raw, err := os.ReadFile("testdata/reference-list-types.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref map[string]string
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	got := semantics(&servedTypes(t).parser.Schema)
	known := map[string]bool{}
	for _, td := range servedTypes(t).parser.Schema.Types {
		known[td.Name] = true
	}
	var diffs []string
	for key, want := range ref {
		typ := key
		if i := strings.LastIndex(key, "."); i > 0 && !known[key] {
			typ = key[:i]
		}
		if !known[typ] {
			continue // a type kplane does not serve
		}
		g := got[key]
		if g == "" && want == "atomic" {
			continue
		}
		if g != want {
			diffs = append(diffs, key+": kplane "+or(g, "(none)")+", reference "+want)
		}
	}
	for key, g := range got {
		if _, ok := ref[key]; !ok && strings.HasPrefix(g, "map-type:atomic") {
			diffs = append(diffs, key+": kplane "+g+", reference (none)")
		}
	}
	sort.Strings(diffs)
	for _, d := range diffs {
		t.Error(d)
	}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
