package apiserver_test

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// admissionServer is a test server of admission webhooks, one per path:
//   - /validate refuses ConfigMaps holding a key named "forbidden", and warns about "risky";
//   - /mutate-a (reinvocationPolicy IfNeeded) annotates objects that carry label b;
//   - /mutate-b labels objects b=set;
//   - /slow answers after two seconds.
type admissionServer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
	kinds []string // "kind requestKind" of each /hpa-v1 review
}

func newAdmissionServer(t *testing.T) *admissionServer {
	a := &admissionServer{calls: map[string]int{}}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *admissionServer) count(path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[path]
}

func (a *admissionServer) serve(w http.ResponseWriter, r *http.Request) {
	var review struct {
		APIVersion string `json:"apiVersion"`
		Request    struct {
			UID         string         `json:"uid"`
			Kind        map[string]any `json:"kind"`
			RequestKind map[string]any `json:"requestKind"`
			Operation   string         `json:"operation"`
			Object      map[string]any `json:"object"`
			OldObject   map[string]any `json:"oldObject"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	a.calls[r.URL.Path]++
	a.mu.Unlock()
	resp := map[string]any{"uid": review.Request.UID, "allowed": true}
	obj := review.Request.Object
	patch := func(ops ...map[string]any) {
		data, _ := json.Marshal(ops)
		resp["patchType"], resp["patch"] = "JSONPatch", base64.StdEncoding.EncodeToString(data)
	}
	switch r.URL.Path {
	case "/validate":
		o := obj
		if review.Request.Operation == "DELETE" {
			o = review.Request.OldObject
		}
		data, _ := get(o, "data").(map[string]any)
		if _, bad := data["forbidden"]; bad {
			resp["allowed"] = false
			resp["status"] = map[string]any{"code": 403, "reason": "Forbidden", "message": "no forbidden keys"}
		}
		if _, risky := data["risky"]; risky {
			resp["warnings"] = []string{"risky key"}
		}
		if get(o, "metadata", "labels", "undeletable") == "true" && review.Request.Operation == "DELETE" {
			resp["allowed"] = false
			resp["status"] = map[string]any{"message": "this one stays"}
		}
	case "/mutate-a":
		if obj != nil && get(obj, "metadata", "labels", "b") != nil && get(obj, "metadata", "annotations", "a-saw-b") == nil {
			if get(obj, "metadata", "annotations") == nil {
				patch(map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]any{"a-saw-b": "yes"}})
			} else {
				patch(map[string]any{"op": "add", "path": "/metadata/annotations/a-saw-b", "value": "yes"})
			}
		}
	case "/mutate-b":
		if obj == nil {
			break
		}
		if get(obj, "metadata", "labels") == nil {
			patch(map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]any{"b": "set"}})
		} else {
			patch(map[string]any{"op": "add", "path": "/metadata/labels/b", "value": "set"})
		}
	case "/hpa-v1":
		// Registered for autoscaling/v1: sees v1 objects whatever version was written, and
		// sets v1's CPU target (v2 defaults it to 80%).
		a.mu.Lock()
		a.kinds = append(a.kinds, fmt.Sprint(review.Request.Kind["version"], " ", review.Request.RequestKind["version"]))
		a.mu.Unlock()
		if obj != nil && get(obj, "spec", "targetCPUUtilizationPercentage") != 42.0 {
			patch(map[string]any{"op": "add", "path": "/spec/targetCPUUtilizationPercentage", "value": 42})
		}
	case "/slow":
		time.Sleep(2 * time.Second)
	}
	json.NewEncoder(w).Encode(map[string]any{"apiVersion": review.APIVersion, "kind": "AdmissionReview", "response": resp})
}

// webhookConfig builds a webhook configuration whose one webhook calls path for ConfigMaps in
// namespaces labelled webhooks=<ns>.
func (a *admissionServer) webhookConfig(kind, name, ns, path string, extra map[string]any) map[string]any {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	url := a.srv.URL + path
	if path == "/down" {
		url = "https://127.0.0.1:1/down"
	}
	hook := map[string]any{
		"name":                    name + ".example.com",
		"clientConfig":            map[string]any{"url": url, "caBundle": base64.StdEncoding.EncodeToString(ca)},
		"rules":                   []any{map[string]any{"operations": []any{"CREATE", "UPDATE", "DELETE"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"configmaps"}}},
		"namespaceSelector":       map[string]any{"matchLabels": map[string]any{"webhooks": ns}},
		"sideEffects":             "None",
		"admissionReviewVersions": []any{"v1"},
	}
	for k, v := range extra {
		hook[k] = v
	}
	return map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": map[string]any{"name": name + "-" + ns}, "webhooks": []any{hook}}
}

func TestAdmissionWebhooks(t *testing.T) {
	a := newAdmissionServer(t)
	ns := namespace(t)
	if r := do(t, "PATCH", "/api/v1/namespaces/"+ns, `{"metadata":{"labels":{"webhooks":"`+ns+`"}}}`, "Content-Type", "application/merge-patch+json"); r.code != http.StatusOK {
		t.Fatalf("label namespace: %d %s", r.code, r.body)
	}
	const vwc, mwc = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
	cached := func(path, name string) bool {
		return strings.Contains(string(do(t, "GET", path+"?resourceVersion=0", nil).body), `"`+name+`"`)
	}
	// remove deletes a configuration and waits for the watch cache to drop it.
	remove := func(path, name string) response {
		t.Helper()
		r := do(t, "DELETE", path+"/"+name, nil)
		eventually(t, name+" gone from the watch cache", func() bool { return !cached(path, name) })
		return r
	}
	install := func(path string, cfg map[string]any) {
		t.Helper()
		if r := do(t, "POST", path, cfg); r.code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", get(cfg, "metadata", "name"), r.code, r.body)
		}
		name := get(cfg, "metadata", "name").(string)
		t.Cleanup(func() { do(t, "DELETE", path+"/"+name, nil) })
		// The apiserver reads webhook configurations from its watch cache, as kube-apiserver
		// from an informer: a write right after the create may not see it yet.
		eventually(t, name+" in the watch cache", func() bool { return cached(path, name) })
	}
	cms := "/api/v1/namespaces/" + ns + "/configmaps"
	cm := func(name string, data map[string]any, labels map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name, "labels": labels}, "data": data}
	}

	install(vwc, a.webhookConfig("ValidatingWebhookConfiguration", "validate", ns, "/validate", nil))
	install(mwc, a.webhookConfig("MutatingWebhookConfiguration", "a-mutate", ns, "/mutate-a", map[string]any{"reinvocationPolicy": "IfNeeded"}))
	install(mwc, a.webhookConfig("MutatingWebhookConfiguration", "b-mutate", ns, "/mutate-b", nil))

	t.Run("validating: refused with the webhook's status, warnings passed on", func(t *testing.T) {
		r := do(t, "POST", cms, cm("bad", map[string]any{"forbidden": "x"}, nil))
		if r.code != http.StatusForbidden || get(r.object(t), "message") != `admission webhook "validate.example.com" denied the request: no forbidden keys` {
			t.Fatalf("forbidden key: %d %s", r.code, r.body)
		}
		if r := do(t, "GET", cms+"/bad", nil); r.code != http.StatusNotFound {
			t.Errorf("the refused object was stored: %d", r.code)
		}
		r = do(t, "POST", cms, cm("risky", map[string]any{"risky": "x"}, nil))
		if r.code != http.StatusCreated || !strings.Contains(r.header.Get("Warning"), "risky key") {
			t.Fatalf("risky key: %d %v %s", r.code, r.header, r.body)
		}
		// An update is judged too.
		o := r.object(t)
		o["data"] = map[string]any{"forbidden": "now"}
		if r := do(t, "PUT", cms+"/risky", o); r.code != http.StatusForbidden {
			t.Errorf("update to a forbidden key: %d %s", r.code, r.body)
		}
	})

	t.Run("mutating: patches applied in order, IfNeeded reinvoked after a later change", func(t *testing.T) {
		before := a.count("/mutate-a")
		r := do(t, "POST", cms, cm("mutated", map[string]any{"k": "v"}, nil))
		if r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		o := r.object(t)
		if get(o, "metadata", "labels", "b") != "set" || get(o, "metadata", "annotations", "a-saw-b") != "yes" {
			t.Errorf("mutations: %v", o["metadata"])
		}
		if n := a.count("/mutate-a") - before; n != 2 {
			t.Errorf("a called %d times, want 2 (reinvoked once)", n)
		}
		if got := get(do(t, "GET", cms+"/mutated", nil).object(t), "metadata", "labels", "b"); got != "set" {
			t.Errorf("stored label b = %v", got)
		}
	})

	t.Run("DELETE is judged on the stored object", func(t *testing.T) {
		if r := do(t, "POST", cms, cm("keep", nil, map[string]any{"undeletable": "true"})); r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		r := do(t, "DELETE", cms+"/keep", nil)
		if r.code != http.StatusBadRequest || get(r.object(t), "message") != `admission webhook "validate.example.com" denied the request: this one stays` {
			t.Errorf("delete: %d %s", r.code, r.body)
		}
	})

	t.Run("selectors and match conditions choose the requests", func(t *testing.T) {
		other := namespace(t) // not labelled: no webhook sees its writes
		if r := do(t, "POST", "/api/v1/namespaces/"+other+"/configmaps", cm("bad", map[string]any{"forbidden": "x"}, nil)); r.code != http.StatusCreated {
			t.Errorf("outside the namespace selector: %d %s", r.code, r.body)
		}
		install(vwc, a.webhookConfig("ValidatingWebhookConfiguration", "guarded", ns, "/validate", map[string]any{
			"objectSelector":  map[string]any{"matchLabels": map[string]any{"guard": "on"}},
			"matchConditions": []any{map[string]any{"name": "prefixed", "expression": "object.metadata.name.startsWith('guarded-')"}},
		}))
		before := a.count("/validate")
		do(t, "POST", cms, cm("plain", map[string]any{"k": "v"}, map[string]any{"guard": "on"}))
		do(t, "POST", cms, cm("guarded-1", map[string]any{"k": "v"}, nil))
		do(t, "POST", cms, cm("guarded-2", map[string]any{"k": "v"}, map[string]any{"guard": "on"}))
		// validate.example.com sees all three; guarded.example.com only guarded-2.
		if n := a.count("/validate") - before; n != 4 {
			t.Errorf("/validate called %d times, want 4", n)
		}
	})

	t.Run("matchPolicy Equivalent: a webhook for v1 sees a v2 write at v1", func(t *testing.T) {
		install(mwc, a.webhookConfig("MutatingWebhookConfiguration", "hpa", ns, "/hpa-v1", map[string]any{
			"rules": []any{map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{"autoscaling"}, "apiVersions": []any{"v1"}, "resources": []any{"horizontalpodautoscalers"}}}}))
		hpa := map[string]any{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": map[string]any{"name": "web"},
			"spec": map[string]any{"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 3}}
		r := do(t, "POST", "/apis/autoscaling/v2/namespaces/"+ns+"/horizontalpodautoscalers", hpa)
		if r.code != http.StatusCreated {
			t.Fatalf("create at v2: %d %s", r.code, r.body)
		}
		if got := get(r.object(t), "spec", "metrics", 0, "resource", "target", "averageUtilization"); got != 42.0 {
			t.Errorf("the v1 webhook's patch at v2: %v", get(r.object(t), "spec"))
		}
		a.mu.Lock()
		kinds := fmt.Sprint(a.kinds)
		a.mu.Unlock()
		if kinds != "[v1 v2]" {
			t.Errorf("the webhook saw kind/requestKind versions %s, want [v1 v2]", kinds)
		}
		exact := a.webhookConfig("MutatingWebhookConfiguration", "hpa-exact", ns, "/hpa-v1", map[string]any{"matchPolicy": "Exact",
			"rules": []any{map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{"autoscaling"}, "apiVersions": []any{"v1"}, "resources": []any{"horizontalpodautoscalers"}}}})
		remove(mwc, "hpa-"+ns)
		install(mwc, exact)
		hpa["metadata"] = map[string]any{"name": "web2"}
		if r := do(t, "POST", "/apis/autoscaling/v2/namespaces/"+ns+"/horizontalpodautoscalers", hpa); r.code != http.StatusCreated || get(r.object(t), "spec", "metrics", 0, "resource", "target", "averageUtilization") != 80.0 {
			t.Errorf("an Exact v1 webhook changed a v2 write: %d %s", r.code, r.body)
		}
	})

	t.Run("failure policy and timeouts", func(t *testing.T) {
		install(vwc, a.webhookConfig("ValidatingWebhookConfiguration", "down-ignored", ns, "/down", map[string]any{"failurePolicy": "Ignore"}))
		if r := do(t, "POST", cms, cm("through", nil, nil)); r.code != http.StatusCreated {
			t.Fatalf("a down webhook that fails open: %d %s", r.code, r.body)
		}
		install(vwc, a.webhookConfig("ValidatingWebhookConfiguration", "slow", ns, "/slow", map[string]any{"failurePolicy": "Fail", "timeoutSeconds": 1}))
		r := do(t, "POST", cms, cm("late", nil, nil))
		msg, _ := get(r.object(t), "message").(string)
		if r.code != http.StatusInternalServerError || !strings.Contains(msg, `failed calling webhook "slow.example.com"`) || !strings.Contains(msg, "/slow") {
			t.Fatalf("a slow webhook that fails closed: %d %s", r.code, r.body)
		}
		remove(vwc, "slow-"+ns)
		install(vwc, a.webhookConfig("ValidatingWebhookConfiguration", "down", ns, "/down", nil))
		r = do(t, "POST", cms, cm("blocked", nil, nil))
		msg, _ = get(r.object(t), "message").(string)
		if r.code != http.StatusInternalServerError || !strings.Contains(msg, `failed calling webhook "down.example.com"`) || !strings.Contains(msg, "https://127.0.0.1:1/down") {
			t.Fatalf("a down webhook that fails closed: %d %s", r.code, r.body)
		}
		// The configurations themselves are never judged: the broken one can be removed.
		if r := remove(vwc, "down-"+ns); r.code != http.StatusOK {
			t.Errorf("delete the broken webhook: %d %s", r.code, r.body)
		}
		if r := do(t, "POST", cms, cm("after", nil, nil)); r.code != http.StatusCreated {
			t.Errorf("after removing it: %d %s", r.code, r.body)
		}
	})
}
