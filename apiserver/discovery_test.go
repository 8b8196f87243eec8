package apiserver_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/testserver"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

const (
	acceptAggregated        = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptAggregatedProto   = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptAggregatedV2Beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
	// acceptClientGo is what client-go v0.36's discovery client and kubectl send.
	acceptClientGo = acceptAggregated + "," + acceptAggregatedV2Beta1 + ",application/json"
)

// TestDiscoveryNegotiation checks which document each Accept header gets, as kube-apiserver
// v1.36 answers: the aggregated one only on /api and /apis and only at v2, the legacy one for
// plain media types, 406 when nothing asked for is served.
func TestDiscoveryNegotiation(t *testing.T) {
	for _, tc := range []struct {
		path, accept string
		code         int
		contentType  string
		kind         string // in the JSON body
	}{
		{"/apis", "", 200, "application/json", "APIGroupList"},
		{"/apis", "application/json", 200, "application/json", "APIGroupList"},
		{"/apis", "*/*", 200, "application/json", "APIGroupList"},
		{"/apis", acceptAggregated, 200, acceptAggregated, "APIGroupDiscoveryList"},
		{"/api", acceptAggregated, 200, acceptAggregated, "APIGroupDiscoveryList"},
		{"/apis", acceptClientGo, 200, acceptAggregated, "APIGroupDiscoveryList"},
		{"/apis", acceptAggregated + ";profile=nopeer," + acceptClientGo, 200, acceptAggregated, "APIGroupDiscoveryList"},
		{"/apis", acceptAggregatedProto, 200, acceptAggregatedProto, ""},
		{"/api", "application/json, " + acceptAggregated, 200, "application/json", "APIVersions"},
		{"/apis", acceptAggregatedV2Beta1 + ",application/json", 200, "application/json", "APIGroupList"},
		{"/apis", "application/yaml", 200, "application/yaml", ""},
		{"/apis", "application/vnd.kubernetes.protobuf", 200, "application/vnd.kubernetes.protobuf", ""},
		{"/apis", acceptAggregatedV2Beta1, 406, "application/json", "Status"},
		{"/apis", "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList", 406, "application/json", "Status"},
		{"/apis", "text/html", 406, "application/json", "Status"},
		{"/api/v1", acceptAggregated, 406, "application/json", "Status"},
		{"/apis/apps", acceptAggregated, 406, "application/json", "Status"},
		{"/apis/apps/v1", acceptClientGo, 200, "application/json", "APIResourceList"},
		{"/apis/apps", "", 200, "application/json", "APIGroup"},
		{"/apis/nosuch.example.com", "", 404, "application/json", "Status"},
		{"/apis/apps/v9", "", 404, "application/json", "Status"},
	} {
		t.Run(tc.path+" "+tc.accept, func(t *testing.T) {
			r := do(t, "GET", tc.path, nil, "Accept", tc.accept)
			if r.code != tc.code || r.header.Get("Content-Type") != tc.contentType {
				t.Fatalf("got %d %q, want %d %q: %.300s", r.code, r.header.Get("Content-Type"), tc.code, tc.contentType, r.body)
			}
			if tc.kind != "" {
				if kind := r.object(t)["kind"]; kind != tc.kind {
					t.Fatalf("kind %v, want %s", kind, tc.kind)
				}
			}
			aggregated := strings.Contains(tc.contentType, "apidiscovery")
			if got := r.header.Get("Vary") == "Accept" && r.header.Get("ETag") != ""; got != aggregated {
				t.Fatalf("Vary %q, ETag %q on a %s answer", r.header.Get("Vary"), r.header.Get("ETag"), tc.contentType)
			}
		})
	}
}

// TestAggregatedDiscoveryETag: a client holding the current document gets 304 without a body,
// the same ETag whichever encoding it asks for.
func TestAggregatedDiscoveryETag(t *testing.T) {
	for _, path := range []string{"/api", "/apis"} {
		first := do(t, "GET", path, nil, "Accept", acceptAggregated)
		etag := first.header.Get("ETag")
		if first.code != 200 || !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) {
			t.Fatalf("%s: %d, ETag %q", path, first.code, etag)
		}
		if p := do(t, "GET", path, nil, "Accept", acceptAggregatedProto); p.header.Get("ETag") != etag {
			t.Errorf("%s: protobuf ETag %q, JSON's %q", path, p.header.Get("ETag"), etag)
		}
		again := do(t, "GET", path, nil, "Accept", acceptAggregated, "If-None-Match", etag)
		if again.code != http.StatusNotModified || len(again.body) != 0 || again.header.Get("ETag") != etag {
			t.Errorf("%s with If-None-Match: %d %q %s", path, again.code, again.header.Get("ETag"), again.body)
		}
		stale := do(t, "GET", path, nil, "Accept", acceptAggregated, "If-None-Match", `"stale"`)
		if stale.code != 200 || len(stale.body) == 0 {
			t.Errorf("%s with a stale ETag: %d", path, stale.code)
		}
	}
}

// TestAggregatedDiscoveryDocument checks what the aggregated documents say of some
// resources, as kube-apiserver v1.36 says it.
func TestAggregatedDiscoveryDocument(t *testing.T) {
	var core, named apidiscoveryv2.APIGroupDiscoveryList
	for path, into := range map[string]*apidiscoveryv2.APIGroupDiscoveryList{"/api": &core, "/apis": &named} {
		if err := json.Unmarshal(do(t, "GET", path, nil, "Accept", acceptAggregated).body, into); err != nil {
			t.Fatal(err)
		}
		if into.APIVersion != "apidiscovery.k8s.io/v2" || into.Kind != "APIGroupDiscoveryList" {
			t.Fatalf("%s: %s %s", path, into.APIVersion, into.Kind)
		}
	}
	if len(core.Items) != 1 || core.Items[0].Name != "" || len(core.Items[0].Versions) != 1 || core.Items[0].Versions[0].Version != "v1" {
		t.Fatalf("/api: %+v", core.Items)
	}
	find := func(list apidiscoveryv2.APIGroupDiscoveryList, group, version, resource string) *apidiscoveryv2.APIResourceDiscovery {
		for _, g := range list.Items {
			for _, v := range g.Versions {
				if g.Name != group || v.Version != version {
					continue
				}
				if v.Freshness != apidiscoveryv2.DiscoveryFreshnessCurrent {
					t.Errorf("%s/%s freshness %q", group, version, v.Freshness)
				}
				for i := range v.Resources {
					if v.Resources[i].Resource == resource {
						return &v.Resources[i]
					}
				}
			}
		}
		t.Fatalf("%s/%s %s not in discovery", group, version, resource)
		return nil
	}
	subresources := func(r *apidiscoveryv2.APIResourceDiscovery) map[string]string {
		out := map[string]string{}
		for _, s := range r.Subresources {
			out[s.Subresource] = s.ResponseKind.Group + "/" + s.ResponseKind.Version + "/" + s.ResponseKind.Kind + " " + strings.Join(s.Verbs, ",")
		}
		return out
	}
	all := "create,delete,deletecollection,get,list,patch,update,watch"
	for _, tc := range []struct {
		list                     apidiscoveryv2.APIGroupDiscoveryList
		group, version, resource string
		want                     string // kind scope singular verbs shortNames categories
		subresources             map[string]string
	}{
		{core, "", "v1", "pods", "Pod Namespaced pod " + all + " po all", map[string]string{
			"attach": "//PodAttachOptions create,get", "binding": "//Binding create", "eviction": "policy/v1/Eviction create",
			"exec": "//PodExecOptions create,get", "log": "//Pod get", "portforward": "//PodPortForwardOptions create,get",
			"status": "//Pod get,patch,update"}},
		{core, "", "v1", "namespaces", "Namespace Cluster namespace create,delete,get,list,patch,update,watch ns ", map[string]string{
			"finalize": "//Namespace update", "status": "//Namespace get,patch,update"}},
		{core, "", "v1", "bindings", "Binding Namespaced binding create  ", map[string]string{}},
		{core, "", "v1", "replicationcontrollers", "ReplicationController Namespaced replicationcontroller " + all + " rc all", map[string]string{
			"scale": "autoscaling/v1/Scale get,patch,update", "status": "//ReplicationController get,patch,update"}},
		{named, "apps", "v1", "deployments", "Deployment Namespaced deployment " + all + " deploy all", map[string]string{
			"scale": "autoscaling/v1/Scale get,patch,update", "status": "//Deployment get,patch,update"}},
		{named, "autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler Namespaced horizontalpodautoscaler " + all + " hpa all", map[string]string{
			"status": "//HorizontalPodAutoscaler get,patch,update"}},
		{named, "authentication.k8s.io", "v1", "tokenreviews", "TokenReview Cluster tokenreview create  ", map[string]string{}},
		{named, "storage.k8s.io", "v1", "storageclasses", "StorageClass Cluster storageclass " + all + " sc ", map[string]string{}},
	} {
		r := find(tc.list, tc.group, tc.version, tc.resource)
		got := strings.Join([]string{r.ResponseKind.Group + r.ResponseKind.Version + r.ResponseKind.Kind, string(r.Scope), r.SingularResource,
			strings.Join(r.Verbs, ","), strings.Join(r.ShortNames, ","), strings.Join(r.Categories, ",")}, " ")
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.resource, got, tc.want)
		}
		if subs := subresources(r); !maps.Equal(subs, tc.subresources) {
			t.Errorf("%s subresources: got %v, want %v", tc.resource, subs, tc.subresources)
		}
	}
	// A group's versions come in preference order, its preferred one first.
	for _, g := range named.Items {
		if g.Name == "autoscaling" {
			var versions []string
			for _, v := range g.Versions {
				versions = append(versions, v.Version)
			}
			if !slices.Equal(versions, []string{"v2", "v1"}) {
				t.Errorf("autoscaling versions %v, want [v2 v1]", versions)
			}
		}
	}
}

// countingTransport counts requests and records the content types of the answers.
type countingTransport struct {
	mu           sync.Mutex
	next         http.RoundTripper
	paths        []string
	contentTypes []string
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paths = append(c.paths, r.URL.Path)
	if err == nil {
		c.contentTypes = append(c.contentTypes, resp.Header.Get("Content-Type"))
	}
	return resp, err
}

// TestClientGoAggregatedDiscovery: client-go's discovery client takes the aggregated path
// (two requests, aggregated content types) and learns exactly what the legacy documents say.
func TestClientGoAggregatedDiscovery(t *testing.T) {
	discover := func(legacy bool) ([]*metav1.APIGroup, []*metav1.APIResourceList, *countingTransport) {
		ct := &countingTransport{}
		cfg := &rest.Config{Host: server.URL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper { ct.next = rt; return ct }}
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		dc.UseLegacyDiscovery = legacy
		groups, resources, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatal(err)
		}
		return groups, resources, ct
	}
	groups, resources, ct := discover(false)
	if !slices.Equal(ct.paths, []string{"/api", "/apis"}) {
		t.Errorf("aggregated discovery made requests %v, want /api and /apis only", ct.paths)
	}
	for _, c := range ct.contentTypes {
		if c != acceptAggregated {
			t.Errorf("answer of content type %q, want %q", c, acceptAggregated)
		}
	}
	legacyGroups, legacyResources, lct := discover(true)
	if len(lct.paths) <= 2 {
		t.Errorf("legacy discovery made requests %v", lct.paths)
	}
	if a, b := groupNames(groups), groupNames(legacyGroups); !slices.Equal(a, b) {
		t.Errorf("groups: aggregated %v, legacy %v", a, b)
	}
	if a, b := resourceNames(resources), resourceNames(legacyResources); !slices.Equal(a, b) {
		t.Errorf("resources: aggregated\n%v\nlegacy\n%v", a, b)
	}
	if !slices.Contains(resourceNames(resources), "apps/v1 deployments/scale autoscaling/v1 Scale get,patch,update") {
		t.Errorf("deployments/scale missing: %v", resourceNames(resources))
	}
}

func groupNames(groups []*metav1.APIGroup) []string {
	var out []string
	for _, g := range groups {
		var vs []string
		for _, v := range g.Versions {
			vs = append(vs, v.GroupVersion)
		}
		out = append(out, g.Name+" "+strings.Join(vs, ",")+" preferred "+g.PreferredVersion.GroupVersion)
	}
	return out
}

// resourceNames describes every resource of lists, sorted: what both discovery paths must agree on.
func resourceNames(lists []*metav1.APIResourceList) []string {
	var out []string
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			kind := r.Kind
			if r.Group != "" || r.Version != "" {
				kind = r.Group + "/" + r.Version + " " + kind
			}
			if r.Group == gv.Group && r.Version == gv.Version {
				kind = r.Kind // aggregated discovery fills in the group version of a resource's own kind
			}
			out = append(out, strings.TrimSpace(l.GroupVersion+" "+r.Name+" "+kind+" "+strings.Join(r.Verbs, ",")))
		}
	}
	slices.Sort(out)
	return out
}

// TestKubectlAggregatedDiscovery: kubectl v1.32 learns the API from the aggregated documents
// (it asks for /api and /apis, never for a group version's list) and works from them.
func TestKubectlAggregatedDiscovery(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	ns := namespace(t)
	cacheDir := t.TempDir()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, server.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		args = append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cacheDir}, args...)
		out, err := exec.Command(kubectl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := run("api-resources", "-v=6")
	if !strings.Contains(out, "/apis?") {
		t.Errorf("kubectl -v=6 did not log its discovery requests:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "GET ") && (strings.Contains(line, "/api/v1?") || strings.Contains(line, "/apis/apps/v1?")) {
			t.Errorf("kubectl fetched a legacy resource list: %s", line)
		}
	}
	for _, want := range []string{"deployments", "deploy", "apps/v1", "horizontalpodautoscalers", "autoscaling/v2", "pods", "po"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl api-resources lacks %q:\n%s", want, out)
		}
	}
	if out := run("api-resources", "--namespaced=false", "-o", "name"); !strings.Contains(out, "namespaces") || strings.Contains(out, "\npods\n") {
		t.Errorf("cluster-scoped resources:\n%s", out)
	}
	if out := run("api-versions"); !strings.Contains(out, "autoscaling/v1") || !strings.Contains(out, "autoscaling/v2") {
		t.Errorf("kubectl api-versions:\n%s", out)
	}
	manifest := filepath.Join(t.TempDir(), "cm.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: aggregated\ndata:\n  a: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("-n", ns, "create", "-f", manifest)
	if out := run("-n", ns, "get", "cm", "aggregated", "-o", "jsonpath={.data.a}"); out != "b" {
		t.Errorf("kubectl get cm: %q", out)
	}
	if out := run("-n", ns, "get", "all"); !strings.Contains(out, "No resources") && out != "" {
		t.Errorf("kubectl get all (the 'all' category) in an empty namespace: %q", out)
	}
}

// TestDiscoveryFollowsCustomResources: a CRD's resources appear in every discovery document
// (with a new ETag) once it is served, described as kube-apiserver v1.36 describes custom
// resources and listed after the built-in groups, and go away with it.
func TestDiscoveryFollowsCustomResources(t *testing.T) {
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gizmos.aaa.example.com"},
		"spec": map[string]any{
			"group": "aaa.example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "shortNames": []string{"gz"}},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema":       map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				"subresources": map[string]any{"status": map[string]any{}}}},
		},
	}
	before := do(t, "GET", "/apis", nil, "Accept", acceptAggregated).header.Get("ETag")
	if r := do(t, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd); r.code != http.StatusCreated {
		t.Fatalf("create CRD: %d %s", r.code, r.body)
	}
	var doc apidiscoveryv2.APIGroupDiscoveryList
	var r response
	testserver.Eventually(t, "the custom resource in discovery", 15*time.Second, func() bool {
		r = do(t, "GET", "/apis", nil, "Accept", acceptAggregated)
		return strings.Contains(string(r.body), `"aaa.example.com"`)
	})
	if r.header.Get("ETag") == before {
		t.Error("the ETag did not change with the served resources")
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	last := doc.Items[len(doc.Items)-1]
	if last.Name != "aaa.example.com" {
		t.Errorf("last group %q: custom groups come after the built-in ones (apps and the others sort after aaa)", last.Name)
	}
	got, _ := json.Marshal(last.Versions[0].Resources)
	want := `[{"resource":"gizmos","responseKind":{"group":"aaa.example.com","version":"v1","kind":"Gizmo"},"scope":"Namespaced",` +
		`"singularResource":"gizmo","verbs":["delete","deletecollection","get","list","patch","create","update","watch"],"shortNames":["gz"],` +
		`"subresources":[{"subresource":"status","responseKind":{"group":"aaa.example.com","version":"v1","kind":"Gizmo"},"verbs":["get","patch","update"]}]}]`
	if string(got) != want {
		t.Errorf("custom resource entry\n%s\nwant\n%s", got, want)
	}
	legacy := do(t, "GET", "/apis/aaa.example.com/v1", nil)
	if legacy.code != 200 || !strings.Contains(string(legacy.body), `"name":"gizmos/status","singularName":"","namespaced":true,"kind":"Gizmo"`) {
		t.Errorf("legacy list: %d %s", legacy.code, legacy.body)
	}

	if r := do(t, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.aaa.example.com", nil); r.code != http.StatusOK {
		t.Fatalf("delete CRD: %d %s", r.code, r.body)
	}
	testserver.Eventually(t, "the custom resource gone from discovery", 15*time.Second, func() bool {
		return !strings.Contains(string(do(t, "GET", "/apis", nil, "Accept", acceptAggregated).body), `"aaa.example.com"`) &&
			do(t, "GET", "/apis/aaa.example.com/v1", nil).code == http.StatusNotFound
	})
}
