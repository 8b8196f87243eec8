package apiserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

const (
	hpaV1 = "/apis/autoscaling/v1/namespaces/"
	hpaV2 = "/apis/autoscaling/v2/namespaces/"
	table = "application/json;as=Table;v=v1;g=meta.k8s.io"
)

// TestHPAVersions: one HorizontalPodAutoscaler, read and written through autoscaling/v2 and
// autoscaling/v1: the same object (one resourceVersion, one watch history), v2 preferred in
// discovery, what v1 cannot say carried in its annotations and kept by v1 writes.
func TestHPAVersions(t *testing.T) {
	r := do(t, "GET", "/apis/autoscaling", nil)
	var group struct {
		Versions         []struct{ GroupVersion string }
		PreferredVersion struct{ GroupVersion string }
	}
	if err := json.Unmarshal(r.body, &group); err != nil || r.code != 200 || len(group.Versions) != 2 ||
		group.Versions[0].GroupVersion != "autoscaling/v2" || group.Versions[1].GroupVersion != "autoscaling/v1" ||
		group.PreferredVersion.GroupVersion != "autoscaling/v2" {
		t.Errorf("/apis/autoscaling: %d %s", r.code, r.body)
	}
	if n := strings.Count(string(do(t, "GET", "/apis", nil).body), `"name":"autoscaling"`); n != 1 {
		t.Errorf("/apis lists autoscaling %d times", n)
	}
	for _, gv := range []string{"v1", "v2"} {
		body := string(do(t, "GET", "/apis/autoscaling/"+gv, nil).body)
		for _, want := range []string{`"name":"horizontalpodautoscalers","singularName":"horizontalpodautoscaler"`, `"shortNames":["hpa"]`,
			`"categories":["all"]`, `"name":"horizontalpodautoscalers/status"`} {
			if !strings.Contains(body, want) {
				t.Errorf("/apis/autoscaling/%s lacks %s: %s", gv, want, body)
			}
		}
	}

	ns := namespace(t)
	// Created through v1 with a CPU target: v2 shows it as a cpu Resource metric.
	r = do(t, "POST", hpaV1+ns+"/horizontalpodautoscalers", `{"metadata":{"name":"web"},"spec":{
		"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"maxReplicas":4,"targetCPUUtilizationPercentage":50}}`)
	if r.code != http.StatusCreated {
		t.Fatalf("create v1: %d %s", r.code, r.body)
	}
	created := r.object(t)
	if get(created, "apiVersion") != "autoscaling/v1" || get(created, "spec", "minReplicas") != 1.0 {
		t.Errorf("created %v", created)
	}
	v2 := do(t, "GET", hpaV2+ns+"/horizontalpodautoscalers/web", nil).object(t)
	if get(v2, "apiVersion") != "autoscaling/v2" || get(v2, "spec", "metrics", 0, "resource", "name") != "cpu" ||
		get(v2, "spec", "metrics", 0, "resource", "target", "averageUtilization") != 50.0 ||
		get(v2, "metadata", "resourceVersion") != get(created, "metadata", "resourceVersion") || get(v2, "metadata", "uid") != get(created, "metadata", "uid") {
		t.Errorf("v2 view of the v1 object: %v", v2)
	}

	// What only v2 can say (a memory target, a behavior) comes through v1 in annotations, and a
	// v1 client writing back what it read keeps it.
	r = do(t, "PUT", hpaV2+ns+"/horizontalpodautoscalers/web", `{"metadata":{"name":"web"},"spec":{
		"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"maxReplicas":4,
		"metrics":[{"type":"Resource","resource":{"name":"memory","target":{"type":"AverageValue","averageValue":"100Mi"}}},
		           {"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":60}}}],
		"behavior":{"scaleDown":{"stabilizationWindowSeconds":5}}}}`)
	if r.code != 200 {
		t.Fatalf("update v2: %d %s", r.code, r.body)
	}
	watch := startWatch(t, hpaV1+ns+"/horizontalpodautoscalers?watch=true&resourceVersion="+get(r.object(t), "metadata", "resourceVersion").(string))
	v1 := do(t, "GET", hpaV1+ns+"/horizontalpodautoscalers/web", nil).object(t)
	if get(v1, "spec", "targetCPUUtilizationPercentage") != 60.0 || !strings.Contains(get(v1, "metadata", "annotations", "autoscaling.alpha.kubernetes.io/metrics").(string), `"100Mi"`) ||
		!strings.Contains(get(v1, "metadata", "annotations", "autoscaling.alpha.kubernetes.io/behavior").(string), `"StabilizationWindowSeconds":5`) {
		t.Fatalf("v1 view: %v", v1)
	}
	v1["spec"].(map[string]any)["maxReplicas"] = 6
	if r = do(t, "PUT", hpaV1+ns+"/horizontalpodautoscalers/web", v1); r.code != 200 {
		t.Fatalf("update v1: %d %s", r.code, r.body)
	}
	v2 = do(t, "GET", hpaV2+ns+"/horizontalpodautoscalers/web", nil).object(t)
	if get(v2, "spec", "maxReplicas") != 6.0 || get(v2, "spec", "metrics", 0, "resource", "name") != "memory" ||
		get(v2, "spec", "behavior", "scaleDown", "stabilizationWindowSeconds") != 5.0 || get(v2, "metadata", "annotations") != nil ||
		get(v2, "metadata", "generation") != 3.0 {
		t.Errorf("v2 after the v1 write: %v", v2)
	}
	if ev := watch.next(t); ev.Type != "MODIFIED" || get(ev.Object, "apiVersion") != "autoscaling/v1" || get(ev.Object, "spec", "maxReplicas") != 6.0 {
		t.Errorf("v1 watch event %v", ev)
	}

	// A status written through v2 shows in v1's fields and annotations; a v1 status write
	// keeps the spec's annotations.
	v2["status"] = map[string]any{"currentReplicas": 2, "desiredReplicas": 3,
		"currentMetrics": []any{map[string]any{"type": "Resource", "resource": map[string]any{"name": "cpu", "current": map[string]any{"averageUtilization": 90, "averageValue": "90m"}}}},
		"conditions":     []any{map[string]any{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}}}
	if r = do(t, "PUT", hpaV2+ns+"/horizontalpodautoscalers/web/status", v2); r.code != 200 {
		t.Fatalf("status v2: %d %s", r.code, r.body)
	}
	v1 = do(t, "GET", hpaV1+ns+"/horizontalpodautoscalers/web", nil).object(t)
	if get(v1, "status", "currentCPUUtilizationPercentage") != 90.0 || get(v1, "status", "desiredReplicas") != 3.0 ||
		!strings.Contains(get(v1, "metadata", "annotations", "autoscaling.alpha.kubernetes.io/conditions").(string), "SucceededRescale") {
		t.Errorf("v1 status view: %v", v1)
	}
	v1["status"].(map[string]any)["desiredReplicas"] = 2
	if r = do(t, "PUT", hpaV1+ns+"/horizontalpodautoscalers/web/status", v1); r.code != 200 {
		t.Fatalf("status v1: %d %s", r.code, r.body)
	}
	v2 = do(t, "GET", hpaV2+ns+"/horizontalpodautoscalers/web", nil).object(t)
	if get(v2, "status", "desiredReplicas") != 2.0 || get(v2, "status", "conditions", 0, "reason") != "SucceededRescale" ||
		get(v2, "spec", "metrics", 0, "resource", "name") != "memory" || get(v2, "spec", "behavior") == nil {
		t.Errorf("v2 after the v1 status write: %v", v2)
	}

	// kubectl's columns, from either version.
	for _, base := range []string{hpaV1, hpaV2} {
		tab := do(t, "GET", base+ns+"/horizontalpodautoscalers", nil, "Accept", table).object(t)
		var names []string
		for _, c := range get(tab, "columnDefinitions").([]any) {
			names = append(names, get(c, "name").(string))
		}
		if strings.Join(names, " ") != "Name Reference Targets MinPods MaxPods Replicas Age" {
			t.Errorf("%s columns %v", base, names)
		}
		cells := get(tab, "rows", 0, "cells").([]any)
		// Statuses pair with metrics by position, as kubectl's printer pairs them: the one
		// written above (a cpu status) stands first.
		if cells[1] != "Deployment/web" || cells[2] != "memory: 90m/100Mi, cpu: <unknown>/60%" || cells[3] != "1" || cells[4] != 6.0 || cells[5] != 2.0 {
			t.Errorf("%s row %v", base, cells)
		}
	}

	// Bad input through v1 is refused with v2's field paths (v1 is validated as v2), and
	// nothing is stored.
	r = do(t, "POST", hpaV1+ns+"/horizontalpodautoscalers", `{"metadata":{"name":"bad"},"spec":{
		"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"minReplicas":0,"maxReplicas":4,"targetCPUUtilizationPercentage":0}}`)
	body := string(r.body)
	if r.code != 422 || !strings.Contains(body, `"reason":"Invalid"`) || !strings.Contains(body, `"field":"spec.minReplicas"`) ||
		!strings.Contains(body, `"field":"spec.metrics[0].resource.target.averageUtilization"`) {
		t.Errorf("invalid v1 HPA: %d %s", r.code, body)
	}
	if r = do(t, "GET", hpaV2+ns+"/horizontalpodautoscalers/bad", nil); r.code != 404 {
		t.Errorf("the refused HPA exists: %d", r.code)
	}

	if r = do(t, "DELETE", hpaV1+ns+"/horizontalpodautoscalers/web", nil); r.code != 200 {
		t.Fatalf("delete v1: %d %s", r.code, r.body)
	}
	if r = do(t, "GET", hpaV2+ns+"/horizontalpodautoscalers/web", nil); r.code != 404 {
		t.Errorf("deleted through v1, still in v2: %d", r.code)
	}
}
