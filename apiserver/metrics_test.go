package apiserver_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestMetricsAPI: metrics.k8s.io/v1beta1 is discovered and answers as metrics-server does
// where no node has figures (the figures themselves: node/top_test.go, with a node agent).
func TestMetricsAPI(t *testing.T) {
	ns := namespace(t)
	if r := do(t, "POST", "/api/v1/namespaces/"+ns+"/pods", pod("unscheduled")); r.code != 201 {
		t.Fatalf("setup: %d %s", r.code, r.body)
	}
	cases := []struct {
		method, path string
		code         int
		contains     string
	}{
		{"GET", "/apis", 200, `"name":"metrics.k8s.io","versions":[{"groupVersion":"metrics.k8s.io/v1beta1"`},
		{"GET", "/apis/metrics.k8s.io", 200, `"preferredVersion":{"groupVersion":"metrics.k8s.io/v1beta1"`},
		{"GET", "/apis/metrics.k8s.io/v1beta1", 200, `{"name":"pods","singularName":"","namespaced":true,"kind":"PodMetrics","verbs":["get","list"]}`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/nodes", 200, `"kind":"NodeMetricsList"`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/namespaces/" + ns + "/pods", 200, `"items":[]`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/pods?labelSelector=app%3Dweb", 200, `"kind":"PodMetricsList"`},
		// A pod that is not running has no metrics.
		{"GET", "/apis/metrics.k8s.io/v1beta1/namespaces/" + ns + "/pods/unscheduled", 404, `pods.metrics.k8s.io \"` + ns + `/unscheduled\" not found`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/nodes/missing", 404, `nodes.metrics.k8s.io \"missing\" not found`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/pods?labelSelector=a%3D%3D%3Db", 400, `unable to parse requirement`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=spec.bogus%3Dx", 400, `field label not supported: spec.bogus`},
		{"DELETE", "/apis/metrics.k8s.io/v1beta1/namespaces/" + ns + "/pods/unscheduled", 405, `"reason":"MethodNotAllowed"`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/nodes?watch=true", 405, `"reason":"MethodNotAllowed"`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/namespaces/" + ns + "/nodes", 404, `"reason":"NotFound"`},
		{"GET", "/apis/metrics.k8s.io/v1beta1/services", 404, `"reason":"NotFound"`},
	}
	for _, c := range cases {
		r := do(t, c.method, c.path, nil)
		if r.code != c.code || !strings.Contains(string(r.body), c.contains) {
			t.Errorf("%s %s: %d, want %d with %s in %.400s", c.method, c.path, r.code, c.code, c.contains, r.body)
		}
	}
	// kubectl get asks for a table: metrics-server's columns.
	r := do(t, "GET", "/apis/metrics.k8s.io/v1beta1/nodes", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if r.code != http.StatusOK || !strings.Contains(string(r.body), `"columnDefinitions":[{"name":"Name"`) || !strings.Contains(string(r.body), `{"name":"Window","type":"string","format":"duration"`) {
		t.Errorf("table: %d %s", r.code, r.body)
	}
}
