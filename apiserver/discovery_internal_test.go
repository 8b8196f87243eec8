package apiserver

import (
	"slices"
	"testing"

	"github.com/kplane/kplane/apiserver/registry"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestDiscoveryChanged: the discovery documents are a snapshot of the served resources, kept
// until discoveryChanged; then every document (legacy and aggregated) shows the new set.
func TestDiscoveryChanged(t *testing.T) {
	widgets := schema.GroupVersion{Group: "example.com", Version: "v1"}
	s := &Server{}
	for _, st := range registry.All(nil) {
		s.ordered = append(s.ordered, &resource{info: st.Describe()})
	}
	before := s.discoveryDocs()
	s.ordered = append(s.ordered, &resource{info: &registry.Info{GroupVersion: widgets, Resource: "widgets", Singular: "widget",
		Kind: "Widget", Namespaced: true, Status: true, Categories: []string{"all"}}})
	if s.discoveryDocs() != before {
		t.Fatal("the snapshot was rebuilt without discoveryChanged")
	}
	s.discoveryChanged()
	after := s.discoveryDocs()
	if after == before || after.named.etag == before.named.etag {
		t.Fatal("discoveryChanged did not lead to a new snapshot and ETag")
	}
	if after.core.etag != before.core.etag {
		t.Error("the core group's document changed though its resources did not")
	}
	if len(after.groups) != len(before.groups)+1 {
		t.Errorf("legacy groups: %d, before %d", len(after.groups), len(before.groups))
	}
	if after.legacyDocument("/apis/example.com/v1") == nil || after.legacyDocument("/apis/example.com") == nil {
		t.Fatal("no legacy documents for example.com")
	}
	names := []string{}
	for _, r := range after.resources[widgets].APIResources {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"widgets", "widgets/status"}) {
		t.Errorf("example.com/v1 resources %v", names)
	}
	found := false
	for _, g := range after.named.list.Items {
		if g.Name == "example.com" && len(g.Versions) == 1 && g.Versions[0].Resources[0].Resource == "widgets" {
			found = true
		}
	}
	if !found {
		t.Error("the aggregated document lacks example.com")
	}
	if !slices.Contains(after.paths, "/apis/example.com/v1") || !slices.Contains(after.paths, "/apis/example.com") {
		t.Errorf("root paths lack example.com: %v", after.paths)
	}
}
