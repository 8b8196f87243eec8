package apiserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// These tests drive ResourceQuota and LimitRange admission over HTTP. No resource quota
// controller runs here: a test writes a quota's status itself, as the controller would have,
// since a quota enforces what its status says.

// quota creates ResourceQuota name with spec.hard and gives it the status the controller
// would: status.hard = hard, status.used = used (nil: no status at all).
func quota(t *testing.T, ns, name string, hard, used map[string]any, spec ...map[string]any) map[string]any {
	t.Helper()
	base := "/api/v1/namespaces/" + ns + "/resourcequotas"
	s := map[string]any{"hard": hard}
	for _, extra := range spec {
		for k, v := range extra {
			s[k] = v
		}
	}
	r := do(t, "POST", base, map[string]any{"metadata": map[string]any{"name": name}, "spec": s})
	if r.code != http.StatusCreated {
		t.Fatalf("create quota: %d %s", r.code, r.body)
	}
	q := r.object(t)
	if used == nil {
		return q
	}
	q["status"] = map[string]any{"hard": hard, "used": used}
	if r = do(t, "PUT", base+"/"+name+"/status", q); r.code != http.StatusOK {
		t.Fatalf("quota status: %d %s", r.code, r.body)
	}
	return r.object(t)
}

func quotaUsed(t *testing.T, ns, name string) map[string]any {
	t.Helper()
	r := do(t, "GET", "/api/v1/namespaces/"+ns+"/resourcequotas/"+name, nil)
	if r.code != http.StatusOK {
		t.Fatalf("get quota: %d %s", r.code, r.body)
	}
	used, _ := get(r.object(t), "status", "used").(map[string]any)
	return used
}

// cpuPod is pod name whose container requests cpu ("" requests nothing).
func cpuPod(name, cpu string) map[string]any {
	p := pod(name)
	if cpu != "" {
		p["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["resources"] =
			map[string]any{"requests": map[string]any{"cpu": cpu}, "limits": map[string]any{"cpu": cpu}}
	}
	return p
}

// expectForbidden checks a 403 Forbidden Status with exactly message, naming the refused object.
func expectForbidden(t *testing.T, r response, kind, name, message string) {
	t.Helper()
	m := r.object(t)
	if r.code != http.StatusForbidden || get(m, "reason") != "Forbidden" || get(m, "code") != 403.0 || get(m, "message") != message ||
		get(m, "details", "kind") != kind || get(m, "details", "name") != name {
		t.Fatalf("want 403 %q: %d %s", message, r.code, r.body)
	}
}

func expectAbsent(t *testing.T, path string) {
	t.Helper()
	if r := do(t, "GET", path, nil); r.code != http.StatusNotFound {
		t.Fatalf("%s stored after a refusal: %d %s", path, r.code, r.body)
	}
}

func TestQuotaDiscoveryAndTable(t *testing.T) {
	r := do(t, "GET", "/api/v1", nil)
	for _, want := range []string{
		`"name":"resourcequotas","singularName":"resourcequota","namespaced":true,"kind":"ResourceQuota"`,
		`"shortNames":["quota"]`, `"name":"resourcequotas/status"`,
		`"name":"limitranges","singularName":"limitrange","namespaced":true,"kind":"LimitRange"`, `"shortNames":["limits"]`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("discovery lacks %s", want)
		}
	}
	ns := namespace(t)
	quota(t, ns, "compute", map[string]any{"pods": "4", "requests.cpu": "2", "limits.cpu": "4"},
		map[string]any{"pods": "1", "requests.cpu": "500m", "limits.cpu": "1"})
	r = do(t, "GET", "/api/v1/namespaces/"+ns+"/resourcequotas", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	tab := r.object(t)
	var cols []string
	for _, c := range get(tab, "columnDefinitions").([]any) {
		cols = append(cols, c.(map[string]any)["name"].(string))
	}
	if strings.Join(cols, ",") != "Name,Request,Limit,Age" {
		t.Errorf("columns %v", cols)
	}
	if cells := get(tab, "rows", 0, "cells").([]any); cells[1] != "pods: 1/4, requests.cpu: 500m/2" || cells[2] != "limits.cpu: 1/4" {
		t.Errorf("cells %v", cells)
	}
}

func TestQuotaRefusesAndCharges(t *testing.T) {
	ns := namespace(t)
	pods := "/api/v1/namespaces/" + ns + "/pods"
	quota(t, ns, "compute", map[string]any{"pods": "1", "requests.cpu": "1"}, map[string]any{"pods": "0", "requests.cpu": "0"})

	// A pod that does not say its cpu request under a quota of requests.cpu.
	expectForbidden(t, do(t, "POST", pods, cpuPod("vague", "")), "pods", "vague",
		`pods "vague" is forbidden: failed quota: compute: must specify requests.cpu for: c`)
	expectAbsent(t, pods+"/vague")

	// A dry run judges, charges nothing, stores nothing.
	if r := do(t, "POST", pods+"?dryRun=All", cpuPod("trial", "500m")); r.code != http.StatusCreated {
		t.Fatalf("dry run: %d %s", r.code, r.body)
	}
	expectAbsent(t, pods+"/trial")
	if used := quotaUsed(t, ns, "compute"); used["pods"] != "0" || used["requests.cpu"] != "0" {
		t.Errorf("dry run charged the quota: %v", used)
	}

	// Admitted, and charged in the same request.
	if r := do(t, "POST", pods, cpuPod("first", "500m")); r.code != http.StatusCreated {
		t.Fatalf("first pod: %d %s", r.code, r.body)
	}
	if used := quotaUsed(t, ns, "compute"); used["pods"] != "1" || used["requests.cpu"] != "500m" {
		t.Errorf("used after the first pod: %v", used)
	}

	// The quota is full: refused with Kubernetes' message, nothing stored, nothing charged.
	expectForbidden(t, do(t, "POST", pods, cpuPod("second", "100m")), "pods", "second",
		`pods "second" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=1, limited: pods=1`)
	expectAbsent(t, pods+"/second")
	if used := quotaUsed(t, ns, "compute"); used["pods"] != "1" || used["requests.cpu"] != "500m" {
		t.Errorf("used after a refusal: %v", used)
	}

	// A generated name is named in the refusal.
	gen := cpuPod("", "100m")
	gen["metadata"].(map[string]any)["generateName"] = "web-"
	delete(gen["metadata"].(map[string]any), "name")
	r := do(t, "POST", pods, gen)
	if m := r.object(t); r.code != http.StatusForbidden || !strings.HasPrefix(get(m, "details", "name").(string), "web-") ||
		!strings.Contains(get(m, "message").(string), "exceeded quota: compute") {
		t.Errorf("generated name: %d %s", r.code, r.body)
	}
}

func TestQuotaCountsAndUpdates(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns
	quota(t, ns, "objects", map[string]any{"count/configmaps": "1", "configmaps": "5", "services.nodeports": "1", "count/deployments.apps": "0"},
		map[string]any{"count/configmaps": "0", "configmaps": "0", "services.nodeports": "0", "count/deployments.apps": "0"})

	cm := func(name string) map[string]any { return map[string]any{"metadata": map[string]any{"name": name}} }
	if r := do(t, "POST", base+"/configmaps", cm("one")); r.code != http.StatusCreated {
		t.Fatalf("configmap: %d %s", r.code, r.body)
	}
	expectForbidden(t, do(t, "POST", base+"/configmaps", cm("two")), "configmaps", "two",
		`configmaps "two" is forbidden: exceeded quota: objects, requested: count/configmaps=1, used: count/configmaps=1, limited: count/configmaps=1`)
	if used := quotaUsed(t, ns, "objects"); used["count/configmaps"] != "1" || used["configmaps"] != "1" {
		t.Errorf("both names charged: %v", used)
	}
	// Updates of counted objects are not charged.
	if r := do(t, "PUT", base+"/configmaps/one", map[string]any{"metadata": map[string]any{"name": "one"}, "data": map[string]any{"a": "b"}}); r.code != http.StatusOK {
		t.Errorf("configmap update: %d %s", r.code, r.body)
	}
	// Any resource, by count/<resource>.<group>.
	r := do(t, "POST", "/apis/apps/v1/namespaces/"+ns+"/deployments", map[string]any{"metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}}, "spec": pod("x")["spec"]}}})
	expectForbidden(t, r, "deployments", "web",
		`deployments.apps "web" is forbidden: exceeded quota: objects, requested: count/deployments.apps=1, used: count/deployments.apps=0, limited: count/deployments.apps=0`)

	// A service turned into a NodePort is charged its ports; refused, the stored one stays.
	svc := map[string]any{"metadata": map[string]any{"name": "web"}, "spec": map[string]any{"ports": []any{
		map[string]any{"name": "a", "port": 80}, map[string]any{"name": "b", "port": 81}}}}
	if r := do(t, "POST", base+"/services", svc); r.code != http.StatusCreated {
		t.Fatalf("service: %d %s", r.code, r.body)
	}
	r = do(t, "PATCH", base+"/services/web", `{"spec":{"type":"NodePort"}}`, "Content-Type", "application/merge-patch+json")
	expectForbidden(t, r, "services", "web",
		`services "web" is forbidden: exceeded quota: objects, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1`)
	if r := do(t, "GET", base+"/services/web", nil); get(r.object(t), "spec", "type") != "ClusterIP" {
		t.Errorf("refused update stored: %s", r.body)
	}
}

// TestQuotaPodUpdate: a deadline set on a running pod moves it into the Terminating scope, whose
// quota must have room for it.
func TestQuotaPodUpdate(t *testing.T) {
	ns := namespace(t)
	pods := "/api/v1/namespaces/" + ns + "/pods"
	quota(t, ns, "short", map[string]any{"pods": "0"}, map[string]any{"pods": "0"}, map[string]any{"scopes": []any{"Terminating"}})
	if r := do(t, "POST", pods, pod("web")); r.code != http.StatusCreated {
		t.Fatalf("pod outside the scope: %d %s", r.code, r.body)
	}
	r := do(t, "PATCH", pods+"/web", `{"spec":{"activeDeadlineSeconds":60}}`, "Content-Type", "application/merge-patch+json")
	expectForbidden(t, r, "pods", "web", `pods "web" is forbidden: exceeded quota: short, requested: pods=1, used: pods=0, limited: pods=0`)
	if r := do(t, "GET", pods+"/web", nil); get(r.object(t), "spec", "activeDeadlineSeconds") != nil {
		t.Errorf("refused update stored: %s", r.body)
	}
}

func TestQuotaStatusUnknown(t *testing.T) {
	ns := namespace(t)
	// A quota the controller has not counted yet enforces nothing (its status is empty)...
	quota(t, ns, "fresh", map[string]any{"pods": "0"}, nil)
	if r := do(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod("early")); r.code != http.StatusCreated {
		t.Fatalf("pod under an uncounted quota: %d %s", r.code, r.body)
	}
	// ...but one that enforces a limit it has no usage for refuses: nothing says what is left.
	q := quota(t, ns, "half", map[string]any{"pods": "5"}, nil)
	q["status"] = map[string]any{"hard": map[string]any{"pods": "5"}}
	if r := do(t, "PUT", "/api/v1/namespaces/"+ns+"/resourcequotas/half/status", q); r.code != http.StatusOK {
		t.Fatalf("status: %d %s", r.code, r.body)
	}
	expectForbidden(t, do(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod("late")), "pods", "late",
		`pods "late" is forbidden: status unknown for quota: half, resources: pods`)
}

// TestQuotaConcurrentCreates races creates for a quota's last unit: exactly one wins, however
// they interleave, and the quota counts exactly it.
func TestQuotaConcurrentCreates(t *testing.T) {
	ns := namespace(t)
	quota(t, ns, "one", map[string]any{"pods": "1"}, map[string]any{"pods": "0"})
	const n = 12
	codes := make([]int, n)
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			data, _ := json.Marshal(pod(fmt.Sprintf("racer-%d", i)))
			resp, err := http.Post(server.URL+"/api/v1/namespaces/"+ns+"/pods", "application/json", bytes.NewReader(data))
			if err != nil {
				bodies[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			codes[i], bodies[i] = resp.StatusCode, string(body)
		})
	}
	wg.Wait()
	won := 0
	for i := range n {
		switch {
		case codes[i] == http.StatusCreated:
			won++
		case codes[i] == http.StatusForbidden && strings.Contains(bodies[i], "exceeded quota: one, requested: pods=1, used: pods=1, limited: pods=1"):
		default:
			t.Errorf("racer %d: %d %s", i, codes[i], bodies[i])
		}
	}
	if won != 1 {
		t.Errorf("%d creates won the last unit, want 1", won)
	}
	r := do(t, "GET", "/api/v1/namespaces/"+ns+"/pods", nil)
	if items := get(r.object(t), "items").([]any); len(items) != 1 {
		t.Errorf("%d pods stored, want 1", len(items))
	}
	if used := quotaUsed(t, ns, "one"); used["pods"] != "1" {
		t.Errorf("used %v, want pods=1", used)
	}
}

func TestLimitRangeAdmissionOverHTTP(t *testing.T) {
	ns := namespace(t)
	base := "/api/v1/namespaces/" + ns
	// Invalid ranges are refused with Kubernetes' words.
	r := do(t, "POST", base+"/limitranges", map[string]any{"metadata": map[string]any{"name": "bad"}, "spec": map[string]any{"limits": []any{
		map[string]any{"type": "Container", "max": map[string]any{"cpu": "1"}, "default": map[string]any{"cpu": "2"}}}}})
	if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "default value 2 is greater than max value 1") {
		t.Fatalf("invalid range: %d %s", r.code, r.body)
	}
	expectAbsent(t, base+"/limitranges/bad")

	r = do(t, "POST", base+"/limitranges", map[string]any{"metadata": map[string]any{"name": "limits"}, "spec": map[string]any{"limits": []any{
		map[string]any{"type": "Container", "max": map[string]any{"cpu": "500m"}, "default": map[string]any{"cpu": "300m", "memory": "128Mi"},
			"defaultRequest": map[string]any{"cpu": "100m", "memory": "64Mi"}},
		map[string]any{"type": "PersistentVolumeClaim", "max": map[string]any{"storage": "1Gi"}}}}})
	if r.code != http.StatusCreated {
		t.Fatalf("limit range: %d %s", r.code, r.body)
	}
	// A quota that requires cpu requests: the range's defaults satisfy it (LimitRanger runs first).
	quota(t, ns, "compute", map[string]any{"requests.cpu": "1"}, map[string]any{"requests.cpu": "0"})

	r = do(t, "POST", base+"/pods", pod("plain"))
	if r.code != http.StatusCreated {
		t.Fatalf("pod: %d %s", r.code, r.body)
	}
	p := r.object(t)
	res := get(p, "spec", "containers", 0, "resources")
	if get(res, "requests", "cpu") != "100m" || get(res, "limits", "cpu") != "300m" || get(res, "requests", "memory") != "64Mi" ||
		get(p, "status", "qosClass") != "Burstable" ||
		get(p, "metadata", "annotations", "kubernetes.io/limit-ranger") != "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c" {
		t.Errorf("defaults: %v qos %v annotations %v", res, get(p, "status", "qosClass"), get(p, "metadata", "annotations"))
	}
	if used := quotaUsed(t, ns, "compute"); used["requests.cpu"] != "100m" {
		t.Errorf("quota charged the defaulted request: %v", used)
	}

	// Over the max: 403, nothing stored, nothing charged.
	expectForbidden(t, do(t, "POST", base+"/pods", cpuPod("greedy", "1")), "pods", "greedy",
		`pods "greedy" is forbidden: maximum cpu usage per Container is 500m, but limit is 1`)
	expectAbsent(t, base+"/pods/greedy")
	if used := quotaUsed(t, ns, "compute"); used["requests.cpu"] != "100m" {
		t.Errorf("a refused pod charged: %v", used)
	}

	claim := map[string]any{"metadata": map[string]any{"name": "data"}, "spec": map[string]any{"accessModes": []any{"ReadWriteOnce"},
		"storageClassName": "", "resources": map[string]any{"requests": map[string]any{"storage": "2Gi"}}}}
	expectForbidden(t, do(t, "POST", base+"/persistentvolumeclaims", claim), "persistentvolumeclaims", "data",
		`persistentvolumeclaims "data" is forbidden: maximum storage usage per PersistentVolumeClaim is 1Gi, but request is 2Gi`)
	expectAbsent(t, base+"/persistentvolumeclaims/data")

	r = do(t, "GET", base+"/limitranges", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if cols := get(r.object(t), "columnDefinitions"); get(cols, 1, "name") != "Created At" || get(cols, 1, "type") != "date" {
		t.Errorf("limitrange columns %v", cols)
	}
}
