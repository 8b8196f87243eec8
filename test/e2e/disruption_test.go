//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// guarded is a Deployment of two echo pods and a PodDisruptionBudget that keeps both.
const guarded = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - {name: echo, image: kplane/echo, command: [kplane, echo, --port=8080]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector:
    matchLabels: {app: web}
`

// podState is one pod as `kubectl get pods` sees it.
type podState struct{ name, phase, node, deleting string }

// podStates lists the namespace's pods: name, phase, node and whether being deleted.
func (k kc) podStates() []podState {
	k.t.Helper()
	out := k.ok("get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.spec.nodeName}- {.metadata.deletionTimestamp}-{"\n"}{end}`)
	var pods []podState
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			pods = append(pods, podState{name: f[0], phase: f[1], node: strings.TrimSuffix(f[2], "-"),
				deleting: strings.TrimSuffix(strings.Join(f[3:], ""), "-")})
		}
	}
	return pods
}

// TestUpDrain drains the one node of `kplane up` with real kubectl against a budget, and shows
// what a user of a one-node cluster (kind, minikube) sees: drain evicts through pods/eviction,
// so it waits, retrying, while the budget allows no disruption, and gives up at --timeout with
// the budget's refusal. Relaxing the budget to one pod lets one pod go, but the other is held:
// its replacement cannot be scheduled on the cordoned node, so the budget stays exhausted.
// Only a budget that allows every pod to go (minAvailable 0) lets the drain finish; the
// replacements start once the node is uncordoned.
func TestUpDrain(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the default service account", func() error { return k.run("", "get", "serviceaccount", "default").err })

	k.okIn(guarded, "apply", "-f", "-")
	k.ok("rollout", "status", "deployment/web", "--timeout=60s")
	const counts = "{.status.observedGeneration} {.status.expectedPods} {.status.currentHealthy} {.status.desiredHealthy} {.status.disruptionsAllowed}"
	k.eventually("pdb/web", counts, "1 2 2 2 0", 20*time.Second)
	tab := parseTable(t, k.ok("get", "pdb"))
	expectHeader(t, "kubectl get pdb", tab, "NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE")
	if row := tab.row(t, "web"); row["MIN AVAILABLE"] != "2" || row["MAX UNAVAILABLE"] != "N/A" || row["ALLOWED DISRUPTIONS"] != "0" {
		t.Errorf("pdb row: %v", row)
	}
	node := strings.TrimPrefix(strings.TrimSpace(k.ok("get", "nodes", "-o", "name")), "node/")
	var first []string
	for _, p := range k.podStates() {
		first = append(first, p.name)
	}
	drain := func(timeout string) []string {
		return []string{"drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=" + timeout}
	}

	// 1. minAvailable 2 of 2: nothing may go. The node is cordoned, both pods keep running.
	r := k.fail(drain("5s")...)
	expectContains(t, "drain against an exhausted budget", r.stderr,
		"Cannot evict pod as it would violate the pod's disruption budget.", "global timeout reached: 5s")
	k.expectJSONPath("node/"+node, "{.spec.unschedulable}", "true")
	if pods := k.podStates(); len(pods) != 2 || pods[0].phase != "Running" || pods[1].phase != "Running" || pods[0].deleting != "" || pods[1].deleting != "" {
		t.Fatalf("pods after the refused drain: %v", pods)
	}

	// 2. minAvailable 1: one pod is evicted; its replacement stays Pending (the only node is
	// cordoned), so the budget has no disruption left for the other, and drain times out.
	k.ok("patch", "pdb", "web", "--type=merge", "-p", `{"spec":{"minAvailable":1}}`)
	k.eventually("pdb/web", counts, "2 2 2 1 1", 20*time.Second)
	r = k.fail(drain("12s")...)
	expectContains(t, "drain evicting one pod", r.stdout, " evicted")
	expectContains(t, "drain held by the budget", r.stderr, "Cannot evict pod as it would violate the pod's disruption budget.", "global timeout reached: 12s")
	var running, pending []string
	for _, p := range k.podStates() {
		switch {
		case p.phase == "Running" && p.node == node && p.deleting == "":
			running = append(running, p.name)
		case p.phase == "Pending" && p.node == "":
			pending = append(pending, p.name)
		}
	}
	if len(running) != 1 || !slices.Contains(first, running[0]) || len(pending) != 1 {
		t.Fatalf("after evicting one pod: running %v (of %v), pending %v; all: %v", running, first, pending, k.podStates())
	}
	k.eventually("pdb/web", counts, "2 2 1 1 0", 20*time.Second)
	until(t, "the replacement reported unschedulable", func() error {
		events := k.ok("get", "events", "--field-selector", "involvedObject.name="+pending[0]+",reason=FailedScheduling")
		if !strings.Contains(events, "node(s) were unschedulable") {
			return fmt.Errorf("events of %s: %q", pending[0], events)
		}
		return nil
	})

	// 3. minAvailable 0: the last pod may go too, and the drain finishes.
	k.ok("patch", "pdb", "web", "--type=merge", "-p", `{"spec":{"minAvailable":0}}`)
	k.eventually("pdb/web", counts, "3 2 1 0 1", 20*time.Second)
	out := k.ok(drain("30s")...)
	expectContains(t, "drain through", out, "pod/"+running[0]+" evicted", "node/"+node+" drained")
	for _, p := range k.podStates() {
		if p.node != "" || p.phase != "Pending" {
			t.Errorf("after the drain, pod %v is not a pending replacement", p)
		}
	}

	// 4. Uncordoned, the node takes the replacements; the budget counts them.
	k.ok("uncordon", node)
	k.ok("rollout", "status", "deployment/web", "--timeout=60s")
	k.eventually("pdb/web", counts, "3 2 2 0 2", 20*time.Second)
	k.expectJSONPath("pdb/web", `{.status.conditions[?(@.type=="DisruptionAllowed")].reason}`, "SufficientPods")
}
