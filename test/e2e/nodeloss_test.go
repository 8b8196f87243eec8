//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

const lossApp = `
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: sleeper}
spec:
  replicas: 4
  selector: {matchLabels: {app: sleeper}}
  template:
    metadata: {labels: {app: sleeper}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: sleep, image: sleep, command: [sleep, "3600"]}]
`

// TestNodeLoss runs the system as separate processes with two `kplane node` agents on this
// machine (each its own pod range, data dir and port). Freezing one agent turns its Node
// Ready=Unknown with the unreachable taint; its pods are evicted and the ReplicaSet's
// replacements run on the other node.
func TestNodeLoss(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	startRole(t, "apiserver", "--secure-port", "0", "--data-dir", filepath.Join(dir, "data"), "--write-kubeconfig", kubeconfig)
	until(t, "the apiserver's kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the apiserver to answer", func() error { return k.run("", "get", "--raw", "/readyz").err })

	startRole(t, "controller-manager", "--kubeconfig", kubeconfig, "--secure-port", "0", "--leader-elect=false",
		"--node-monitor-grace-period", "3s", "--node-monitor-period", "200ms", "--pod-eviction-timeout", "1s")
	startRole(t, "scheduler", "--kubeconfig", kubeconfig)
	nodes := map[string]*roleProcess{}
	for i, name := range []string{"loss-a", "loss-b"} {
		nodes[name] = startRole(t, "node", "--kubeconfig", kubeconfig, "--hostname-override", name,
			"--data-dir", filepath.Join(dir, name), "--pod-cidr", fmt.Sprintf("127.78.%d.0/24", i+1), "--port", "0",
			"--node-lease-renew-interval", "500ms", "--node-status-update-frequency", "500ms")
	}
	ready := `{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`
	until(t, "both nodes Ready", func() error {
		r := k.run("", "get", "nodes", "-o", "jsonpath="+ready)
		if r.err == nil && r.stdout != "loss-a=True loss-b=True " {
			return fmt.Errorf("nodes: %q", r.stdout)
		}
		return r.err
	})

	k.ok("create", "namespace", "loss")
	k.ns = "loss"
	k.okIn(lossApp, "apply", "-f", "-")
	// placement lists "pod@node" of every pod that is Running and not being deleted.
	placement := func() []string {
		out := k.jsonpath("pods", `{range .items[*]}{.metadata.name}@{.spec.nodeName}@{.status.phase}@{.metadata.deletionTimestamp} {end}`)
		var live []string
		for _, p := range strings.Fields(out) {
			f := strings.Split(p, "@")
			if len(f) == 4 && f[2] == "Running" && f[3] == "" {
				live = append(live, f[0]+"@"+f[1])
			}
		}
		sort.Strings(live)
		return live
	}
	onNode := func(pods []string, node string) int {
		n := 0
		for _, p := range pods {
			if strings.HasSuffix(p, "@"+node) {
				n++
			}
		}
		return n
	}
	var before []string
	until(t, "four pods running, spread over both nodes", func() error {
		before = placement()
		if len(before) != 4 || onNode(before, "loss-a") == 0 || onNode(before, "loss-b") == 0 {
			return fmt.Errorf("pods %v", before)
		}
		return nil
	})

	// The agent is frozen, as a node that stops answering: its heartbeats stop (its pods'
	// processes go on, as on a partitioned node).
	lost := nodes["loss-a"]
	if err := lost.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	until(t, "loss-a Ready=Unknown with the unreachable taint", func() error {
		r := k.run("", "get", "node", "loss-a", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}`)
		if r.err != nil {
			return r.err
		}
		if !strings.Contains(r.stdout, "Unknown") || !strings.Contains(r.stdout, "node.kubernetes.io/unreachable") {
			return fmt.Errorf("node loss-a: %q", r.stdout)
		}
		return nil
	})
	t.Logf("node marked unreachable %v after its agent was frozen", time.Since(start).Round(100*time.Millisecond))
	until(t, "four pods running, all on loss-b", func() error {
		after := placement()
		if len(after) != 4 || onNode(after, "loss-b") != 4 {
			return fmt.Errorf("pods %v", after)
		}
		return nil
	})
	t.Logf("pods recreated on loss-b %v after the agent was frozen", time.Since(start).Round(100*time.Millisecond))
	// The survivors kept running: only the lost node's pods were replaced.
	after := strings.Join(placement(), " ")
	for _, p := range before {
		if strings.HasSuffix(p, "@loss-b") && !strings.Contains(after, p) {
			t.Errorf("pod %s on the healthy node was replaced; now %s", p, after)
		}
	}
}
