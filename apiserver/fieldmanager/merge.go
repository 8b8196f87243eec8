package fieldmanager

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// Merge merges an apply configuration (the fields to set, as an unstructured object of the
// endpoint's kind) into live as an apply merges it: maps field by field, lists that are maps
// or sets by their keys, atomic values whole. Nothing is recorded in managedFields: this is
// the merge of a MutatingAdmissionPolicy's ApplyConfiguration, which mutates on the writer's
// behalf. As in Kubernetes, a configuration that sets an atomic list, map or struct is refused,
// since merging it would silently replace what other writers set.
func (m *Manager) Merge(live runtime.Object, patch map[string]any) (runtime.Object, error) {
	applied := &unstructured.Unstructured{Object: patch}
	applied.SetGroupVersionKind(m.conv.kind)
	patchTyped, err := m.types.ObjectToTyped(applied)
	if err != nil {
		return nil, fmt.Errorf("failed to convert patch object to typed object: %w", err)
	}
	if atomics := atomicPaths(nil, patchTyped.Schema(), patchTyped.TypeRef(), patchTyped.AsValue()); len(atomics) > 0 {
		return nil, fmt.Errorf("invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: %s", strings.Join(atomics, ", "))
	}
	live.GetObjectKind().SetGroupVersionKind(m.conv.kind)
	liveTyped, err := m.types.ObjectToTyped(live, typed.AllowDuplicates)
	if err != nil {
		return nil, fmt.Errorf("failed to convert original object to typed object: %w", err)
	}
	merged, err := liveTyped.Merge(patchTyped)
	if err != nil {
		return nil, fmt.Errorf("failed to merge patch: %w", err)
	}
	out, err := m.types.TypedToObject(merged)
	if err != nil {
		return nil, err
	}
	return m.conv.ConvertToVersion(out, m.conv.kind.GroupVersion())
}

// atomicPaths lists where v sets a value its schema makes atomic (a list, map or struct that
// is replaced whole, never merged).
func atomicPaths(path []fieldpath.PathElement, s *smdschema.Schema, tr smdschema.TypeRef, v value.Value) []string {
	atom, ok := s.Resolve(tr)
	if !ok {
		return nil
	}
	var out []string
	switch {
	case v.IsMap() && atom.Map != nil:
		if atom.Map.ElementRelationship == smdschema.Atomic {
			out = append(out, pathString(path))
		}
		v.AsMap().Iterate(func(key string, val value.Value) bool {
			if f, ok := atom.Map.FindField(key); ok {
				out = append(out, atomicPaths(append(path, fieldpath.PathElement{FieldName: &key}), s, f.Type, val)...)
			}
			return true
		})
	case v.IsList() && atom.List != nil:
		if atom.List.ElementRelationship == smdschema.Atomic {
			out = append(out, pathString(path))
		}
		list := v.AsList()
		for i := range list.Length() {
			out = append(out, atomicPaths(append(path, fieldpath.PathElement{Index: &i}), s, atom.List.ElementType, list.At(i))...)
		}
	}
	return out
}

func pathString(path []fieldpath.PathElement) string {
	var b strings.Builder
	for _, p := range path {
		b.WriteString(p.String())
	}
	return b.String()
}
