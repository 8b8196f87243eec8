package apiserver_test

import (
	"net/http"
	"slices"
	"testing"
)

// TestBootstrapAPIObjects: every served group version has its local, available APIService,
// and the mandatory flow-control objects exist, as in a fresh kube-apiserver.
func TestBootstrapAPIObjects(t *testing.T) {
	list := func(path string) (names []string, items []any) {
		t.Helper()
		r := do(t, "GET", path, nil)
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.code, r.body)
		}
		items, _ = r.object(t)["items"].([]any)
		for _, it := range items {
			names = append(names, get(it, "metadata", "name").(string))
		}
		return names, items
	}
	services, items := list("/apis/apiregistration.k8s.io/v1/apiservices")
	for _, it := range items {
		if get(it, "spec", "service") != nil || get(it, "status", "conditions", 0, "status") != "True" {
			t.Errorf("APIService %v is not local and available: %v", get(it, "metadata", "name"), it)
		}
	}
	want := []string{"v1."}
	groups, _ := do(t, "GET", "/apis", nil).object(t)["groups"].([]any)
	for _, g := range groups {
		for _, v := range get(g, "versions").([]any) {
			want = append(want, get(v, "version").(string)+"."+get(g, "name").(string))
		}
	}
	for _, w := range want {
		if !slices.Contains(services, w) {
			t.Errorf("no APIService %s among %q", w, services)
		}
	}
	for path, want := range map[string][]string{
		"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas":                 {"catch-all", "exempt"},
		"/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations": {"catch-all", "exempt"},
	} {
		if got, _ := list(path); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}
