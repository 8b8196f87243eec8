package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// jobs are a Job of 50 completions whose pods are real processes, an Indexed Job whose pods
// print their index, and a Job whose pod fails with an exit code its podFailurePolicy ends it on.
const jobs = `
apiVersion: batch/v1
kind: Job
metadata: {name: fifty}
spec:
  completions: 50
  parallelism: 10
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: sh, command: [/bin/sh, -c, 'exit 0']}
---
apiVersion: batch/v1
kind: Job
metadata: {name: indexed}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: sh, command: [/bin/sh, -c, 'echo "index $JOB_COMPLETION_INDEX on $HOSTNAME"']}
---
apiVersion: batch/v1
kind: Job
metadata: {name: doomed}
spec:
  backoffLimit: 5
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {operator: In, values: [42]}
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: sh, command: [/bin/sh, -c, 'exit 42']}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  timeZone: Europe/Berlin
  jobTemplate:
    spec:
      ttlSecondsAfterFinished: 1
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: main, image: sh, command: [/bin/sh, -c, 'echo nightly run']}
`

// TestUpJobs runs Jobs under `kplane up` with real kubectl: 50 completions reached and waited
// for with kubectl wait, kubectl's Job columns, an Indexed Job's pods seeing their index and
// hostname, a podFailurePolicy failing a Job at once, a CronJob's Job started by hand and
// removed after its TTL, and invalid Jobs refused with causes. (Runs on a schedule are
// tested with a fake clock in controller/cronjob: a real one would wait up to a minute.)
func TestUpJobs(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the default service account", func() error { return k.run("", "get", "serviceaccount", "default").err })

	k.okIn(jobs, "apply", "-f", "-")
	k.ok("wait", "--for=condition=complete", "job/fifty", "job/indexed", "--timeout=120s")
	k.ok("wait", "--for=condition=failed", "job/doomed", "--timeout=60s")

	tab := parseTable(t, k.ok("get", "jobs"))
	expectHeader(t, "kubectl get jobs", tab, "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE")
	if row := tab.row(t, "fifty"); row["STATUS"] != "Complete" || row["COMPLETIONS"] != "50/50" {
		t.Errorf("fifty: %v", row)
	}
	if row := tab.row(t, "doomed"); row["STATUS"] != "Failed" || row["COMPLETIONS"] != "0/1" {
		t.Errorf("doomed: %v", row)
	}
	k.expectJSONPath("job/fifty", "{.status.succeeded}/{.status.failed}", "50/")
	k.expectJSONPath("job/doomed", `{.status.conditions[?(@.type=="Failed")].reason}`, "PodFailurePolicy")
	k.expectJSONPath("job/indexed", "{.status.completedIndexes}", "0-2")

	// Each pod counted is released: no pod of the Jobs keeps the tracking finalizer.
	if out := k.ok("get", "pods", "-o", "jsonpath={.items[*].metadata.finalizers}"); strings.Contains(out, "job-tracking") {
		t.Errorf("pods still tracked: %s", out)
	}
	var lines []string
	for _, pod := range strings.Fields(k.ok("get", "pods", "-l", "batch.kubernetes.io/job-name=indexed", "-o", "jsonpath={.items[*].metadata.name}")) {
		lines = append(lines, strings.TrimSpace(k.ok("logs", pod)))
	}
	slices.Sort(lines)
	if want := []string{"index 0 on indexed-0", "index 1 on indexed-1", "index 2 on indexed-2"}; !slices.Equal(lines, want) {
		t.Errorf("indexed logs %q, want %q", lines, want)
	}

	r := k.fail("patch", "job", "fifty", "--type=merge", "-p", `{"spec":{"completions":60}}`)
	expectContains(t, "immutable completions", r.stderr, "spec.completions: Invalid value: 60: field is immutable")

	// A CronJob's Job started by hand (kubectl create job --from), run, and removed by the
	// TTL-after-finished controller a second after it completed.
	tab = parseTable(t, k.ok("get", "cronjobs"))
	expectHeader(t, "kubectl get cronjobs", tab, "NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "AGE")
	if row := tab.row(t, "nightly"); row["SCHEDULE"] != "0 3 * * *" || row["TIMEZONE"] != "Europe/Berlin" || row["SUSPEND"] != "False" {
		t.Errorf("nightly: %v", row)
	}
	k.ok("create", "job", "--from=cronjob/nightly", "nightly-manual")
	k.ok("wait", "--for=condition=complete", "job/nightly-manual", "--timeout=60s")
	until(t, "the finished Job deleted after its TTL", func() error {
		if r := k.run("", "get", "job", "nightly-manual"); r.err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})

	// Deleting a Job deletes its pods (the garbage collector, background propagation).
	k.ok("delete", "job", "fifty")
	until(t, "fifty's pods gone", func() error {
		if out := k.ok("get", "pods", "-l", "batch.kubernetes.io/job-name=fifty", "-o", "name"); out != "" {
			return fmt.Errorf("pods left: %s", out)
		}
		return nil
	})

	// Bad input: Kubernetes' 422 with the field causes, nothing stored.
	bad := `
apiVersion: batch/v1
kind: Job
metadata: {name: bad}
spec:
  completions: -1
  template:
    spec:
      restartPolicy: Always
      containers: [{name: main, image: sh}]
`
	r = k.failIn(bad, "apply", "-f", "-")
	expectContains(t, "invalid job", r.stderr, `The Job "bad" is invalid`, "spec.completions: Invalid value: -1", "spec.template.spec.restartPolicy: Required value")
	k.expectNotFound("job/bad")
	r = k.fail("patch", "job", "indexed", "--type=merge", "-p", `{"spec":{"completions":60}}`)
	expectContains(t, "completions of an Indexed Job without parallelism", r.stderr, "spec.completions: Invalid value: 60: can only be modified in tandem with spec.parallelism")
}
