package apiserver_test

import (
	"fmt"
	"testing"
)

// TestDeletePropagation checks what each propagation policy leaves behind: Background removes
// the object at once; Foreground and Orphan keep it, marked for deletion, with the garbage
// collector's finalizer.
func TestDeletePropagation(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/configmaps"
	for i, tc := range []struct {
		body      map[string]any
		query     string
		finalizer string // "" = gone at once
	}{
		{nil, "", ""},
		{map[string]any{"propagationPolicy": "Background"}, "", ""},
		{map[string]any{"propagationPolicy": "Foreground"}, "", "foregroundDeletion"},
		{nil, "?propagationPolicy=Orphan", "orphan"},
		{map[string]any{"orphanDependents": true}, "", "orphan"},
	} {
		name := fmt.Sprintf("p%d", i)
		if r := do(t, "POST", base, map[string]any{"metadata": map[string]any{"name": name}}); r.code != 201 {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		r := do(t, "DELETE", base+"/"+name+tc.query, tc.body)
		if r.code != 200 {
			t.Fatalf("%d: delete: %d %s", i, r.code, r.body)
		}
		g := do(t, "GET", base+"/"+name, nil)
		if tc.finalizer == "" {
			if g.code != 404 {
				t.Fatalf("%d: still there: %d %s", i, g.code, g.body)
			}
			continue
		}
		obj := g.object(t)
		if g.code != 200 || get(obj, "metadata", "deletionTimestamp") == nil {
			t.Fatalf("%d: want marked for deletion: %d %s", i, g.code, g.body)
		}
		if f := get(obj, "metadata", "finalizers"); fmt.Sprint(f) != fmt.Sprint([]any{tc.finalizer}) {
			t.Fatalf("%d: finalizers %v, want [%s]", i, f, tc.finalizer)
		}
		// Removing the finalizer (the garbage collector's job) completes the deletion.
		if r := do(t, "PATCH", base+"/"+name, `{"metadata":{"finalizers":null}}`, "Content-Type", "application/merge-patch+json"); r.code != 200 {
			t.Fatalf("%d: remove finalizer: %d %s", i, r.code, r.body)
		}
		if g := do(t, "GET", base+"/"+name, nil); g.code != 404 {
			t.Fatalf("%d: still there after its finalizer: %d", i, g.code)
		}
	}
}
