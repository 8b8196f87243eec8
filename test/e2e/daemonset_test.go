package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const daemonSet = `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  updateStrategy: {rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: sh
        command: [/bin/sh, -c, 'echo "agent $VERSION on $NODE"; exec sleep 3600']
        env:
        - {name: VERSION, value: one}
        - name: NODE
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
`

// TestUpDaemonSet: under `kplane up` with a second node agent joined, a DaemonSet runs one pod
// on each node; a template change rolls out node by node (kubectl rollout status), kubectl
// rollout history lists both revisions, and kubectl rollout undo brings the first back.
func TestUpDaemonSet(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the default service account", func() error { return k.run("", "get", "serviceaccount", "default").err })
	startRole(t, "node", "--kubeconfig", kubeconfig, "--hostname-override", "second", "--port", "0",
		"--pod-cidr", "127.78.0.0/16", "--data-dir", filepath.Join(dir, "second"))
	until(t, "two Ready nodes", func() error {
		out := k.ok("get", "nodes", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}`)
		if strings.Count(out, "True") != 2 {
			return fmt.Errorf("nodes ready: %q", out)
		}
		return nil
	})
	nodes := strings.Fields(k.ok("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"))
	slices.Sort(nodes)

	k.okIn(daemonSet, "apply", "-f", "-")
	k.ok("rollout", "status", "daemonset/agent", "--timeout=60s")
	onNodes := func(want string) {
		t.Helper()
		until(t, "agent "+want+" on every node", func() error {
			var lines []string
			for _, pod := range strings.Fields(k.ok("get", "pods", "-l", "app=agent", "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")) {
				r := k.run("", "logs", pod)
				if r.err != nil {
					return r.err
				}
				lines = append(lines, strings.TrimSpace(r.stdout))
			}
			slices.Sort(lines)
			var expect []string
			for _, n := range nodes {
				expect = append(expect, "agent "+want+" on "+n)
			}
			if !slices.Equal(lines, expect) {
				return fmt.Errorf("logs %q, want %q", lines, expect)
			}
			return nil
		})
	}
	onNodes("one")
	tab := parseTable(t, k.ok("get", "daemonset", "agent"))
	if row := tab.row(t, "agent"); row["DESIRED"] != "2" || row["READY"] != "2" || row["UP-TO-DATE"] != "2" || row["AVAILABLE"] != "2" {
		t.Errorf("kubectl get daemonset: %v", row)
	}

	k.ok("set", "env", "daemonset/agent", "VERSION=two")
	k.ok("rollout", "status", "daemonset/agent", "--timeout=60s")
	onNodes("two")
	history := k.ok("rollout", "history", "daemonset/agent")
	expectContains(t, "rollout history", history, "REVISION", "1 ", "2 ")

	k.ok("rollout", "undo", "daemonset/agent")
	k.ok("rollout", "status", "daemonset/agent", "--timeout=60s")
	onNodes("one")
	expectContains(t, "rollout history after undo", k.ok("rollout", "history", "daemonset/agent"), "2 ", "3 ")
}
