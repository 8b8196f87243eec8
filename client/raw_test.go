package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestServerResources(t *testing.T) {
	c := newClient(t)
	lists, err := c.ServerResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(lists) < 2 || lists[0].GroupVersion != "v1" {
		t.Fatalf("first list %q of %d, want v1 and the groups", lists[0].GroupVersion, len(lists))
	}
	found := map[string]metav1.APIResource{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			found[l.GroupVersion+"/"+r.Name] = r
		}
	}
	for _, tc := range []struct {
		key        string
		namespaced bool
		verb       string
	}{
		{"v1/pods", true, "deletecollection"},
		{"v1/namespaces", false, "list"},
		{"v1/namespaces/finalize", false, "update"},
		{"apps/v1/deployments", true, "deletecollection"},
	} {
		r, ok := found[tc.key]
		if !ok {
			t.Errorf("%s not in discovery", tc.key)
			continue
		}
		if r.Namespaced != tc.namespaced || !slices.Contains(r.Verbs, tc.verb) {
			t.Errorf("%s: namespaced %v verbs %v, want %v and %q", tc.key, r.Namespaced, r.Verbs, tc.namespaced, tc.verb)
		}
	}
}

func TestRaw(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := testserver.Namespace(t, c, "raw-")
	cms := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"keep": map[bool]string{true: "yes", false: "no"}[name == "c"]}}}); err != nil {
			t.Fatal(err)
		}
	}
	path := "/api/v1/namespaces/" + ns + "/configmaps"

	// A collection delete with a selector and JSON DeleteOptions.
	body, _ := json.Marshal(metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "v1"}})
	if _, err := c.Raw(ctx, http.MethodDelete, path, url.Values{"labelSelector": {"keep=no"}}, body); err != nil {
		t.Fatal(err)
	}
	data, err := c.Raw(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var list corev1.ConfigMapList
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "c" {
		t.Errorf("left %v, want only c", list.Items)
	}

	for _, tc := range []struct {
		name, method, path string
		check              func(error) bool
	}{
		{"not found", http.MethodGet, path + "/nope", client.IsNotFound},
		{"relative path", http.MethodGet, "api/v1", func(err error) bool { return err != nil }},
	} {
		if _, err := c.Raw(ctx, tc.method, tc.path, nil, nil); !tc.check(err) {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}

func TestUpdateSubresourceFinalize(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	nss := client.Resource[*corev1.Namespace](c, "namespaces")
	ns, err := nss.Get(ctx, testserver.Namespace(t, c, "finalize-"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nss.Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err = nss.Get(ctx, ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Phase != corev1.NamespaceTerminating || len(ns.Spec.Finalizers) == 0 {
		t.Fatalf("phase %q finalizers %v, want Terminating with finalizers", ns.Status.Phase, ns.Spec.Finalizers)
	}
	ns.Spec.Finalizers = nil
	if _, err := nss.UpdateSubresource(ctx, ns, "finalize"); err != nil && !client.IsNotFound(err) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := nss.Get(ctx, ns.Name); client.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("namespace still there after finalize")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
