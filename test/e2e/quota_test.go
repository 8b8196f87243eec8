package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// defaults gives every container of the namespace a cpu request and limit, and caps it.
const defaults = `
apiVersion: v1
kind: LimitRange
metadata: {name: defaults}
spec:
  limits:
  - type: Container
    default: {cpu: 200m}
    defaultRequest: {cpu: 100m}
    max: {cpu: 500m}
`

// quotaWeb is a Deployment whose pods say nothing of their resources: the LimitRange does.
const quotaWeb = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: main, image: sh, command: [/bin/sh, -c, 'exec sleep 3600']}
`

// greedy asks more cpu than the LimitRange allows a container.
const greedy = `
apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec:
  containers:
  - {name: main, image: sh, command: [sleep, "1"], resources: {limits: {cpu: "1"}}}
`

// TestUpQuota runs ResourceQuota and LimitRange under `kplane up` with real kubectl: a quota
// made with kubectl create quota is counted by the controller, a Deployment scaled past it
// gets two pods and a ReplicaSet event saying the third exceeded the quota, kubectl get and
// describe show the usage, the LimitRange's defaults are on the pods, and a scale-down gives
// the usage back.
func TestUpQuota(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the default service account", func() error { return k.run("", "get", "serviceaccount", "default").err })

	k.okIn(defaults, "apply", "-f", "-")
	expectHeader(t, "kubectl get limits", parseTable(t, k.ok("get", "limits")), "NAME", "CREATED AT")
	expectContains(t, "kubectl create quota", k.ok("create", "quota", "compute", "--hard=pods=2,requests.cpu=1"), "resourcequota/compute created")
	// The controller counts it before it enforces anything.
	k.eventually("quota/compute", "{.status.used.pods}/{.status.hard.pods}", "0/2", 20*time.Second)

	k.okIn(quotaWeb, "apply", "-f", "-")
	k.ok("rollout", "status", "deployment/web", "--timeout=60s")
	k.ok("scale", "deployment", "web", "--replicas=3")
	until(t, "the third pod refused", func() error {
		out := k.ok("get", "events", "-o", `jsonpath={range .items[?(@.reason=="FailedCreate")]}{.involvedObject.kind}: {.message}{"\n"}{end}`)
		if !strings.Contains(out, "ReplicaSet: Error creating: pods ") ||
			!strings.Contains(out, "is forbidden: exceeded quota: compute, requested: pods=1, used: pods=2, limited: pods=2") {
			return fmt.Errorf("FailedCreate events: %q", out)
		}
		return nil
	})
	names := strings.Fields(k.ok("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(names) != 2 {
		t.Fatalf("pods %v, want 2 under the quota", names)
	}
	k.eventually("deployment/web", "{.status.readyReplicas}", "2", 30*time.Second)

	tab := parseTable(t, k.ok("get", "quota"))
	expectHeader(t, "kubectl get quota", tab, "NAME", "REQUEST", "LIMIT", "AGE")
	if row := tab.row(t, "compute"); row["REQUEST"] != "pods: 2/2, requests.cpu: 200m/1" || row["LIMIT"] != "" {
		t.Errorf("kubectl get quota: %v", row)
	}
	expectMatch(t, "kubectl describe quota", k.ok("describe", "quota", "compute"),
		`Name:\s+compute`, `Resource\s+Used\s+Hard`, `pods\s+2\s+2`, `requests\.cpu\s+200m\s+1`)

	// The LimitRange's defaults are on the pods.
	k.expectJSONPath("pod/"+names[0], "{.spec.containers[0].resources.requests.cpu}/{.spec.containers[0].resources.limits.cpu}", "100m/200m")
	expectContains(t, "limit-ranger annotation", k.jsonpath("pod/"+names[0], "{.metadata.annotations}"),
		"LimitRanger plugin set: cpu request for container main; cpu limit for container main")
	expectMatch(t, "kubectl describe limits", k.ok("describe", "limits", "defaults"), `Container\s+cpu\s+-\s+500m\s+100m\s+200m`)

	// kubectl sees the refusals as Kubernetes words them.
	r := k.fail("run", "extra", "--image=sh", "--", "sleep", "1")
	expectContains(t, "kubectl run over the quota", r.stderr,
		`Error from server (Forbidden): pods "extra" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=2, limited: pods=2`)
	r = k.failIn(greedy, "apply", "-f", "-")
	expectContains(t, "kubectl run over the range", r.stderr, `pods "greedy" is forbidden: maximum cpu usage per Container is 500m, but limit is 1`)

	// Fewer pods, less usage: the deleted pod's share is given back.
	k.ok("scale", "deployment", "web", "--replicas=1")
	k.eventually("quota/compute", "{.status.used.pods}/{.status.used.requests\\.cpu}", "1/100m", 30*time.Second)
}
