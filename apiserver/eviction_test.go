package apiserver_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kplane/kplane/apiserver/registry"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// These tests drive pods/eviction over HTTP. No disruption controller runs here: each test
// writes the budget's status itself, as the controller would have.

// evictionOf is the Eviction body for pod name (policy/v1 unless apiVersion says otherwise).
func evictionOf(name string, extra ...map[string]any) map[string]any {
	e := map[string]any{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]any{"name": name}}
	for _, x := range extra {
		for k, v := range x {
			e[k] = v
		}
	}
	return e
}

// runningPod creates pod name labelled app=web and, as its node would, reports it Running
// (Ready or not). It is not bound, so a deletion removes it at once.
func runningPod(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	base := "/api/v1/namespaces/" + ns + "/pods"
	r := do(t, "POST", base, pod(name))
	if r.code != 201 {
		t.Fatalf("create pod %s: %d %s", name, r.code, r.body)
	}
	p := r.object(t)
	status := "False"
	if ready {
		status = "True"
	}
	p["status"] = map[string]any{"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": status}}}
	if r := do(t, "PUT", base+"/"+name+"/status", p); r.code != 200 {
		t.Fatalf("pod %s status: %d %s", name, r.code, r.body)
	}
}

// budget creates PodDisruptionBudget name selecting app=web with spec, and gives it status (as
// the controller would; nil leaves it unsynced).
func budget(t *testing.T, ns, name string, spec, status map[string]any) map[string]any {
	t.Helper()
	base := "/apis/policy/v1/namespaces/" + ns + "/poddisruptionbudgets"
	spec["selector"] = map[string]any{"matchLabels": map[string]any{"app": "web"}}
	r := do(t, "POST", base, map[string]any{"metadata": map[string]any{"name": name}, "spec": spec})
	if r.code != 201 {
		t.Fatalf("create budget: %d %s", r.code, r.body)
	}
	b := r.object(t)
	if status == nil {
		return b
	}
	status["observedGeneration"] = get(b, "metadata", "generation")
	b["status"] = status
	r = do(t, "PUT", base+"/"+name+"/status", b)
	if r.code != 200 {
		t.Fatalf("budget status: %d %s", r.code, r.body)
	}
	return r.object(t)
}

func readBudget(t *testing.T, ns, name string) map[string]any {
	t.Helper()
	r := do(t, "GET", "/apis/policy/v1/namespaces/"+ns+"/poddisruptionbudgets/"+name, nil)
	if r.code != 200 {
		t.Fatalf("get budget: %d %s", r.code, r.body)
	}
	return r.object(t)
}

func evict(t *testing.T, ns, name string, body any, query string) response {
	t.Helper()
	path := "/api/v1/namespaces/" + ns + "/pods/" + name + "/eviction"
	if query != "" {
		path += "?" + query
	}
	return do(t, "POST", path, body)
}

// expectEvicted checks a 201 Success Status and that the pod is gone.
func expectEvicted(t *testing.T, ns, name string, r response) {
	t.Helper()
	if m := r.object(t); r.code != 201 || get(m, "kind") != "Status" || get(m, "status") != "Success" || get(m, "code") != 201.0 {
		t.Fatalf("evict %s: %d %s", name, r.code, r.body)
	}
	if r := do(t, "GET", "/api/v1/namespaces/"+ns+"/pods/"+name, nil); r.code != 404 {
		t.Fatalf("evicted pod %s still there: %d %s", name, r.code, r.body)
	}
}

// expectRefused checks a 429 with Kubernetes' message and one DisruptionBudget cause
// containing cause.
func expectRefused(t *testing.T, r response, cause string) {
	t.Helper()
	m := r.object(t)
	if r.code != 429 || get(m, "reason") != "TooManyRequests" || get(m, "message") != "Cannot evict pod as it would violate the pod's disruption budget." ||
		get(m, "details", "causes", 0, "reason") != "DisruptionBudget" || !strings.Contains(get(m, "details", "causes", 0, "message").(string), cause) {
		t.Fatalf("want 429 with cause %q: %d %s", cause, r.code, r.body)
	}
}

func TestEvictionDiscoveryAndTable(t *testing.T) {
	r := do(t, "GET", "/api/v1", nil)
	if !strings.Contains(string(r.body), `{"name":"pods/eviction","singularName":"","namespaced":true,"group":"policy","version":"v1","kind":"Eviction","verbs":["create"]}`) {
		t.Errorf("pods/eviction not in discovery as kubectl drain looks for it: %s", r.body)
	}
	r = do(t, "GET", "/apis/policy/v1", nil)
	if !strings.Contains(string(r.body), `"name":"poddisruptionbudgets","singularName":"poddisruptionbudget","namespaced":true,"kind":"PodDisruptionBudget"`) ||
		!strings.Contains(string(r.body), `"shortNames":["pdb"]`) || !strings.Contains(string(r.body), `"name":"poddisruptionbudgets/status"`) {
		t.Errorf("policy/v1 discovery: %s", r.body)
	}
	ns := namespace(t)
	budget(t, ns, "web", map[string]any{"maxUnavailable": "30%"}, map[string]any{"disruptionsAllowed": 2})
	r = do(t, "GET", "/apis/policy/v1/namespaces/"+ns+"/poddisruptionbudgets", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if cells := get(r.object(t), "rows", 0, "cells"); r.code != 200 || get(cells, 0) != "web" || get(cells, 1) != "N/A" || get(cells, 2) != "30%" || get(cells, 3) != 2.0 {
		t.Errorf("table: %d %s", r.code, r.body)
	}
	r = do(t, "POST", "/apis/policy/v1/namespaces/"+ns+"/poddisruptionbudgets", map[string]any{"metadata": map[string]any{"name": "bad"},
		"spec": map[string]any{"minAvailable": 1, "maxUnavailable": "120%"}})
	if m := r.object(t); r.code != 422 || !strings.Contains(get(m, "message").(string), "minAvailable and maxUnavailable cannot be both set") ||
		!strings.Contains(get(m, "message").(string), "must not be greater than 100%") {
		t.Errorf("invalid budget: %d %s", r.code, r.body)
	}
}

// TestEvictionBudget: with one disruption allowed, the first eviction goes through and takes
// it (decremented, recorded in disruptedPods, the pod marked and deleted); the next is refused
// with 429 and changes nothing.
func TestEvictionBudget(t *testing.T) {
	ns := namespace(t)
	runningPod(t, ns, "p1", true)
	runningPod(t, ns, "p2", true)
	budget(t, ns, "web", map[string]any{"minAvailable": 1}, map[string]any{
		"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2})

	// A dry run answers as the real one would and writes nothing.
	before := readBudget(t, ns, "web")
	r := evict(t, ns, "p1", evictionOf("p1"), "dryRun=All")
	if r.code != 201 {
		t.Fatalf("dry run: %d %s", r.code, r.body)
	}
	if after := readBudget(t, ns, "web"); get(after, "metadata", "resourceVersion") != get(before, "metadata", "resourceVersion") {
		t.Fatalf("dry run changed the budget: %v", after)
	}
	if r := do(t, "GET", "/api/v1/namespaces/"+ns+"/pods/p1", nil); r.code != 200 || get(r.object(t), "metadata", "deletionTimestamp") != nil {
		t.Fatalf("dry run deleted the pod: %d %s", r.code, r.body)
	}

	expectEvicted(t, ns, "p1", evict(t, ns, "p1", evictionOf("p1"), ""))
	b := readBudget(t, ns, "web")
	if get(b, "status", "disruptionsAllowed") != 0.0 || get(b, "status", "disruptedPods", "p1") == nil ||
		get(b, "status", "conditions", 0, "reason") != "InsufficientPods" || get(b, "status", "conditions", 0, "status") != "False" {
		t.Fatalf("budget after the eviction: %v", b["status"])
	}

	rv := get(readBudget(t, ns, "web"), "metadata", "resourceVersion")
	expectRefused(t, evict(t, ns, "p2", evictionOf("p2"), ""), "The disruption budget web does not allow evicting pods currently")
	if got := get(readBudget(t, ns, "web"), "metadata", "resourceVersion"); got != rv {
		t.Errorf("a refused eviction wrote the budget")
	}
	if r := do(t, "GET", "/api/v1/namespaces/"+ns+"/pods/p2", nil); r.code != 200 || get(r.object(t), "metadata", "deletionTimestamp") != nil ||
		strings.Contains(string(r.body), "DisruptionTarget") {
		t.Fatalf("a refused eviction touched the pod: %d %s", r.code, r.body)
	}
}

// TestConcurrentEvictions: evictions racing for a budget's disruptions get no more than it
// has, because each takes one in a conflict-checked write of the budget's status.
func TestConcurrentEvictions(t *testing.T) {
	ns := namespace(t)
	names := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	for _, n := range names {
		runningPod(t, ns, n, true)
	}
	budget(t, ns, "web", map[string]any{"minAvailable": 4}, map[string]any{
		"disruptionsAllowed": 2, "currentHealthy": 6, "desiredHealthy": 4, "expectedPods": 6})
	codes := make(chan int, len(names))
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			// Not evict: a failing request must not end the test from this goroutine.
			body, _ := json.Marshal(evictionOf(n))
			resp, err := http.Post(server.URL+"/api/v1/namespaces/"+ns+"/pods/"+n+"/eviction", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[201] != 2 || got[429] != 4 {
		t.Errorf("answers %v, want two 201 and four 429", got)
	}
	b := readBudget(t, ns, "web")
	if get(b, "status", "disruptionsAllowed") != 0.0 || len(get(b, "status", "disruptedPods").(map[string]any)) != 2 {
		t.Errorf("budget after the race: %v", b["status"])
	}
}

// TestEvictionWithoutBudgetCheck: pods that are not running, and unready pods whose budget
// says so, go without using a disruption; a pod without budget goes too.
func TestEvictionWithoutBudgetCheck(t *testing.T) {
	ns := namespace(t)
	budget(t, ns, "web", map[string]any{"minAvailable": 2}, map[string]any{"currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 3})
	// Pending (never reported by a node).
	if r := do(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod("pending")); r.code != 201 {
		t.Fatal(r.code)
	}
	expectEvicted(t, ns, "pending", evict(t, ns, "pending", evictionOf("pending"), ""))
	// Unready, with the budget met without it (IfHealthyBudget, the default).
	runningPod(t, ns, "unready", false)
	expectEvicted(t, ns, "unready", evict(t, ns, "unready", evictionOf("unready"), ""))
	// A ready one needs a disruption the budget does not have.
	runningPod(t, ns, "ready", true)
	expectRefused(t, evict(t, ns, "ready", evictionOf("ready"), ""), "The disruption budget web needs 2 healthy pods and has 2 currently")

	// Below its budget, an unready pod stays under IfHealthyBudget and goes under AlwaysAllow.
	ns2 := namespace(t)
	b := budget(t, ns2, "web", map[string]any{"minAvailable": 2}, map[string]any{"currentHealthy": 1, "desiredHealthy": 2, "expectedPods": 2})
	runningPod(t, ns2, "unready", false)
	expectRefused(t, evict(t, ns2, "unready", evictionOf("unready"), ""), "needs 2 healthy pods and has 1 currently")
	b["spec"].(map[string]any)["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
	r := do(t, "PUT", "/apis/policy/v1/namespaces/"+ns2+"/poddisruptionbudgets/web", b)
	if r.code != 200 {
		t.Fatalf("update budget: %d %s", r.code, r.body)
	}
	expectEvicted(t, ns2, "unready", evict(t, ns2, "unready", evictionOf("unready"), ""))

	// No budget at all; and a policy/v1beta1 body, which older clients send.
	ns3 := namespace(t)
	runningPod(t, ns3, "free", true)
	expectEvicted(t, ns3, "free", evict(t, ns3, "free", evictionOf("free", map[string]any{"apiVersion": "policy/v1beta1"}), ""))

	// A protobuf body, as client-go's typed clients (kubectl drain) send it.
	runningPod(t, ns3, "pb", true)
	var buf bytes.Buffer
	ev := &policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"}, ObjectMeta: metav1.ObjectMeta{Name: "pb", Namespace: ns3}}
	if err := protobuf.NewSerializer(registry.Scheme, registry.Scheme).Encode(ev, &buf); err != nil {
		t.Fatal(err)
	}
	expectEvicted(t, ns3, "pb", do(t, "POST", "/api/v1/namespaces/"+ns3+"/pods/pb/eviction", buf.Bytes(), "Content-Type", "application/vnd.kubernetes.protobuf"))

	// A pod on a node is marked as disrupted by the eviction and left to its node to stop,
	// within the grace period the eviction asks for.
	runningPod(t, ns3, "bound", true)
	binding := map[string]any{"apiVersion": "v1", "kind": "Binding", "metadata": map[string]any{"name": "bound"}, "target": map[string]any{"kind": "Node", "name": "node-1"}}
	if r := do(t, "POST", "/api/v1/namespaces/"+ns3+"/pods/bound/binding", binding); r.code != 201 {
		t.Fatalf("bind: %d %s", r.code, r.body)
	}
	r = evict(t, ns3, "bound", evictionOf("bound", map[string]any{"deleteOptions": map[string]any{"gracePeriodSeconds": 7}}), "")
	if r.code != 201 {
		t.Fatalf("evict bound: %d %s", r.code, r.body)
	}
	p := do(t, "GET", "/api/v1/namespaces/"+ns3+"/pods/bound", nil).object(t)
	var target any
	for _, c := range get(p, "status", "conditions").([]any) {
		if get(c, "type") == "DisruptionTarget" {
			target = c
		}
	}
	if get(p, "metadata", "deletionGracePeriodSeconds") != 7.0 || get(target, "status") != "True" ||
		get(target, "reason") != "EvictionByEvictionAPI" || get(target, "message") != "Eviction API: evicting" {
		t.Errorf("evicted bound pod: %v %v", p["metadata"], p["status"])
	}
}

// TestEvictionStaleOrAmbiguousBudget: a budget whose status predates its spec refuses with a
// Retry-After; two budgets over one pod are an error.
func TestEvictionStaleOrAmbiguousBudget(t *testing.T) {
	ns := namespace(t)
	runningPod(t, ns, "p", true)
	budget(t, ns, "web", map[string]any{"minAvailable": 0}, nil)
	r := evict(t, ns, "p", evictionOf("p"), "")
	expectRefused(t, r, "The disruption budget web is still being processed by the server.")
	if r.header.Get("Retry-After") != "10" || get(r.object(t), "details", "retryAfterSeconds") != 10.0 {
		t.Errorf("retry after: %q %s", r.header.Get("Retry-After"), r.body)
	}
	budget(t, ns, "other", map[string]any{"maxUnavailable": 1}, map[string]any{"disruptionsAllowed": 1})
	r = evict(t, ns, "p", evictionOf("p"), "")
	if m := r.object(t); r.code != 500 || get(m, "message") != "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support." {
		t.Errorf("two budgets: %d %s", r.code, r.body)
	}
}

// TestEvictionBadInput: Kubernetes' statuses, and nothing changed.
func TestEvictionBadInput(t *testing.T) {
	ns := namespace(t)
	runningPod(t, ns, "p", true)
	for _, tc := range []struct {
		name   string
		pod    string
		body   any
		query  string
		code   int
		reason string
		msg    string
	}{
		{"no such pod", "missing", evictionOf("missing"), "", 404, "NotFound", `pods "missing" not found`},
		{"name mismatch", "p", evictionOf("q"), "", 400, "BadRequest", "name in URL does not match name in Eviction object"},
		{"namespace mismatch", "p", evictionOf("p", map[string]any{"metadata": map[string]any{"name": "p", "namespace": "elsewhere"}}), "", 400, "BadRequest",
			"the namespace of the provided object does not match the namespace sent on the request"},
		{"a pod, not an eviction", "p", pod("p"), "", 400, "BadRequest", `Pod in version "v1" cannot be handled as a Eviction`},
		{"empty body", "p", "", "", 400, "BadRequest", "the request body is empty"},
		{"unknown field, strict", "p", evictionOf("p", map[string]any{"bogus": 1}), "fieldValidation=Strict", 400, "BadRequest", `unknown field "bogus"`},
		{"bad propagation policy", "p", evictionOf("p", map[string]any{"deleteOptions": map[string]any{"propagationPolicy": "Sideways"}}), "", 422, "Invalid",
			"propagationPolicy: Unsupported value"},
		{"store read errors", "p", evictionOf("p", map[string]any{"deleteOptions": map[string]any{"ignoreStoreReadErrorWithClusterBreakingPotential": true}}), "",
			422, "Invalid", "can not be set for pod eviction"},
		{"stale precondition", "p", evictionOf("p", map[string]any{"deleteOptions": map[string]any{"preconditions": map[string]any{"resourceVersion": "1"}}}), "",
			409, "Conflict", "the ResourceVersion in the precondition (1) does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := evict(t, ns, tc.pod, tc.body, tc.query)
			m := r.object(t)
			if r.code != tc.code || get(m, "reason") != tc.reason || !strings.Contains(get(m, "message").(string), tc.msg) {
				t.Errorf("%d %s, want %d %s %q", r.code, r.body, tc.code, tc.reason, tc.msg)
			}
		})
	}
	// A precondition the pod fails is refused before its budget pays for the eviction.
	budget(t, ns, "web", map[string]any{"maxUnavailable": 1}, map[string]any{"disruptionsAllowed": 1, "currentHealthy": 1, "expectedPods": 1})
	rv := get(readBudget(t, ns, "web"), "metadata", "resourceVersion")
	r := evict(t, ns, "p", evictionOf("p", map[string]any{"deleteOptions": map[string]any{"preconditions": map[string]any{"uid": "0000-other"}}}), "")
	if r.code != 409 || !strings.Contains(string(r.body), "the UID in the precondition (0000-other) does not match") {
		t.Errorf("stale UID: %d %s", r.code, r.body)
	}
	if get(readBudget(t, ns, "web"), "metadata", "resourceVersion") != rv {
		t.Errorf("a refused eviction wrote the budget")
	}
	if r := do(t, "GET", "/api/v1/namespaces/"+ns+"/pods/p/eviction", nil); r.code != http.StatusMethodNotAllowed {
		t.Errorf("GET eviction: %d %s", r.code, r.body)
	}
	r = do(t, "GET", "/api/v1/namespaces/"+ns+"/pods/p", nil)
	if r.code != 200 || get(r.object(t), "metadata", "deletionTimestamp") != nil || strings.Contains(string(r.body), "DisruptionTarget") {
		t.Errorf("bad evictions changed the pod: %s", r.body)
	}
}
