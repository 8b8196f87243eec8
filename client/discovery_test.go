package client_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// recordingTransport records each request's path, Accept header and answer's status; legacy
// makes the requests look like those of a client that knows only the legacy documents.
type recordingTransport struct {
	legacy bool
	mu     sync.Mutex
	seen   []string // "path status accept"
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if rt.legacy && (r.URL.Path == "/api" || r.URL.Path == "/apis") {
		r = r.Clone(r.Context())
		r.Header.Set("Accept", "application/json")
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		rt.mu.Lock()
		rt.seen = append(rt.seen, r.URL.Path+" "+resp.Status[:3]+" "+r.Header.Get("Accept"))
		rt.mu.Unlock()
	}
	return resp, err
}

func (rt *recordingTransport) take() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := rt.seen
	rt.seen = nil
	return out
}

func recordingClient(t *testing.T, legacy bool) (*client.Client, *recordingTransport) {
	t.Helper()
	rt := &recordingTransport{legacy: legacy}
	c, err := client.New(client.Config{Host: server.URL, Transport: rt, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c, rt
}

// TestServerResourcesAggregated: discovery takes two requests of the aggregated documents,
// then two 304s while nothing changes, and says what the legacy documents say.
func TestServerResourcesAggregated(t *testing.T) {
	ctx := context.Background()
	c, rt := recordingClient(t, false)
	lists, err := c.ServerResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paths := func(seen []string) []string {
		var out []string
		for _, s := range seen {
			out = append(out, strings.Join(strings.Fields(s)[:2], " "))
		}
		return out
	}
	if got := paths(rt.take()); !slices.Equal(got, []string{"/api 200", "/apis 200"}) {
		t.Errorf("first discovery: %v", got)
	}
	again, err := c.ServerResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(rt.take()); !slices.Equal(got, []string{"/api 304", "/apis 304"}) {
		t.Errorf("second discovery: %v", got)
	}
	if a, b := describeLists(lists), describeLists(again); !slices.Equal(a, b) {
		t.Errorf("the cached documents differ from the first:\n%v\n%v", a, b)
	}

	lc, lrt := recordingClient(t, true)
	legacy, err := lc.ServerResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// /api (answered with the legacy document), then /api/v1, /apis and each group's version.
	if n := len(lrt.take()); n != len(lists)+2 {
		t.Errorf("legacy discovery made %d requests, want one per group version, /api and /apis", n)
	}
	if a, b := describeLists(lists), describeLists(legacy); !slices.Equal(a, b) {
		t.Errorf("aggregated and legacy discovery differ:\n%v\n%v", a, b)
	}
	if lists[0].GroupVersion != "v1" {
		t.Errorf("first list is %s, want v1", lists[0].GroupVersion)
	}
}

// describeLists is every group version and resource of lists with what discovery says of it,
// sorted.
func describeLists(lists []*metav1.APIResourceList) []string {
	var out []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			out = append(out, strings.Join([]string{l.GroupVersion, r.Name, r.SingularName, r.Group, r.Version, r.Kind,
				strings.Join(r.Verbs, ","), strings.Join(r.ShortNames, ","), strings.Join(r.Categories, ",")}, " "))
		}
	}
	slices.Sort(out)
	return out
}

func TestFilterResources(t *testing.T) {
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: []string{"create", "delete", "get", "list", "watch"}},
			{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: []string{"get", "list", "watch", "delete"}},
			{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: []string{"create"}},
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Verbs: []string{"delete", "list", "watch"}},
		}},
		{GroupVersion: "not/a/group/version", APIResources: []metav1.APIResource{{Name: "x", Verbs: []string{"list"}}}},
	}
	for _, tc := range []struct {
		verbs []string
		want  []string
	}{
		{nil, []string{"/v1, Resource=pods Pod true", "/v1, Resource=bindings Binding true", "example.com/v1, Resource=widgets Widget false"}},
		{[]string{"list", "watch", "delete"}, []string{"/v1, Resource=pods Pod true", "example.com/v1, Resource=widgets Widget false"}},
		{[]string{"create", "list"}, []string{"/v1, Resource=pods Pod true"}},
		{[]string{"patch"}, nil},
	} {
		var got []string
		for _, r := range client.FilterResources(lists, tc.verbs...) {
			got = append(got, r.GroupVersionResource.String()+" "+r.Kind+" "+map[bool]string{true: "true", false: "false"}[r.Namespaced])
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %q, want %q", tc.verbs, got, tc.want)
		}
	}
}

// TestMetadataHandle reads, watches, patches and deletes ConfigMaps through a handle that
// knows only their group, version and resource, and gets their metadata only.
func TestMetadataHandle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, rt := recordingClient(t, false)
	ns := testserver.Namespace(t, c, "metadata-")
	cms := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"x": "1"}}, Data: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	meta := client.Metadata(c, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
	rt.take() // the writes so far
	list, err := meta.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "a" || list.Items[0].Labels["x"] != "1" || list.ResourceVersion == "" {
		t.Fatalf("list: %+v", list)
	}
	if k := list.Items[0].Kind; k != "PartialObjectMetadata" {
		t.Errorf("listed item of kind %q", k)
	}
	if reads := rt.take(); len(reads) != 1 || !strings.Contains(reads[0], "as=PartialObjectMetadataList;") {
		t.Errorf("requests of the list: %v", reads)
	}
	got, err := meta.Get(ctx, "a")
	if err != nil || got.UID != list.Items[0].UID || got.Kind != "PartialObjectMetadata" {
		t.Fatalf("get: %+v %v", got, err)
	}
	reads := rt.take()
	if len(reads) != 1 {
		t.Errorf("requests of the get: %v", reads)
	}
	for _, s := range reads {
		if !strings.Contains(s, "as=PartialObjectMetadata;") {
			t.Errorf("a metadata read without asking for metadata: %s", s)
		}
	}
	w, err := meta.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	patched, err := meta.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"2"}}}`), metav1.PatchOptions{})
	if err != nil || patched.Labels["x"] != "2" {
		t.Fatalf("patch: %+v %v", patched, err)
	}
	if err := meta.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var events []string
	for len(events) < 2 {
		ev, ok := <-w.Events
		if !ok {
			t.Fatalf("watch ended after %v", events)
		}
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		events = append(events, string(ev.Type)+" "+ev.Object.Name+" "+ev.Object.Labels["x"])
	}
	if want := []string{string(watch.Modified) + " a 2", string(watch.Deleted) + " a 2"}; !slices.Equal(events, want) {
		t.Errorf("watch: %v, want %v", events, want)
	}
	if _, err := meta.Get(ctx, "a"); !client.IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
}
