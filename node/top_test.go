package node

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
)

// TestKubectlTop: kubectl top nodes and pods (and --containers) against the apiserver's
// metrics.k8s.io, computed from this agent's /metrics/resource, with nothing else installed.
func TestKubectlTop(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-top", "127.104.0.0/24")
	ns := testserver.Namespace(t, c, "node-top-")
	k := newKubectl(t, ns)
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	deletePodsAtEnd(t, pods)

	// A pod spinning one shell (about one core, or its 500m limit) beside one that sleeps.
	spin := limitedPod(ns, "spin", "node-top", `while :; do :; done`, "64Mi")
	spin.Labels = map[string]string{"app": "spin"}
	two := shPod(ns, "two", "node-top", "exec sleep 100", corev1.RestartPolicyAlways)
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "side", Image: "sh", Command: []string{"/bin/sh", "-c", "exec sleep 100"}})
	for _, p := range []*corev1.Pod{spin, two} {
		if _, err := pods.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	runningPod(t, pods, "spin")
	runningPod(t, pods, "two")

	// NAME  CPU(cores)  CPU(%)  MEMORY(bytes)  MEMORY(%)
	nodeLine := regexp.MustCompile(`(?m)^node-top\s+(\d+)m\s+\d+%\s+(\d+)Mi\s+\d+%`)
	eventually(t, "kubectl top nodes", func() (bool, string) {
		out, errOut, err := k.run("top", "nodes")
		return err == nil && nodeLine.MatchString(out), out + errOut
	})
	if out := k.ok("top", "node", "node-top"); !nodeLine.MatchString(out) {
		t.Errorf("top node node-top:\n%s", out)
	} else {
		t.Logf("kubectl top node node-top:\n%s", out)
	}

	// NAME  CPU(cores)  MEMORY(bytes)
	var out string
	eventually(t, "kubectl top pods", func() (bool, string) {
		var errOut string
		var err error
		out, errOut, err = k.run("top", "pods")
		return err == nil && strings.Contains(out, "spin") && strings.Contains(out, "two"), out + errOut
	})
	spinLine := regexp.MustCompile(`(?m)^spin\s+(\d+)m\s+(\d+)Mi`)
	m := spinLine.FindStringSubmatch(out)
	var milli int
	if m != nil {
		fmt.Sscan(m[1], &milli)
	}
	// The spinning shell uses about its 500m limit (all of a core without cgroups); allow
	// for a loaded machine.
	t.Logf("kubectl top pods:\n%s", out)
	if milli < 100 {
		t.Errorf("spin uses %dm of CPU, want about 500m:\n%s", milli, out)
	}
	if out := k.ok("top", "pods", "-l", "app=spin", "--no-headers"); !strings.HasPrefix(out, "spin ") || strings.Contains(out, "two") {
		t.Errorf("top pods -l app=spin:\n%s", out)
	}
	// POD  NAME  CPU(cores)  MEMORY(bytes)
	containers := k.ok("top", "pods", "two", "--containers")
	if !regexp.MustCompile(`(?m)^two\s+main\s+\d+m\s+\d+Mi`).MatchString(containers) || !regexp.MustCompile(`(?m)^two\s+side\s+\d+m\s+\d+Mi`).MatchString(containers) {
		t.Errorf("top pods two --containers:\n%s", containers)
	}

	// The raw API: metrics-server's objects and errors.
	if e := k.fails("top", "pod", "nope"); !strings.Contains(e, `pods.metrics.k8s.io "`+ns+`/nope" not found`) {
		t.Errorf("top pod nope: %s", e)
	}
	raw := k.ok("get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/"+ns+"/pods/spin")
	for _, want := range []string{`"kind":"PodMetrics"`, `"apiVersion":"metrics.k8s.io/v1beta1"`, `"name":"main"`, `"window":`, `"app":"spin"`} {
		if !strings.Contains(raw, want) {
			t.Errorf("raw PodMetrics lacks %s: %s", want, raw)
		}
	}
	// kubectl get shows metrics-server's table.
	table := k.ok("get", "pods.metrics.k8s.io")
	t.Logf("kubectl top pods two --containers:\n%s\nkubectl get pods.metrics.k8s.io:\n%s", containers, table)
	if !regexp.MustCompile(`(?m)^NAME\s+CPU\s+MEMORY\s+WINDOW`).MatchString(table) || !regexp.MustCompile(`(?m)^spin\s+\d+n\s+\d+(Ki|Mi)?\s+\d`).MatchString(table) {
		t.Errorf("get pods.metrics.k8s.io:\n%s", table)
	}
	if e := k.fails("delete", "pods.metrics.k8s.io", "spin"); !strings.Contains(e, "MethodNotAllowed") && !strings.Contains(e, "not allowed") && !strings.Contains(e, "not supported") {
		t.Errorf("delete: %s", e)
	}
}
