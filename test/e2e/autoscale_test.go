//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// burner is a Deployment whose pods use CPU (a fifth of the time, in bursts of `yes`) until
// the file stop appears in dir, which they see through a hostPath volume, and then idle.
// They request 20m, so even a loaded machine shows them far above a 50% target.
func burner(dir string) string {
	return fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: burn}
spec:
  replicas: 1
  selector: {matchLabels: {app: burn}}
  template:
    metadata: {labels: {app: burn}}
    spec:
      containers:
      - name: main
        image: sh
        command: [/bin/sh, -c, 'while [ ! -e /ctl/stop ]; do timeout 0.05 yes > /dev/null; sleep 0.2; done; exec sleep 3600']
        resources: {requests: {cpu: 20m}}
        volumeMounts: [{name: ctl, mountPath: /ctl}]
      volumes: [{name: ctl, hostPath: {path: %q}}]
`, dir)
}

// quickBehavior makes the HPA act within seconds: scale up at once by up to 3 pods a second,
// scale down after a 3 s window. (The sync period, 15 s under up, stays the pace-setter.)
const quickBehavior = `{"spec":{"behavior":{
  "scaleUp":{"stabilizationWindowSeconds":0,"policies":[{"type":"Pods","value":3,"periodSeconds":1}]},
  "scaleDown":{"stabilizationWindowSeconds":3,"policies":[{"type":"Percent","value":100,"periodSeconds":1}]}}}}`

// TestUpAutoscale: under `kplane up`, `kubectl autoscale` scales a Deployment whose pods burn
// CPU up to its maximum from the usage the node agent measures (metrics.k8s.io), and back down
// to its minimum once the load stops; kubectl shows the HPA's columns and events, reads it
// as autoscaling/v1 too, and bad changes are refused.
func TestUpAutoscale(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the default service account", func() error { return k.run("", "get", "serviceaccount", "default").err })

	ctl := filepath.Join(dir, "ctl")
	if err := os.Mkdir(ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	k.okIn(burner(ctl), "apply", "-f", "-")
	k.ok("rollout", "status", "deployment/burn", "--timeout=90s")
	k.ok("autoscale", "deployment", "burn", "--cpu-percent=50", "--min=1", "--max=3")
	k.ok("patch", "hpa", "burn", "--type=merge", "-p", quickBehavior)

	start := time.Now()
	k.slowly("deployment/burn", "{.spec.replicas}", "3", 2*time.Minute)
	t.Logf("scaled up to 3 after %v", time.Since(start).Round(time.Second))
	k.slowly("hpa/burn", "{.status.currentMetrics[0].resource.current.averageUtilization}", "", 0) // measured
	tab := parseTable(t, k.ok("get", "hpa"))
	expectHeader(t, "kubectl get hpa", tab, "NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE")
	row := tab.row(t, "burn")
	if row["REFERENCE"] != "Deployment/burn" || !regexp.MustCompile(`^cpu: \d+%/50%$`).MatchString(row["TARGETS"]) ||
		row["MINPODS"] != "1" || row["MAXPODS"] != "3" {
		t.Errorf("kubectl get hpa: %v", row)
	}
	t.Logf("kubectl get hpa while loaded: %v", row)

	// The object kubectl autoscale made through autoscaling/v1 is the v2 one, behavior and all.
	// (Full resource names: kubectl resolves hpa.v1.autoscaling to the preferred version.)
	k.expectJSONPath("horizontalpodautoscalers.v1.autoscaling/burn", "{.spec.targetCPUUtilizationPercentage}", "50")
	k.expectJSONPath("horizontalpodautoscalers.v2.autoscaling/burn", "{.spec.behavior.scaleDown.stabilizationWindowSeconds}", "3")
	if got := k.jsonpath("horizontalpodautoscalers.v1.autoscaling/burn", `{.metadata.annotations.autoscaling\.alpha\.kubernetes\.io/behavior}`); !regexp.MustCompile(`"StabilizationWindowSeconds":3`).MatchString(got) {
		t.Errorf("v1 behavior annotation %q", got)
	}

	if err := os.WriteFile(filepath.Join(ctl, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	k.slowly("deployment/burn", "{.spec.replicas}", "1", 2*time.Minute)
	t.Logf("scaled down to 1 after %v", time.Since(start).Round(time.Second))

	describe := k.ok("describe", "hpa", "burn")
	expectMatch(t, "kubectl describe hpa", describe,
		`SuccessfulRescale\s+\S+\s+horizontal-pod-autoscaler\s+New size: 3; reason: cpu resource utilization \(percentage of request\) above target`,
		`SuccessfulRescale\s+\S+\s+horizontal-pod-autoscaler\s+New size: 1; reason: All metrics below target`,
		`ScalingActive\s+True\s+ValidMetricFound`)

	r := k.fail("patch", "hpa", "burn", "--type=merge", "-p", `{"spec":{"minReplicas":0,"maxReplicas":4}}`)
	expectContains(t, "minReplicas 0", r.stderr, "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1")
	k.expectJSONPath("hpa/burn", "{.spec.minReplicas}/{.spec.maxReplicas}", "1/3")
}

// slowly polls a jsonpath read once a second until it equals want (or, want "", until it is
// not empty), for waits of many seconds on a machine that may be busy.
func (k kc) slowly(obj, expr, want string, within time.Duration) {
	k.t.Helper()
	if within == 0 {
		within = time.Minute
	}
	deadline := time.Now().Add(within)
	for {
		r := k.run("", "get", obj, "-o", "jsonpath="+expr)
		if r.err == nil && (r.stdout == want || (want == "" && r.stdout != "")) {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("%s %s never became %q in %v; last:\n%s\n%s", obj, expr, want, within, r, k.run("", "describe", "hpa").stdout)
		}
		time.Sleep(time.Second)
	}
}
