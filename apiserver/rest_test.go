package apiserver_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

func pod(name string, extra ...map[string]any) map[string]any {
	p := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app": "web"}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
	}
	for _, e := range extra {
		for k, v := range e {
			p[k] = v
		}
	}
	return p
}

func TestCreateFillsServerFields(t *testing.T) {
	ns := namespace(t)
	p := pod("web-1")
	p["metadata"].(map[string]any)["annotations"] = map[string]any{"note": "  exact\nvalue "}
	r := do(t, "POST", "/api/v1/namespaces/"+ns+"/pods", p)
	if r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	m := r.object(t)
	for _, f := range [][]any{{"metadata", "uid"}, {"metadata", "creationTimestamp"}, {"metadata", "resourceVersion"}} {
		if get(m, f...) == nil || get(m, f...) == "" {
			t.Errorf("%v not set: %s", f, r.body)
		}
	}
	checks := []struct {
		path []any
		want any
	}{
		{[]any{"kind"}, "Pod"},
		{[]any{"apiVersion"}, "v1"},
		{[]any{"metadata", "namespace"}, ns},
		{[]any{"metadata", "annotations", "note"}, "  exact\nvalue "},
		{[]any{"spec", "restartPolicy"}, "Always"},
		{[]any{"spec", "containers", 0, "imagePullPolicy"}, "Always"},
		{[]any{"status", "phase"}, "Pending"},
	}
	for _, c := range checks {
		if got := get(m, c.path...); got != c.want {
			t.Errorf("%v = %v, want %v", c.path, got, c.want)
		}
	}
	r = do(t, "POST", "/api/v1/namespaces/"+ns+"/pods", map[string]any{"metadata": map[string]any{"generateName": "gen-"}, "spec": get(p, "spec")})
	if name, _ := get(r.object(t), "metadata", "name").(string); r.code != 201 || !strings.HasPrefix(name, "gen-") || len(name) != len("gen-")+5 {
		t.Errorf("generateName: %d %s", r.code, r.body)
	}
}

// TestBadInput checks that each kind of bad request gets its precise Status and stores nothing.
func TestBadInput(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/pods"
	if r := do(t, "POST", base, pod("exists")); r.code != 201 {
		t.Fatalf("setup: %d %s", r.code, r.body)
	}
	big := strings.Repeat("x", 4<<20)
	cases := []struct {
		name, method, path string
		body               any
		headers            []string
		code               int
		reason             metav1.StatusReason
		causeField         string
	}{
		{"malformed json", "POST", base, `{"metadata": {`, nil, 400, metav1.StatusReasonBadRequest, ""},
		{"wrong kind", "POST", base, map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "x"}}, nil, 400, metav1.StatusReasonBadRequest, ""},
		{"unknown apiVersion", "POST", base, map[string]any{"apiVersion": "nope/v9", "kind": "Pod", "metadata": map[string]any{"name": "x"}}, nil, 400, metav1.StatusReasonBadRequest, ""},
		{"invalid name", "POST", base, pod("Bad_Name"), nil, 422, metav1.StatusReasonInvalid, "metadata.name"},
		{"missing containers", "POST", base, map[string]any{"metadata": map[string]any{"name": "empty"}, "spec": map[string]any{}}, nil, 422, metav1.StatusReasonInvalid, "spec.containers"},
		{"unknown field strict", "POST", base + "?fieldValidation=Strict", pod("strict", map[string]any{"bogus": 1}), nil, 400, metav1.StatusReasonBadRequest, ""},
		{"bad fieldValidation", "POST", base + "?fieldValidation=Loud", pod("loud"), nil, 400, metav1.StatusReasonBadRequest, ""},
		{"oversize", "POST", base, `{"metadata":{"name":"big","annotations":{"a":"` + big + `"}}}`, nil, 413, metav1.StatusReasonRequestEntityTooLarge, ""},
		{"duplicate", "POST", base, pod("exists"), nil, 409, metav1.StatusReasonAlreadyExists, ""},
		{"namespace mismatch", "POST", base, pod("other", map[string]any{"metadata": map[string]any{"name": "other", "namespace": "elsewhere"}}), nil, 400, metav1.StatusReasonBadRequest, ""},
		{"missing namespace", "POST", "/api/v1/namespaces/no-such-ns/pods", pod("x"), nil, 404, metav1.StatusReasonNotFound, ""},
		{"bad label selector", "GET", base + "?labelSelector=a%20in%20(", nil, nil, 400, metav1.StatusReasonBadRequest, ""},
		{"unsupported field selector", "GET", base + "?fieldSelector=spec.bogus%3Dx", nil, nil, 400, metav1.StatusReasonBadRequest, ""},
		{"bogus resourceVersion", "GET", base + "?resourceVersion=abc", nil, nil, 400, metav1.StatusReasonBadRequest, ""},
		{"bogus continue", "GET", base + "?limit=1&continue=garbage", nil, nil, 400, metav1.StatusReasonBadRequest, ""},
		{"bad limit", "GET", base + "?limit=-3", nil, nil, 400, metav1.StatusReasonBadRequest, ""},
		{"not found", "GET", base + "/nope", nil, nil, 404, metav1.StatusReasonNotFound, ""},
		{"unknown resource", "GET", "/api/v1/namespaces/" + ns + "/widgets", nil, nil, 404, metav1.StatusReasonNotFound, ""},
		{"server-side apply without fieldManager", "PATCH", base + "/exists", "{}", []string{"Content-Type", "application/apply-patch+yaml"}, 422, metav1.StatusReasonInvalid, "fieldManager"},
		{"unknown patch type", "PATCH", base + "/exists", "{}", []string{"Content-Type", "text/plain"}, 415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"bad json patch", "PATCH", base + "/exists", `{"op":"add"}`, []string{"Content-Type", "application/json-patch+json"}, 400, metav1.StatusReasonBadRequest, ""},
		{"patch breaks validation", "PATCH", base + "/exists", `{"spec":{"containers":[{"name":"c","image":""}]}}`, []string{"Content-Type", "application/merge-patch+json"}, 422, metav1.StatusReasonInvalid, ""},
		{"json patch copy bomb", "PATCH", base + "/exists", copyBomb(), []string{"Content-Type", "application/json-patch+json"}, 422, metav1.StatusReasonInvalid, ""},
		{"protected namespace", "DELETE", "/api/v1/namespaces/default", nil, nil, 403, metav1.StatusReasonForbidden, ""},
		{"failed precondition", "DELETE", base + "/exists", map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": map[string]any{"uid": "not-its-uid"}}, nil, 409, metav1.StatusReasonConflict, ""},
		{"bad propagationPolicy", "DELETE", base + "/exists?propagationPolicy=Sideways", nil, nil, 422, metav1.StatusReasonInvalid, "propagationPolicy"},
		{"bad dryRun", "POST", base + "?dryRun=Some", pod("dry"), nil, 400, metav1.StatusReasonBadRequest, ""},
		{"watch rv too large", "GET", base + "?watch=true&resourceVersion=999999999", nil, nil, 504, metav1.StatusReasonTimeout, ""},
		{"sendInitialEvents without match", "GET", base + "?watch=true&sendInitialEvents=true&allowWatchBookmarks=true", nil, nil, 422, metav1.StatusReasonInvalid, "resourceVersionMatch"},
		{"not acceptable", "GET", base, nil, []string{"Accept", "application/xml"}, 406, metav1.StatusReasonNotAcceptable, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, c.method, c.path, c.body, c.headers...)
			if r.code != c.code {
				t.Fatalf("code %d, want %d: %s", r.code, c.code, r.body)
			}
			var st metav1.Status
			if err := json.Unmarshal(r.body, &st); err != nil || st.Kind != "Status" || st.Status != metav1.StatusFailure {
				t.Fatalf("not a failure Status: %s", r.body)
			}
			if st.Reason != c.reason {
				t.Errorf("reason %q, want %q: %s", st.Reason, c.reason, r.body)
			}
			if c.causeField != "" {
				found := false
				if st.Details != nil {
					for _, cause := range st.Details.Causes {
						found = found || strings.HasPrefix(cause.Field, c.causeField)
					}
				}
				if !found {
					t.Errorf("no cause for %s: %s", c.causeField, r.body)
				}
			}
		})
	}
	// Nothing but the setup pod was stored, and the server still serves.
	r := do(t, "GET", base, nil)
	if n := len(get(r.object(t), "items").([]any)); n != 1 {
		t.Errorf("%d pods stored, want 1: %s", n, r.body)
	}
}

// copyBomb is a JSON patch whose copies double the document each time.
func copyBomb() string {
	ops := make([]string, 40)
	for i := range ops {
		ops[i] = fmt.Sprintf(`{"op":"copy","from":"/metadata","path":"/metadata/annotations/a%d"}`, i)
	}
	return "[" + strings.Join(ops, ",") + "]"
}

func TestFieldValidationWarnAndIgnore(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/configmaps"
	cm := map[string]any{"metadata": map[string]any{"name": "warn"}, "data": map[string]any{"a": "b"}, "bogus": true}
	r := do(t, "POST", base+"?fieldValidation=Warn", cm)
	if r.code != 201 || !strings.Contains(r.header.Get("Warning"), "bogus") {
		t.Errorf("Warn: %d warning=%q %s", r.code, r.header.Get("Warning"), r.body)
	}
	cm["metadata"] = map[string]any{"name": "ignore"}
	r = do(t, "POST", base+"?fieldValidation=Ignore", cm)
	if r.code != 201 || r.header.Get("Warning") != "" {
		t.Errorf("Ignore: %d warning=%q", r.code, r.header.Get("Warning"))
	}
}

func TestUpdateConflictsAndStatusSplit(t *testing.T) {
	ns := namespace(t)
	base := "/apis/apps/v1/namespaces/" + ns + "/deployments"
	dep := map[string]any{
		"metadata": map[string]any{"name": "d"},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "d"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "d"}}, "spec": get(pod("x"), "spec")},
		},
		"status": map[string]any{"replicas": 7},
	}
	r := do(t, "POST", base, dep)
	if r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	created := r.object(t)
	if get(created, "status", "replicas") != nil || get(created, "metadata", "generation") != 1.0 || get(created, "spec", "replicas") != 1.0 {
		t.Fatalf("create must reset status, set generation 1 and default replicas: %s", r.body)
	}
	// A status write changes status only.
	st := created
	st["status"] = map[string]any{"replicas": 3}
	st["spec"].(map[string]any)["replicas"] = 5
	r = do(t, "PUT", base+"/d/status", st)
	if m := r.object(t); r.code != 200 || get(m, "status", "replicas") != 3.0 || get(m, "spec", "replicas") != 1.0 || get(m, "metadata", "generation") != 1.0 {
		t.Fatalf("status write: %d %s", r.code, r.body)
	}
	// A stale resourceVersion conflicts.
	r = do(t, "PUT", base+"/d", created)
	if r.code != 409 || get(r.object(t), "reason") != "Conflict" {
		t.Fatalf("stale update: %d %s", r.code, r.body)
	}
	// An empty resourceVersion is unconditional; spec writes keep status and bump generation.
	created["metadata"].(map[string]any)["resourceVersion"] = ""
	created["spec"].(map[string]any)["replicas"] = 4
	created["status"] = map[string]any{"replicas": 99}
	r = do(t, "PUT", base+"/d", created)
	if m := r.object(t); r.code != 200 || get(m, "spec", "replicas") != 4.0 || get(m, "status", "replicas") != 3.0 || get(m, "metadata", "generation") != 2.0 {
		t.Fatalf("unconditional update: %d %s", r.code, r.body)
	}
	// Scale reads and writes spec.replicas.
	r = do(t, "GET", base+"/d/scale", nil)
	if m := r.object(t); r.code != 200 || get(m, "kind") != "Scale" || get(m, "spec", "replicas") != 4.0 || get(m, "status", "selector") != "app=d" {
		t.Fatalf("scale: %d %s", r.code, r.body)
	}
	r = do(t, "PATCH", base+"/d/scale", `{"spec":{"replicas":6}}`, "Content-Type", "application/merge-patch+json")
	if r.code != 200 || get(r.object(t), "spec", "replicas") != 6.0 {
		t.Fatalf("scale patch: %d %s", r.code, r.body)
	}
}

func TestPatchTypes(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/services"
	svc := map[string]any{"metadata": map[string]any{"name": "s"}, "spec": map[string]any{
		"selector": map[string]any{"app": "web"},
		"ports":    []any{map[string]any{"name": "http", "port": 80}, map[string]any{"name": "https", "port": 443}},
	}}
	if r := do(t, "POST", base, svc); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	cases := []struct {
		name, contentType, patch string
		path                     []any
		want                     any
	}{
		// Strategic merge patch merges the ports list by port number instead of replacing it.
		{"strategic", "application/strategic-merge-patch+json", `{"spec":{"ports":[{"port":80,"name":"http","targetPort":8080}]}}`, []any{"spec", "ports", 1, "port"}, 443.0},
		{"merge", "application/merge-patch+json", `{"metadata":{"labels":{"tier":"front"}}}`, []any{"metadata", "labels", "tier"}, "front"},
		{"json", "application/json-patch+json", `[{"op":"replace","path":"/spec/selector/app","value":"api"}]`, []any{"spec", "selector", "app"}, "api"},
	}
	for _, c := range cases {
		r := do(t, "PATCH", base+"/s", c.patch, "Content-Type", c.contentType)
		if r.code != 200 {
			t.Fatalf("%s: %d %s", c.name, r.code, r.body)
		}
		if got := get(r.object(t), c.path...); got != c.want {
			t.Errorf("%s: %v = %v, want %v: %s", c.name, c.path, got, c.want, r.body)
		}
	}
}

func TestDryRun(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/configmaps"
	if r := do(t, "POST", base+"?dryRun=All", map[string]any{"metadata": map[string]any{"name": "dry"}}); r.code != 201 {
		t.Fatalf("dry create: %d %s", r.code, r.body)
	}
	if r := do(t, "GET", base+"/dry", nil); r.code != 404 {
		t.Fatalf("dry-run create stored the object: %d", r.code)
	}
	do(t, "POST", base, map[string]any{"metadata": map[string]any{"name": "real"}})
	if r := do(t, "DELETE", base+"/real?dryRun=All", nil); r.code != 200 {
		t.Fatalf("dry delete: %d %s", r.code, r.body)
	}
	if r := do(t, "GET", base+"/real", nil); r.code != 200 {
		t.Fatalf("dry-run delete deleted: %d", r.code)
	}
}

// TestFinalizers follows an object with a finalizer through deletion on a watch.
func TestFinalizers(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/configmaps"
	r := do(t, "POST", base, map[string]any{"metadata": map[string]any{"name": "f", "finalizers": []any{"example.com/hold"}}})
	if r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	events := startWatch(t, base+"?watch=true&resourceVersion="+get(r.object(t), "metadata", "resourceVersion").(string))
	r = do(t, "DELETE", base+"/f", map[string]any{"propagationPolicy": "Background"})
	if r.code != 200 || get(r.object(t), "metadata", "deletionTimestamp") == nil {
		t.Fatalf("delete with finalizer: %d %s", r.code, r.body)
	}
	if r := do(t, "GET", base+"/f", nil); r.code != 200 {
		t.Fatalf("object gone before its finalizer: %d", r.code)
	}
	r = do(t, "PATCH", base+"/f", `{"metadata":{"finalizers":null}}`, "Content-Type", "application/merge-patch+json")
	if r.code != 200 {
		t.Fatalf("remove finalizer: %d %s", r.code, r.body)
	}
	for _, want := range []string{"MODIFIED", "MODIFIED", "DELETED"} {
		if ev := events.next(t); ev.Type != want {
			t.Fatalf("event %s, want %s", ev.Type, want)
		}
	}
	if r := do(t, "GET", base+"/f", nil); r.code != 404 {
		t.Fatalf("object still there after its last finalizer: %d", r.code)
	}
}

func TestNamespaceTermination(t *testing.T) {
	ns := namespace(t)
	r := do(t, "DELETE", "/api/v1/namespaces/"+ns, nil)
	if r.code != 200 || get(r.object(t), "status", "phase") != "Terminating" {
		t.Fatalf("delete namespace: %d %s", r.code, r.body)
	}
	r = do(t, "POST", "/api/v1/namespaces/"+ns+"/configmaps", map[string]any{"metadata": map[string]any{"name": "late"}})
	if r.code != 403 {
		t.Fatalf("create in terminating namespace: %d %s", r.code, r.body)
	}
	// Only /finalize changes spec.finalizers; emptying them there (the namespace controller's
	// last step) removes the namespace.
	nsObj := do(t, "GET", "/api/v1/namespaces/"+ns, nil).object(t)
	nsObj["spec"] = map[string]any{"finalizers": []any{}}
	r = do(t, "PUT", "/api/v1/namespaces/"+ns, nsObj)
	if r.code != 200 || get(r.object(t), "spec", "finalizers", 0) != "kubernetes" {
		t.Fatalf("a plain update changed spec.finalizers: %d %s", r.code, r.body)
	}
	delete(get(nsObj, "metadata").(map[string]any), "resourceVersion")
	if r := do(t, "PUT", "/api/v1/namespaces/"+ns+"/finalize", nsObj); r.code != 200 {
		t.Fatalf("finalize: %d %s", r.code, r.body)
	}
	if r := do(t, "GET", "/api/v1/namespaces/"+ns, nil); r.code != 404 {
		t.Fatalf("namespace not removed after finalize: %d %s", r.code, r.body)
	}
	// A namespace finalized before its deletion has nothing to wait for: it goes at once.
	other := namespace(t)
	nsObj = do(t, "GET", "/api/v1/namespaces/"+other, nil).object(t)
	nsObj["spec"] = map[string]any{"finalizers": []any{}}
	if r := do(t, "PUT", "/api/v1/namespaces/"+other+"/finalize", nsObj); r.code != 200 {
		t.Fatalf("finalize: %d %s", r.code, r.body)
	}
	if r := do(t, "DELETE", "/api/v1/namespaces/"+other, nil); r.code != 200 {
		t.Fatalf("delete finalized namespace: %d %s", r.code, r.body)
	}
	if r := do(t, "GET", "/api/v1/namespaces/"+other, nil); r.code != 404 {
		t.Fatalf("finalized namespace not removed: %d %s", r.code, r.body)
	}
}

func TestServiceAllocation(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/services"
	svc := func(name string, spec map[string]any) map[string]any {
		if spec["ports"] == nil {
			spec["ports"] = []any{map[string]any{"port": 80}}
		}
		return map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}
	}
	r := do(t, "POST", base, svc("a", map[string]any{"type": "NodePort"}))
	if r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	m := r.object(t)
	ip, _ := get(m, "spec", "clusterIP").(string)
	np, _ := get(m, "spec", "ports", 0, "nodePort").(float64)
	if !strings.HasPrefix(ip, "10.0.") || np < 30000 || np > 32767 {
		t.Fatalf("allocation: clusterIP %q nodePort %v: %s", ip, np, r.body)
	}
	if get(m, "spec", "ports", 0, "targetPort") != 80.0 || get(m, "spec", "ports", 0, "protocol") != "TCP" || get(m, "spec", "sessionAffinity") != "None" {
		t.Errorf("service defaults missing: %s", r.body)
	}
	r = do(t, "POST", base, svc("b", map[string]any{"clusterIP": ip}))
	if r.code != 422 {
		t.Fatalf("taken ClusterIP: %d %s", r.code, r.body)
	}
	r = do(t, "POST", base, svc("c", map[string]any{"ports": []any{map[string]any{"port": 0}}}))
	if r.code != 422 {
		t.Fatalf("port 0: %d %s", r.code, r.body)
	}
	if r := do(t, "DELETE", base+"/a", nil); r.code != 200 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	// The released IP and port can be taken again.
	r = do(t, "POST", base, svc("d", map[string]any{"clusterIP": ip, "type": "NodePort", "ports": []any{map[string]any{"port": 80, "nodePort": np}}}))
	if r.code != 201 {
		t.Fatalf("reuse released IP and port: %d %s", r.code, r.body)
	}
}

func TestListPagingAndTables(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/pods"
	for _, n := range []string{"p1", "p2", "p3"} {
		if r := do(t, "POST", base, pod(n)); r.code != 201 {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
	}
	var names []string
	cont := ""
	for page := 0; page < 5; page++ {
		path := base + "?limit=2"
		if cont != "" {
			path += "&continue=" + cont
		}
		m := do(t, "GET", path, nil).object(t)
		if get(m, "metadata", "resourceVersion") == "" || get(m, "kind") != "PodList" {
			t.Fatalf("list without kind or resourceVersion: %v", m)
		}
		for _, it := range get(m, "items").([]any) {
			names = append(names, get(it, "metadata", "name").(string))
		}
		cont, _ = get(m, "metadata", "continue").(string)
		if cont == "" {
			break
		}
	}
	if strings.Join(names, ",") != "p1,p2,p3" {
		t.Fatalf("paged list = %v", names)
	}
	for _, path := range []string{base, base + "/p1"} {
		r := do(t, "GET", path, nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
		m := r.object(t)
		var cols []string
		for _, c := range get(m, "columnDefinitions").([]any) {
			cols = append(cols, get(c, "name").(string))
		}
		if get(m, "kind") != "Table" || get(m, "metadata", "resourceVersion") == "" || !strings.HasPrefix(strings.Join(cols, ","), "Name,Ready,Status,Restarts,Age,IP,Node") {
			t.Fatalf("table for %s: columns %v: %s", path, cols, r.body)
		}
		if get(m, "rows", 0, "cells", 0) != "p1" || get(m, "rows", 0, "object", "kind") != "PartialObjectMetadata" {
			t.Fatalf("table row: %s", r.body)
		}
	}
}

func TestDiscovery(t *testing.T) {
	checks := []struct{ path, contains string }{
		{"/api", `"versions":["v1"]`},
		{"/apis", `"name":"apps"`},
		{"/api/v1", `"name":"pods/status"`},
		{"/apis/apps/v1", `"name":"deployments/scale"`},
		{"/apis/discovery.k8s.io/v1", `"name":"endpointslices"`},
		{"/version", `"gitVersion":"v1.36.0`},
		{"/openapi/v3", `"api/v1"`},
		{"/openapi/v3/api/v1", `"fieldValidation"`},
	}
	for _, c := range checks {
		r := do(t, "GET", c.path, nil)
		if r.code != 200 || !strings.Contains(string(r.body), c.contains) {
			t.Errorf("%s: %d, want %s in %.300s", c.path, r.code, c.contains, r.body)
		}
	}
}

func TestProtobufBody(t *testing.T) {
	ns := namespace(t)
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "pb"}, Data: map[string]string{"k": "v"}}
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(registry.Scheme, registry.Scheme).Encode(cm, &buf); err != nil {
		t.Fatal(err)
	}
	r := do(t, "POST", "/api/v1/namespaces/"+ns+"/configmaps", buf.Bytes(), "Content-Type", "application/vnd.kubernetes.protobuf")
	if r.code != 201 || get(r.object(t), "data", "k") != "v" {
		t.Fatalf("protobuf create: %d %s", r.code, r.body)
	}
	r = do(t, "POST", "/api/v1/namespaces/"+ns+"/configmaps", []byte("k8s\x00garbage"), "Content-Type", "application/vnd.kubernetes.protobuf")
	if r.code != 400 {
		t.Fatalf("bad protobuf: %d %s", r.code, r.body)
	}
}

func TestBindingAndGracefulPodDeletion(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/pods"
	do(t, "POST", base, pod("b"))
	binding := map[string]any{"apiVersion": "v1", "kind": "Binding", "metadata": map[string]any{"name": "b"}, "target": map[string]any{"kind": "Node", "name": "node-1"}}
	if r := do(t, "POST", base+"/b/binding", binding); r.code != 201 {
		t.Fatalf("bind: %d %s", r.code, r.body)
	}
	if r := do(t, "POST", base+"/b/binding", binding); r.code != 409 {
		t.Fatalf("second bind: %d %s", r.code, r.body)
	}
	// A bound pod waits for its node agent; grace period 0 removes it at once.
	r := do(t, "DELETE", base+"/b", nil)
	if r.code != 200 || get(r.object(t), "metadata", "deletionGracePeriodSeconds") != 30.0 {
		t.Fatalf("graceful delete: %d %s", r.code, r.body)
	}
	if r := do(t, "DELETE", base+"/b?gracePeriodSeconds=0", nil); r.code != 200 {
		t.Fatalf("force delete: %d %s", r.code, r.body)
	}
	if r := do(t, "GET", base+"/b", nil); r.code != 404 {
		t.Fatalf("pod still there: %d", r.code)
	}
}

// watchEvent is one decoded watch event.
type watchEvent struct {
	Type   string         `json:"type"`
	Object map[string]any `json:"object"`
}

type eventStream struct {
	events chan watchEvent
	resp   *http.Response
}

func startWatch(t *testing.T, path string) *eventStream {
	t.Helper()
	resp, err := http.Get(server.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("watch %s: %d", path, resp.StatusCode)
	}
	s := &eventStream{events: make(chan watchEvent, 100), resp: resp}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var ev watchEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				s.events <- ev
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

func (s *eventStream) next(t *testing.T) watchEvent {
	t.Helper()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatal("watch ended")
			}
			if ev.Type == "BOOKMARK" {
				continue
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event within 10s")
		}
	}
}

func TestWatch(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns + "/configmaps"
	do(t, "POST", base, map[string]any{"metadata": map[string]any{"name": "before", "labels": map[string]any{"x": "1"}}})
	// The streaming initial list: ADDED for what exists, a bookmark marking its end, then live events.
	s := startWatch(t, base+"?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
	ev := <-s.events
	if ev.Type != "ADDED" || get(ev.Object, "metadata", "name") != "before" {
		t.Fatalf("first event %v", ev)
	}
	ev = <-s.events
	if ev.Type != "BOOKMARK" || get(ev.Object, "metadata", "annotations", "k8s.io/initial-events-end") != "true" || get(ev.Object, "kind") != "ConfigMap" {
		t.Fatalf("initial-events-end bookmark: %v", ev)
	}
	// Metadata-only watches (the metadata informers of garbage collectors) get every event,
	// bookmarks included, as PartialObjectMetadata.
	req, _ := http.NewRequest("GET", server.URL+base+"?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", nil)
	req.Header.Set("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(resp.Body)
	for _, want := range []string{"ADDED", "BOOKMARK"} {
		var mev watchEvent
		if err := dec.Decode(&mev); err != nil || mev.Type != want || get(mev.Object, "kind") != "PartialObjectMetadata" {
			t.Fatalf("metadata watch: %v %v, want %s of PartialObjectMetadata", mev, err, want)
		}
	}
	resp.Body.Close()
	// A selector watch sees an object leave its selection as DELETED.
	sel := startWatch(t, base+"?watch=true&labelSelector=x%3D1&resourceVersion="+get(ev.Object, "metadata", "resourceVersion").(string))
	do(t, "POST", base, map[string]any{"metadata": map[string]any{"name": "after"}})
	if ev := s.next(t); ev.Type != "ADDED" || get(ev.Object, "metadata", "name") != "after" {
		t.Fatalf("live event %v", ev)
	}
	do(t, "PATCH", base+"/before", `{"metadata":{"labels":{"x":"2"}}}`, "Content-Type", "application/merge-patch+json")
	if ev := sel.next(t); ev.Type != "DELETED" || get(ev.Object, "metadata", "name") != "before" {
		t.Fatalf("selector exit event %v", ev)
	}
	if ev := s.next(t); ev.Type != "MODIFIED" {
		t.Fatalf("modified event %v", ev)
	}
	// A watch from "0" starts with synthetic ADDED events.
	z := startWatch(t, base+"?watch=true&resourceVersion=0")
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		ev := z.next(t)
		got[get(ev.Object, "metadata", "name").(string)] = ev.Type == "ADDED"
	}
	if !got["before"] || !got["after"] {
		t.Fatalf("synthetic ADDED events: %v", got)
	}
}

// Bodies in CBOR (and other media types no endpoint takes) are refused with 415 and the
// message kube-apiserver v1.36 gives without its CBOR feature gates; nothing is written.
func TestUnsupportedMediaTypes(t *testing.T) {
	ns := namespace(t)
	createCRD(t, crdOf(t, "media.example.com", scalableCRD))
	t.Cleanup(func() { do(t, "DELETE", crdsPath+"/pools.media.example.com", nil) })
	cms := "/api/v1/namespaces/" + ns + "/configmaps"
	pools := "/apis/media.example.com/v1/namespaces/" + ns + "/pools"
	if r := do(t, "POST", cms, `{"metadata":{"name":"x"}}`); r.code != http.StatusCreated {
		t.Fatalf("create configmap: %d %s", r.code, r.body)
	}
	if r := do(t, "POST", pools, `{"apiVersion":"media.example.com/v1","kind":"Pool","metadata":{"name":"p"},"spec":{"size":1}}`); r.code != http.StatusCreated {
		t.Fatalf("create pool: %d %s", r.code, r.body)
	}
	const (
		bodyTypes    = "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
		customPatch  = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
		builtinPatch = "415: Unsupported Media Type"
	)
	cases := []struct {
		method, path, contentType, message string
	}{
		{"POST", cms, "application/cbor", bodyTypes},
		{"PUT", cms + "/x", "application/cbor", bodyTypes},
		{"POST", cms, "text/plain", bodyTypes},
		{"PATCH", cms + "/x?fieldManager=a", "application/apply-patch+cbor", builtinPatch},
		{"PATCH", cms + "/x", "application/cbor", builtinPatch},
		{"PATCH", cms + "/x", "application/foo", builtinPatch},
		{"POST", pools, "application/cbor", bodyTypes},
		{"PATCH", pools + "/p?fieldManager=a", "application/apply-patch+cbor", customPatch},
		{"PATCH", pools + "/p", "application/strategic-merge-patch+json", customPatch},
		{"PATCH", pools + "/p", "application/foo", customPatch},
		{"PATCH", pools + "/p/scale?fieldManager=a", "application/apply-patch+cbor", customPatch},
		{"PUT", pools + "/p/scale", "application/cbor", bodyTypes},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path+" "+c.contentType, func(t *testing.T) {
			r := do(t, c.method, c.path, []byte{0xa0}, "Content-Type", c.contentType)
			if r.code != http.StatusUnsupportedMediaType {
				t.Fatalf("%d %s", r.code, r.body)
			}
			st := r.object(t)
			if get(st, "reason") != "UnsupportedMediaType" || get(st, "message") != c.message {
				t.Errorf("status %s, want message %q", r.body, c.message)
			}
		})
	}
}
