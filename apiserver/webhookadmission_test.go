package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// admissionServer is a test server of admission webhooks, one per path:
//   - /validate refuses ConfigMaps holding a key named "forbidden", and warns about "risky";
//   - /mutate-a (reinvocationPolicy IfNeeded) annotates objects that carry label b;
//   - /mutate-b labels objects b=set;
//   - /slow answers after two seconds;
//   - /scale-mutate makes a Scale of 5 replicas one of 6; /scale-validate refuses more than 10;
//   - /connect-mutate sends an exec of "hijack" to container "ghost" and makes a "sneak" a
//     "forbidden"; /connect-validate refuses the command "forbidden" and port 22;
//   - /pod-inject adds a container "injected" without resources to pods labelled inject=yes;
//     /pod-refuse refuses those pods;
//   - /record admits everything (its requests are recorded, as every path's);
//   - /overreach names another requester in a CSR and makes a PriorityClass the default;
//   - /garbage-text, /garbage-uid, /garbage-absent and /garbage-patch answer wrongly: not
//     JSON, another uid, no response, a patch of an unknown operation.
type admissionServer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	kinds   []string                    // "kind requestKind" of each /hpa-v1 review
	reviews map[string][]map[string]any // the requests each path received
}

func newAdmissionServer(t *testing.T) *admissionServer {
	a := &admissionServer{calls: map[string]int{}, reviews: map[string][]map[string]any{}}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *admissionServer) count(path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[path]
}

// received are the requests path received.
func (a *admissionServer) received(path string) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.reviews[path])
}

func (a *admissionServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var raw struct {
		Request map[string]any `json:"request"`
	}
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
	if err := errors.Join(json.Unmarshal(body, &review), json.Unmarshal(body, &raw)); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.URL.Path == "/garbage-text" {
		io.WriteString(w, "this is not an AdmissionReview")
		return
	}
	a.mu.Lock()
	a.calls[r.URL.Path]++
	a.reviews[r.URL.Path] = append(a.reviews[r.URL.Path], raw.Request)
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
	case "/scale-mutate":
		if get(obj, "spec", "replicas") == 5.0 {
			patch(map[string]any{"op": "replace", "path": "/spec/replicas", "value": 6})
		}
	case "/scale-validate":
		if n, _ := get(obj, "spec", "replicas").(float64); n > 10 {
			resp["allowed"] = false
			resp["status"] = map[string]any{"code": 403, "reason": "Forbidden", "message": "at most 10 replicas"}
		}
	case "/connect-mutate":
		switch get(obj, "command", 0) {
		case "hijack":
			patch(map[string]any{"op": "add", "path": "/container", "value": "ghost"})
		case "sneak":
			patch(map[string]any{"op": "replace", "path": "/command/0", "value": "forbidden"})
		}
	case "/pod-inject":
		if get(obj, "metadata", "labels", "inject") == "yes" {
			patch(map[string]any{"op": "add", "path": "/spec/containers/-", "value": map[string]any{"name": "injected", "image": "kplane"}})
		}
	case "/pod-refuse":
		if get(obj, "metadata", "labels", "inject") == "yes" {
			resp["allowed"] = false
			resp["status"] = map[string]any{"code": 403, "reason": "Forbidden", "message": "the webhook refuses it"}
		}
	case "/overreach":
		// What a webhook may not decide: a CSR's requester, a second default PriorityClass.
		switch get(obj, "kind") {
		case "CertificateSigningRequest":
			patch(map[string]any{"op": "add", "path": "/spec/username", "value": "mallory"})
		case "PriorityClass":
			patch(map[string]any{"op": "add", "path": "/globalDefault", "value": true})
		}
	case "/garbage-uid":
		resp["uid"] = "not-the-request-uid"
	case "/garbage-absent":
		json.NewEncoder(w).Encode(map[string]any{"apiVersion": review.APIVersion, "kind": "AdmissionReview"})
		return
	case "/garbage-patch":
		patch(map[string]any{"op": "frobnicate", "path": "/metadata/labels"})
	case "/connect-validate":
		ports, _ := get(obj, "ports").([]any)
		if get(obj, "command", 0) == "forbidden" || slices.Contains(ports, any(22.0)) {
			resp["allowed"] = false
			resp["status"] = map[string]any{"code": 403, "reason": "Forbidden", "message": "not this one"}
		}
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

const (
	vwc = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
	mwc = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
)

func inWatchCache(t *testing.T, path, name string) bool {
	return strings.Contains(string(do(t, "GET", path+"?resourceVersion=0", nil).body), `"`+name+`"`)
}

// installAdmission creates an admission configuration (deleted when the test ends) and waits
// until the apiserver sees it: it reads them from its watch cache, as kube-apiserver from an
// informer, so a write right after the create may not see it yet.
func installAdmission(t *testing.T, path string, cfg map[string]any) {
	t.Helper()
	if r := do(t, "POST", path, cfg); r.code != http.StatusCreated {
		t.Fatalf("create %s: %d %s", get(cfg, "metadata", "name"), r.code, r.body)
	}
	name := get(cfg, "metadata", "name").(string)
	t.Cleanup(func() { do(t, "DELETE", path+"/"+name, nil) })
	eventually(t, name+" in the watch cache", func() bool { return inWatchCache(t, path, name) })
}

// labelForWebhooks labels ns so that the admissionServer's configurations select it.
func labelForWebhooks(t *testing.T, ns string) {
	t.Helper()
	if r := do(t, "PATCH", "/api/v1/namespaces/"+ns, `{"metadata":{"labels":{"webhooks":"`+ns+`"}}}`, "Content-Type", "application/merge-patch+json"); r.code != http.StatusOK {
		t.Fatalf("label namespace: %d %s", r.code, r.body)
	}
}

func TestAdmissionWebhooks(t *testing.T) {
	a := newAdmissionServer(t)
	ns := namespace(t)
	labelForWebhooks(t, ns)
	cached := func(path, name string) bool { return inWatchCache(t, path, name) }
	// remove deletes a configuration and waits for the watch cache to drop it.
	remove := func(path, name string) response {
		t.Helper()
		r := do(t, "DELETE", path+"/"+name, nil)
		eventually(t, name+" gone from the watch cache", func() bool { return !cached(path, name) })
		return r
	}
	install := func(path string, cfg map[string]any) { t.Helper(); installAdmission(t, path, cfg) }
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
		// The client's preconditions come first, as in Kubernetes: the webhook never sees a
		// DELETE that could not happen.
		before := a.count("/validate")
		r = do(t, "DELETE", cms+"/keep", map[string]any{"preconditions": map[string]any{"uid": "not-its-uid"}})
		if r.code != http.StatusConflict {
			t.Errorf("delete with a wrong uid: %d %s", r.code, r.body)
		}
		if n := a.count("/validate") - before; n != 0 {
			t.Errorf("webhook called %d times for a DELETE whose precondition failed", n)
		}
		// A collection's items are judged one by one: the refusal stops the request.
		if r := do(t, "DELETE", cms+"?labelSelector=undeletable", nil); r.code != http.StatusBadRequest {
			t.Errorf("deletecollection: %d %s", r.code, r.body)
		}
		if r := do(t, "GET", cms+"/keep", nil); r.code != http.StatusOK {
			t.Errorf("refused object gone: %d %s", r.code, r.body)
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

// lastReview is the last request path received about resource and subresource.
func (a *admissionServer) lastReview(t *testing.T, path, resource, subresource string) map[string]any {
	t.Helper()
	reviews := a.received(path)
	for i := len(reviews) - 1; i >= 0; i-- {
		if get(reviews[i], "resource", "resource") == resource && get(reviews[i], "subResource") == subresource {
			return reviews[i]
		}
	}
	t.Fatalf("%s received no request about %s/%s", path, resource, subresource)
	return nil
}

// gvk is a review's kind or resource as "group/version/name".
func gvk(m any) string {
	name := get(m, "kind")
	if name == nil {
		name = get(m, "resource")
	}
	return fmt.Sprintf("%v/%v/%v", get(m, "group"), get(m, "version"), name)
}

// TestAdmissionWebhooksScale: writes of the scale subresource (PUT, patch, apply), of a
// Deployment and of a custom resource, are admitted as the change of an autoscaling/v1 Scale,
// by the webhooks and policies whose rules name the subresource; a mutating webhook's change
// of the Scale is what is stored.
func TestAdmissionWebhooksScale(t *testing.T) {
	a := newAdmissionServer(t)
	ns := namespace(t)
	labelForWebhooks(t, ns)
	const group = "webhook-scale.example.com"
	createCRD(t, crdOf(t, group, scalableCRD))
	t.Cleanup(func() { do(t, "DELETE", crdsPath+"/pools."+group, nil) })
	rules := func(resources ...any) map[string]any {
		return map[string]any{"rules": []any{map[string]any{"operations": []any{"UPDATE"}, "apiGroups": []any{"apps", group}, "apiVersions": []any{"v1"}, "resources": resources}}}
	}
	installAdmission(t, mwc, a.webhookConfig("MutatingWebhookConfiguration", "scale-mutate", ns, "/scale-mutate", rules("*/scale")))
	installAdmission(t, vwc, a.webhookConfig("ValidatingWebhookConfiguration", "scale-validate", ns, "/scale-validate", rules("deployments/scale", "pools/scale")))
	// Rules that name the parents alone do not see their scale.
	installAdmission(t, vwc, a.webhookConfig("ValidatingWebhookConfiguration", "parents", ns, "/validate", rules("deployments", "pools")))
	installAdmission(t, vapPath, map[string]any{"metadata": map[string]any{"name": "scale-" + ns}, "spec": map[string]any{
		"matchConstraints": map[string]any{
			"resourceRules":     []any{map[string]any{"operations": []any{"UPDATE"}, "apiGroups": []any{"apps", group}, "apiVersions": []any{"v1"}, "resources": []any{"*/scale"}}},
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"webhooks": ns}},
		},
		"validations": []any{map[string]any{"expression": "object.kind == 'Scale' && oldObject.kind == 'Scale' && object.spec.replicas != 7", "message": "not seven"}},
	}})
	installAdmission(t, vapbPath, map[string]any{"metadata": map[string]any{"name": "scale-" + ns},
		"spec": map[string]any{"policyName": "scale-" + ns, "validationActions": []any{"Deny"}}})

	parents := []struct {
		kind, path, replicas string
		obj                  map[string]any
	}{
		{"Deployment", "/apis/apps/v1/namespaces/" + ns + "/deployments", "replicas", map[string]any{"metadata": map[string]any{"name": "s"},
			"spec": map[string]any{"replicas": 1, "selector": map[string]any{"matchLabels": map[string]any{"app": "s"}}, "template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "s"}}, "spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}}}}}},
		{"Pool", "/apis/" + group + "/v1/namespaces/" + ns + "/pools", "size", map[string]any{"apiVersion": group + "/v1", "kind": "Pool",
			"metadata": map[string]any{"name": "s"}, "spec": map[string]any{"size": 1}}},
	}
	for _, p := range parents {
		t.Run(p.kind, func(t *testing.T) {
			if r := do(t, "POST", p.path, p.obj); r.code != http.StatusCreated {
				t.Fatalf("create: %d %s", r.code, r.body)
			}
			scale := p.path + "/s/scale"
			stored := func() any { return get(do(t, "GET", p.path+"/s", nil).object(t), "spec", p.replicas) }
			parentCalls := a.count("/validate")

			sc := do(t, "GET", scale, nil).object(t)
			sc["spec"] = map[string]any{"replicas": 5}
			r := do(t, "PUT", scale, sc)
			if r.code != http.StatusOK || get(r.object(t), "spec", "replicas") != 6.0 || stored() != 6.0 {
				t.Fatalf("PUT 5, mutated to 6: %d %s; stored %v", r.code, r.body, stored())
			}
			resource := strings.ToLower(p.kind) + "s"
			mutate, validate := a.lastReview(t, "/scale-mutate", resource, "scale"), a.lastReview(t, "/scale-validate", resource, "scale")
			for _, rv := range []map[string]any{mutate, validate} {
				if got := gvk(rv["kind"]); got != "autoscaling/v1/Scale" {
					t.Errorf("kind %s", got)
				}
				if got := get(rv, "operation"); got != "UPDATE" {
					t.Errorf("operation %v", got)
				}
				if get(rv, "object", "kind") != "Scale" || get(rv, "oldObject", "kind") != "Scale" || get(rv, "oldObject", "spec", "replicas") != 1.0 {
					t.Errorf("objects: %v / %v", rv["object"], rv["oldObject"])
				}
				if get(rv, "options", "kind") != "UpdateOptions" {
					t.Errorf("options %v", rv["options"])
				}
			}
			wantResource := "apps/v1/deployments"
			if p.kind == "Pool" {
				wantResource = group + "/v1/pools"
			}
			if got := gvk(mutate["resource"]); got != wantResource {
				t.Errorf("resource %s, want %s", got, wantResource)
			}
			// The mutating webhook sees the client's Scale, the validating one the Scale of
			// the result.
			if get(mutate, "object", "spec", "replicas") != 5.0 || get(validate, "object", "spec", "replicas") != 6.0 {
				t.Errorf("replicas seen: mutating %v, validating %v", get(mutate, "object", "spec"), get(validate, "object", "spec"))
			}

			r = do(t, "PATCH", scale, `{"spec":{"replicas":11}}`, "Content-Type", "application/merge-patch+json")
			if r.code != http.StatusForbidden || get(r.object(t), "message") != `admission webhook "scale-validate.example.com" denied the request: at most 10 replicas` {
				t.Errorf("patch to 11: %d %s", r.code, r.body)
			}
			r = do(t, "PATCH", scale, `{"spec":{"replicas":7}}`, "Content-Type", "application/merge-patch+json")
			if msg, _ := get(r.object(t), "message").(string); r.code != http.StatusUnprocessableEntity || !strings.HasSuffix(msg, "denied request: not seven") {
				t.Errorf("patch to 7: %d %s", r.code, r.body)
			}
			if got := stored(); got != 6.0 {
				t.Errorf("refused writes changed the parent: %v", got)
			}
			r = do(t, "PATCH", scale+"?fieldManager=hpa&force=true", "apiVersion: autoscaling/v1\nkind: Scale\nmetadata: {name: s}\nspec: {replicas: 5}\n", "Content-Type", applyYAML)
			if r.code != http.StatusOK || get(r.object(t), "spec", "replicas") != 6.0 {
				t.Errorf("apply 5, mutated to 6: %d %s", r.code, r.body)
			}
			if n := a.count("/validate") - parentCalls; n != 0 {
				t.Errorf("a webhook for %s alone was called %d times for its scale", resource, n)
			}
		})
	}
}

// TestAdmissionConnect: exec, attach and portforward are admitted as CONNECT of the pod's
// subresource, with the options the client asked for as the object, before the pod is looked
// at; a mutating webhook's change of the options is what the apiserver goes on with, and a
// refusal reaches kubectl's executor before any stream opens.
func TestAdmissionConnect(t *testing.T) {
	a := newAdmissionServer(t)
	ns := namespace(t)
	labelForWebhooks(t, ns)
	rules := map[string]any{"rules": []any{map[string]any{"operations": []any{"CONNECT"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"},
		"resources": []any{"pods/exec", "pods/attach", "pods/portforward"}}}}
	installAdmission(t, mwc, a.webhookConfig("MutatingWebhookConfiguration", "connect-mutate", ns, "/connect-mutate", rules))
	installAdmission(t, vwc, a.webhookConfig("ValidatingWebhookConfiguration", "connect-validate", ns, "/connect-validate", rules))
	installAdmission(t, vapPath, map[string]any{"metadata": map[string]any{"name": "connect-" + ns}, "spec": map[string]any{
		"matchConstraints": map[string]any{
			"resourceRules":     []any{map[string]any{"operations": []any{"CONNECT"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods/exec"}}},
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"webhooks": ns}},
		},
		"validations": []any{map[string]any{"expression": "request.operation == 'CONNECT' && !('rm' in object.command)", "message": "no rm"}},
	}})
	installAdmission(t, vapbPath, map[string]any{"metadata": map[string]any{"name": "connect-" + ns},
		"spec": map[string]any{"policyName": "connect-" + ns, "validationActions": []any{"Deny"}}})
	// The pod is on no node: what admission lets through stops at that check.
	pod := map[string]any{"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}
	if r := do(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod); r.code != http.StatusCreated {
		t.Fatalf("create pod: %d %s", r.code, r.body)
	}
	p := "/api/v1/namespaces/" + ns + "/pods/p"
	const refused, noHost = `admission webhook "connect-validate.example.com" denied the request: not this one`, "pod p does not have a host assigned"

	t.Run("kubectl's executor gets the refusal", func(t *testing.T) {
		u, err := url.Parse(server.URL + p + "/exec?command=forbidden&stdout=true&container=c")
		if err != nil {
			t.Fatal(err)
		}
		cfg := &rest.Config{Host: server.URL}
		// As kubectl exec: WebSocket first, SPDY when the upgrade fails.
		ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		if err != nil {
			t.Fatal(err)
		}
		spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
		if err != nil {
			t.Fatal(err)
		}
		exec, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
		// The executor reports the server's refusal as the failed upgrade's cause, and kubectl
		// prints it.
		if err == nil || !strings.HasSuffix(err.Error(), ": "+refused) {
			t.Fatalf("exec: %T %v", err, err)
		}
	})

	cases := []struct {
		name, query string
		code        int
		message     string
	}{
		{"admitted exec", "/exec?command=ls&container=c&stdout=1", http.StatusBadRequest, noHost},
		{"admitted attach", "/attach?container=c&stdout=1", http.StatusBadRequest, noHost},
		{"admitted portforward", "/portforward?ports=8080", http.StatusBadRequest, noHost},
		{"refused portforward", "/portforward?ports=8080,22", http.StatusForbidden, refused},
		{"validating webhooks see what mutating ones made of the options", "/exec?command=sneak", http.StatusForbidden, refused},
		{"the mutated options are the ones used", "/exec?command=hijack", http.StatusBadRequest, "container ghost is not valid for pod p"},
		{"policies judge CONNECT", "/exec?command=rm&command=-rf", http.StatusUnprocessableEntity,
			`pods "p" is forbidden: ValidatingAdmissionPolicy 'connect-` + ns + `' with binding 'connect-` + ns + `' denied request: no rm`},
		{"no dry run", "/exec?command=ls&dryRun=All", http.StatusBadRequest, "dryRun is not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", p+c.query, nil)
			if r.code != c.code || get(r.object(t), "message") != c.message {
				t.Errorf("%s: %d %s, want %d %q", c.query, r.code, r.body, c.code, c.message)
			}
		})
	}

	t.Run("the review", func(t *testing.T) {
		for _, path := range []string{"/connect-mutate", "/connect-validate"} {
			rv := a.lastReview(t, path, "pods", "exec")
			want := map[string]any{"operation": "CONNECT", "kind": "/v1/PodExecOptions", "resource": "/v1/pods", "requestKind": "/v1/PodExecOptions",
				"name": "p", "namespace": ns, "object": "v1 PodExecOptions", "oldObject": nil, "options": nil, "dryRun": false}
			got := map[string]any{"operation": rv["operation"], "kind": gvk(rv["kind"]), "resource": gvk(rv["resource"]), "requestKind": gvk(rv["requestKind"]),
				"name": rv["name"], "namespace": rv["namespace"], "object": fmt.Sprint(get(rv, "object", "apiVersion"), " ", get(rv, "object", "kind")),
				"oldObject": rv["oldObject"], "options": rv["options"], "dryRun": rv["dryRun"]}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s got\n%v, want\n%v", path, got, want)
			}
		}
		if rv := a.lastReview(t, "/connect-validate", "pods", "portforward"); fmt.Sprint(get(rv, "object", "ports")) != "[8080 22]" || gvk(rv["kind"]) != "/v1/PodPortForwardOptions" {
			t.Errorf("portforward review: %v", rv)
		}
	})
}

// Admission runs in kube-apiserver's order around the webhooks: the built-in mutating plugins
// (here Priority and LimitRanger's defaults) before the mutating webhooks, so a webhook sees
// their work and what it adds gets none of it; LimitRanger's validation, on the object as the
// webhooks left it, before the validating webhooks.
func TestAdmissionOrderAroundWebhooks(t *testing.T) {
	a := newAdmissionServer(t)
	ns := namespace(t)
	labelForWebhooks(t, ns)
	podRules := map[string]any{"rules": []any{map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}}}}
	class := "high-" + ns
	if r := do(t, "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", map[string]any{"metadata": map[string]any{"name": class}, "value": 1000}); r.code != http.StatusCreated {
		t.Fatalf("create priority class: %d %s", r.code, r.body)
	}
	t.Cleanup(func() { do(t, "DELETE", "/apis/scheduling.k8s.io/v1/priorityclasses/"+class, nil) })
	limits := map[string]any{"metadata": map[string]any{"name": "cpu"}, "spec": map[string]any{"limits": []any{map[string]any{
		"type": "Container", "default": map[string]any{"cpu": "500m"}, "defaultRequest": map[string]any{"cpu": "250m"}, "max": map[string]any{"cpu": "1"}}}}}
	if r := do(t, "POST", "/api/v1/namespaces/"+ns+"/limitranges", limits); r.code != http.StatusCreated {
		t.Fatalf("create limit range: %d %s", r.code, r.body)
	}
	installAdmission(t, mwc, a.webhookConfig("MutatingWebhookConfiguration", "pod-inject", ns, "/pod-inject", podRules))
	installAdmission(t, vwc, a.webhookConfig("ValidatingWebhookConfiguration", "pod-refuse", ns, "/pod-refuse", podRules))
	pod := func(name string, labels map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name, "labels": labels},
			"spec": map[string]any{"priorityClassName": class, "containers": []any{map[string]any{"name": "c", "image": "kplane"}}}}
	}
	pods := "/api/v1/namespaces/" + ns + "/pods"
	seenBy := func(path, name string) map[string]any {
		for _, rv := range a.received(path) {
			if get(rv, "object", "metadata", "name") == name && get(rv, "namespace") == ns {
				return rv
			}
		}
		return nil
	}

	if r := do(t, "POST", pods, pod("plain", nil)); r.code != http.StatusCreated {
		t.Fatalf("create pod: %d %s", r.code, r.body)
	}
	rv := seenBy("/pod-inject", "plain")
	if rv == nil {
		t.Fatal("the mutating webhook was not called")
	}
	if got := get(rv, "object", "spec", "priority"); got != 1000.0 {
		t.Errorf("the mutating webhook saw priority %v, want 1000 (Priority admission runs first)", got)
	}
	if got := get(rv, "object", "spec", "containers", 0, "resources", "limits", "cpu"); got != "500m" {
		t.Errorf("the mutating webhook saw cpu limit %v, want the LimitRange's default 500m", got)
	}

	// The injected container has no limit, which the LimitRange's max requires: LimitRanger
	// refuses the pod before the validating webhook, which would refuse it too, is called.
	r := do(t, "POST", pods, pod("inject", map[string]any{"inject": "yes"}))
	msg, _ := get(r.object(t), "message").(string)
	if r.code != http.StatusForbidden || !strings.Contains(msg, "maximum cpu usage per Container is 1.  No limit is specified") {
		t.Errorf("a pod with an injected container without limits: %d %s", r.code, r.body)
	}
	if seenBy("/pod-inject", "inject") == nil {
		t.Error("the mutating webhook was not called for the refused pod")
	}
	if seenBy("/pod-refuse", "inject") != nil {
		t.Error("the validating webhook was called before LimitRanger's validation")
	}
}

// Webhooks that answer wrongly fail the request per their failurePolicy, naming the webhook;
// a mutating webhook's patch that cannot be applied fails it whatever the policy, as in
// Kubernetes. Nothing is stored from a failed request.
func TestAdmissionWebhookBadAnswers(t *testing.T) {
	a := newAdmissionServer(t)
	ns := namespace(t)
	labelForWebhooks(t, ns)
	cms := "/api/v1/namespaces/" + ns + "/configmaps"
	n := 0
	for _, tc := range []struct {
		kind, path string
		want       string
		ignorable  bool
	}{
		{"ValidatingWebhookConfiguration", "/garbage-text", "failed calling webhook", true},
		{"ValidatingWebhookConfiguration", "/garbage-uid", `received invalid webhook response: expected response.uid=`, true},
		{"ValidatingWebhookConfiguration", "/garbage-absent", "received invalid webhook response: webhook response was absent", true},
		{"ValidatingWebhookConfiguration", "/garbage-patch", "received invalid webhook response: validating webhook may not return response.patch", true},
		{"MutatingWebhookConfiguration", "/garbage-uid", `received invalid webhook response: expected response.uid=`, true},
		{"MutatingWebhookConfiguration", "/garbage-patch", `returned an invalid patch`, false},
	} {
		path := vwc
		if tc.kind == "MutatingWebhookConfiguration" {
			path = mwc
		}
		name := strings.ToLower(strings.TrimSuffix(tc.kind, "WebhookConfiguration")) + strings.TrimPrefix(tc.path, "/garbage")
		t.Run(name, func(t *testing.T) {
			for _, policy := range []string{"Fail", "Ignore"} {
				n++
				cm := fmt.Sprint("cm-", n)
				cfg := a.webhookConfig(tc.kind, name+"-"+strings.ToLower(policy), ns, tc.path, map[string]any{"failurePolicy": policy})
				cfgName := get(cfg, "metadata", "name").(string)
				installAdmission(t, path, cfg)
				r := do(t, "POST", cms, map[string]any{"metadata": map[string]any{"name": cm}})
				if policy == "Ignore" && tc.ignorable {
					if r.code != http.StatusCreated {
						t.Errorf("%s: %d %s", policy, r.code, r.body)
					}
				} else {
					msg, _ := get(r.object(t), "message").(string)
					if r.code != http.StatusInternalServerError || !strings.Contains(msg, `"`+name+"-"+strings.ToLower(policy)+`.example.com"`) || !strings.Contains(msg, tc.want) {
						t.Errorf("%s: got %d %s, want 500 naming the webhook and %q", policy, r.code, r.body, tc.want)
					}
					if r := do(t, "GET", cms+"/"+cm, nil); r.code != http.StatusNotFound {
						t.Errorf("%s: the refused ConfigMap was stored: %d", policy, r.code)
					}
				}
				do(t, "DELETE", path+"/"+cfgName, nil)
			}
		})
	}
}

// A dry run reaches webhooks whose sideEffects allow it, marked dryRun, and stores nothing.
func TestAdmissionWebhookDryRun(t *testing.T) {
	a := newAdmissionServer(t)
	ns := namespace(t)
	labelForWebhooks(t, ns)
	installAdmission(t, vwc, a.webhookConfig("ValidatingWebhookConfiguration", "dry-none", ns, "/record", nil))
	installAdmission(t, mwc, a.webhookConfig("MutatingWebhookConfiguration", "dry-noneondryrun", ns, "/mutate-b", map[string]any{"sideEffects": "NoneOnDryRun"}))
	cms := "/api/v1/namespaces/" + ns + "/configmaps"
	r := do(t, "POST", cms+"?dryRun=All", map[string]any{"metadata": map[string]any{"name": "dry"}})
	if r.code != http.StatusCreated || get(r.object(t), "metadata", "labels", "b") != "set" {
		t.Fatalf("dry-run create: %d %s", r.code, r.body)
	}
	for _, path := range []string{"/record", "/mutate-b"} {
		reviews := a.received(path)
		if len(reviews) != 1 || get(reviews[0], "dryRun") != true || get(reviews[0], "name") != "dry" {
			t.Errorf("%s received %v, want one dry-run request", path, reviews)
		}
	}
	if r := do(t, "GET", cms+"/dry", nil); r.code != http.StatusNotFound {
		t.Errorf("a dry run stored its object: %d", r.code)
	}
}

// A webhook named by a Service reference is reached where the Service points (here an
// ExternalName Service naming localhost), over TLS verified for <service>.<namespace>.svc,
// the name a webhook server's certificate carries in a cluster.
func TestAdmissionWebhookServiceReference(t *testing.T) {
	a := &admissionServer{calls: map[string]int{}, reviews: map[string][]map[string]any{}}
	ns := namespace(t)
	labelForWebhooks(t, ns)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"hooks." + ns + ".svc"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	port, err := strconv.Atoi(a.srv.URL[strings.LastIndex(a.srv.URL, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	svc := map[string]any{"metadata": map[string]any{"name": "hooks"}, "spec": map[string]any{"type": "ExternalName", "externalName": "localhost"}}
	if r := do(t, "POST", "/api/v1/namespaces/"+ns+"/services", svc); r.code != http.StatusCreated {
		t.Fatalf("create service: %d %s", r.code, r.body)
	}
	cfg := a.webhookConfig("ValidatingWebhookConfiguration", "by-service", ns, "/validate", nil)
	hook := get(cfg, "webhooks", 0).(map[string]any)
	hook["clientConfig"] = map[string]any{
		"service":  map[string]any{"namespace": ns, "name": "hooks", "path": "/validate", "port": port},
		"caBundle": base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
	}
	installAdmission(t, vwc, cfg)
	cms := "/api/v1/namespaces/" + ns + "/configmaps"
	r := do(t, "POST", cms, map[string]any{"metadata": map[string]any{"name": "refused"}, "data": map[string]any{"forbidden": "x"}})
	if msg, _ := get(r.object(t), "message").(string); r.code != http.StatusForbidden || !strings.Contains(msg, "no forbidden keys") {
		t.Errorf("refused through the Service: %d %s", r.code, r.body)
	}
	if r := do(t, "POST", cms, map[string]any{"metadata": map[string]any{"name": "admitted"}}); r.code != http.StatusCreated {
		t.Errorf("admitted through the Service: %d %s", r.code, r.body)
	}
	if got := a.count("/validate"); got != 2 {
		t.Errorf("the webhook was called %d times, want 2", got)
	}
}

// A Job changed by a mutating webhook, named by generateName, still gets the selector and
// template labels of its own name and UID: they are generated once the Job has its identity,
// after admission, as Kubernetes generates them.
func TestAdmissionMutatedJobGetsItsSelector(t *testing.T) {
	a := newAdmissionServer(t)
	ns := namespace(t)
	labelForWebhooks(t, ns)
	installAdmission(t, mwc, a.webhookConfig("MutatingWebhookConfiguration", "job-label", ns, "/mutate-b", map[string]any{
		"rules": []any{map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{"batch"}, "apiVersions": []any{"v1"}, "resources": []any{"jobs"}}}}))
	job := map[string]any{"metadata": map[string]any{"generateName": "mutated-"}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "kplane"}}}}}}
	r := do(t, "POST", "/apis/batch/v1/namespaces/"+ns+"/jobs", job)
	if r.code != http.StatusCreated {
		t.Fatalf("create Job: %d %s", r.code, r.body)
	}
	got := r.object(t)
	name, uid := get(got, "metadata", "name"), get(got, "metadata", "uid")
	if get(got, "metadata", "labels", "b") != "set" {
		t.Errorf("the webhook's label is missing: %v", get(got, "metadata", "labels"))
	}
	labels := get(got, "spec", "template", "metadata", "labels")
	if get(labels, "batch.kubernetes.io/job-name") != name || get(labels, "batch.kubernetes.io/controller-uid") != uid ||
		get(got, "spec", "selector", "matchLabels", "batch.kubernetes.io/controller-uid") != uid {
		t.Errorf("name %v uid %v: template labels %v, selector %v", name, uid, labels, get(got, "spec", "selector"))
	}
}

// What the server decides after the mutating webhooks stays the server's: a CSR's requester is
// the request's user whatever a webhook wrote, and a webhook that makes a second PriorityClass
// the global default is refused by the built-in validating admission, which runs after it.
func TestAdmissionAfterWebhooksIsTheServers(t *testing.T) {
	a := newAdmissionServer(t)
	suffix := strings.ToLower(fmt.Sprint(time.Now().UnixNano()))
	cfg := a.webhookConfig("MutatingWebhookConfiguration", "overreach", suffix, "/overreach", map[string]any{
		"namespaceSelector": map[string]any{},
		"objectSelector":    map[string]any{"matchLabels": map[string]any{"overreach": suffix}},
		"rules": []any{
			map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{"certificates.k8s.io"}, "apiVersions": []any{"v1"}, "resources": []any{"certificatesigningrequests"}},
			map[string]any{"operations": []any{"CREATE"}, "apiGroups": []any{"scheduling.k8s.io"}, "apiVersions": []any{"v1"}, "resources": []any{"priorityclasses"}},
		}})
	installAdmission(t, mwc, cfg)
	labels := map[string]any{"overreach": suffix}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csrs := "/apis/certificates.k8s.io/v1/certificatesigningrequests"
	csr := map[string]any{"metadata": map[string]any{"name": "csr-" + suffix, "labels": labels}, "spec": map[string]any{
		"request":    base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
		"signerName": "kubernetes.io/kube-apiserver-client", "usages": []any{"client auth"}}}
	r := do(t, "POST", csrs, csr)
	if r.code != http.StatusCreated {
		t.Fatalf("create CSR: %d %s", r.code, r.body)
	}
	t.Cleanup(func() { do(t, "DELETE", csrs+"/csr-"+suffix, nil) })
	if a.count("/overreach") == 0 {
		t.Fatal("the webhook was not called for the CSR")
	}
	if got := get(r.object(t), "spec", "username"); got == "mallory" {
		t.Errorf("the webhook chose the CSR's requester: %v", got)
	}

	classes := "/apis/scheduling.k8s.io/v1/priorityclasses"
	def := map[string]any{"metadata": map[string]any{"name": "default-" + suffix}, "value": 5, "globalDefault": true}
	if r := do(t, "POST", classes, def); r.code != http.StatusCreated {
		t.Fatalf("create the default class: %d %s", r.code, r.body)
	}
	t.Cleanup(func() { do(t, "DELETE", classes+"/default-"+suffix, nil) })
	r = do(t, "POST", classes, map[string]any{"metadata": map[string]any{"name": "second-" + suffix, "labels": labels}, "value": 6})
	if r.code == http.StatusCreated {
		t.Cleanup(func() { do(t, "DELETE", classes+"/second-"+suffix, nil) })
	}
	if msg, _ := get(r.object(t), "message").(string); r.code != http.StatusForbidden || !strings.Contains(msg, "is already marked as default") {
		t.Errorf("a second default made by a webhook: %d %s", r.code, r.body)
	}
}

// The server gives a new object its identity: a LimitRange named by generateName gets a
// generated name, and a Job sent with a uid gets the server's, its selector with it.
func TestCreateIdentityIsTheServers(t *testing.T) {
	ns := namespace(t)
	r := do(t, "POST", "/api/v1/namespaces/"+ns+"/limitranges", map[string]any{"metadata": map[string]any{"generateName": "limits-"},
		"spec": map[string]any{"limits": []any{map[string]any{"type": "Container", "max": map[string]any{"cpu": "2"}}}}})
	if name, _ := get(r.object(t), "metadata", "name").(string); r.code != http.StatusCreated || !strings.HasPrefix(name, "limits-") {
		t.Errorf("LimitRange by generateName: %d %s", r.code, r.body)
	}
	job := map[string]any{"metadata": map[string]any{"name": "with-uid", "uid": "11111111-2222-3333-4444-555555555555"}, "spec": map[string]any{
		"template": map[string]any{"spec": map[string]any{"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "kplane"}}}}}}
	r = do(t, "POST", "/apis/batch/v1/namespaces/"+ns+"/jobs", job)
	if r.code != http.StatusCreated {
		t.Fatalf("Job sent with a uid: %d %s", r.code, r.body)
	}
	got := r.object(t)
	uid := get(got, "metadata", "uid")
	if uid == "11111111-2222-3333-4444-555555555555" || get(got, "spec", "selector", "matchLabels", "batch.kubernetes.io/controller-uid") != uid {
		t.Errorf("uid %v, selector %v", uid, get(got, "spec", "selector"))
	}
}
