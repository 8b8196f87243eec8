package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/kplane/kplane/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDiscoveredSync(t *testing.T) {
	res := func(names ...string) []client.APIResource {
		var out []client.APIResource
		for _, n := range names {
			out = append(out, client.APIResource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: n}})
		}
		return out
	}
	var d Discovered[string]
	var added, removed []string
	add := func(r client.APIResource) (string, bool) {
		if r.Resource == "skipped" {
			return "", false
		}
		added = append(added, r.Resource)
		return "handler of " + r.Resource, true
	}
	remove := func(gvr schema.GroupVersionResource, v string) {
		if v != "handler of "+gvr.Resource {
			t.Errorf("removed %s with %q", gvr.Resource, v)
		}
		removed = append(removed, gvr.Resource)
	}
	for _, step := range []struct {
		served         []string
		added, removed []string
		now            []string
	}{
		{served: []string{"a", "b", "skipped"}, added: []string{"a", "b"}, now: []string{"a", "b"}},
		{served: []string{"b", "c", "skipped"}, added: []string{"c"}, removed: []string{"a"}, now: []string{"b", "c"}},
		{served: []string{"b", "c"}, now: []string{"b", "c"}},
	} {
		added, removed = nil, nil
		d.Sync(res(step.served...), add, remove)
		var now []string
		for _, gvr := range d.Resources() {
			now = append(now, gvr.Resource)
		}
		slices.Sort(now)
		if !slices.Equal(added, step.added) || !slices.Equal(removed, step.removed) || !slices.Equal(now, step.now) {
			t.Errorf("served %v: added %v removed %v now %v, want %v %v %v", step.served, added, removed, now, step.added, step.removed, step.now)
		}
	}
	removed = nil
	// A preferred version that changes: the old one is removed before the new one is added.
	var order []string
	var e Discovered[string]
	v := func(version string) []client.APIResource {
		return []client.APIResource{{GroupVersionResource: schema.GroupVersionResource{Group: "g", Version: version, Resource: "r"}}}
	}
	e.Sync(v("v1beta1"), func(r client.APIResource) (string, bool) { return r.Version, true }, nil)
	e.Sync(v("v1"), func(r client.APIResource) (string, bool) {
		order = append(order, "add "+r.Version)
		return r.Version, true
	},
		func(gvr schema.GroupVersionResource, _ string) { order = append(order, "remove "+gvr.Version) })
	if !slices.Equal(order, []string{"remove v1beta1", "add v1"}) {
		t.Errorf("version change: %v", order)
	}
	d.Clear(remove)
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"b", "c"}) || len(d.Resources()) != 0 {
		t.Errorf("clear removed %v, left %v", removed, d.Resources())
	}
}

func TestServedResources(t *testing.T) {
	lists := []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: []string{"create", "delete", "list", "watch"}},
		{Name: "nodes", Kind: "Node", Verbs: []string{"create", "delete", "list", "watch"}},
		{Name: "bindings", Namespaced: true, Kind: "Binding", Verbs: []string{"create"}},
	}}}
	got, err := ServedResources(t.Context(), func(ctx context.Context) ([]*metav1.APIResourceList, error) { return lists, nil },
		func(r client.APIResource) bool { return r.Namespaced }, "list", "watch")
	if err != nil || len(got) != 1 || got[0].Resource != "pods" {
		t.Errorf("got %v %v, want pods", got, err)
	}
}
