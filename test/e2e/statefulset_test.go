package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// statefulSet's pods each add a line with their hostname and VERSION to the file in their
// claim and print the whole file: the log shows what the claim kept from earlier pods.
const statefulSet = `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: sh
        command: [/bin/sh, -c, 'echo "$HOSTNAME $VERSION" >> /data/hosts; cat /data/hosts; exec sleep 3600']
        env: [{name: VERSION, value: one}]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
`

// TestUpStatefulSet: under `kplane up`, a StatefulSet of three comes up in order with a claim
// each, provisioned and bound through the local-path class; each pod finds in its claim what
// the pods of its ordinal wrote before it, through a rolled-out template change, a scale to
// one (kubectl scale, through the scale subresource) and back, and kubectl rollout undo.
func TestUpStatefulSet(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the default service account", func() error { return k.run("", "get", "serviceaccount", "default").err })

	k.okIn(statefulSet, "apply", "-f", "-")
	rollout := func() string {
		t.Helper()
		return k.ok("rollout", "status", "statefulset/web", "--timeout=25s")
	}
	// kubectl reports a RollingUpdate with a partition (0 by default) as a partitioned one.
	expectContains(t, "rollout status", rollout(), "partitioned roll out complete: 3 new pods have been updated")
	// logs waits until each pod's log is exactly its lines.
	logs := func(want map[string][]string) {
		t.Helper()
		for pod, lines := range want {
			until(t, pod+"'s claim", func() error {
				r := k.run("", "logs", pod)
				if r.err != nil {
					return r.err
				}
				if got := strings.TrimSpace(r.stdout); got != strings.Join(lines, "\n") {
					return fmt.Errorf("logs of %s: %q, want %q", pod, got, lines)
				}
				return nil
			})
		}
	}
	logs(map[string][]string{"web-0": {"web-0 one"}, "web-1": {"web-1 one"}, "web-2": {"web-2 one"}})
	if row := parseTable(t, k.ok("get", "statefulset", "web")).row(t, "web"); row["READY"] != "3/3" {
		t.Errorf("kubectl get statefulset: %v", row)
	}
	expectContains(t, "wide columns", k.ok("get", "sts", "-o", "wide"), "CONTAINERS", "IMAGES", "main", "sh")
	claims := parseTable(t, k.ok("get", "pvc"))
	for i := range 3 {
		row := claims.row(t, fmt.Sprintf("data-web-%d", i))
		if row["STATUS"] != "Bound" || row["STORAGECLASS"] != "local-path" {
			t.Errorf("claim data-web-%d: %v", i, row)
		}
	}

	// A template change rolls out from web-2 down; each new pod finds the line of the old.
	k.ok("set", "env", "statefulset/web", "VERSION=two")
	expectContains(t, "rollout status", rollout(), "partitioned roll out complete: 3 new pods have been updated")
	logs(map[string][]string{"web-0": {"web-0 one", "web-0 two"}, "web-1": {"web-1 one", "web-1 two"}, "web-2": {"web-2 one", "web-2 two"}})
	expectContains(t, "rollout history", k.ok("rollout", "history", "statefulset/web"), "REVISION", "1 ", "2 ")

	// Down to one and back: web-2's claim stays (Retain) with its data in it.
	expectContains(t, "kubectl scale", k.ok("scale", "statefulset", "web", "--replicas=1"), "statefulset.apps/web scaled")
	until(t, "web-1 and web-2 gone", func() error {
		if got := strings.Fields(k.ok("get", "pods", "-o", "jsonpath={.items[*].metadata.name}")); len(got) != 1 || got[0] != "web-0" {
			return fmt.Errorf("pods %v", got)
		}
		return nil
	})
	k.expectJSONPath("pvc/data-web-2", "{.status.phase}", "Bound")
	k.expectJSONPath("statefulset/web", "{.status.replicas}", "1")
	k.ok("scale", "statefulset", "web", "--replicas=3")
	rollout()
	logs(map[string][]string{"web-2": {"web-2 one", "web-2 two", "web-2 two"}})

	// Undo: back to VERSION=one, the first revision renumbered as the third.
	k.ok("rollout", "undo", "statefulset/web")
	rollout()
	logs(map[string][]string{"web-0": {"web-0 one", "web-0 two", "web-0 one"}})
	expectContains(t, "rollout history after undo", k.ok("rollout", "history", "statefulset/web"), "2 ", "3 ")
}
