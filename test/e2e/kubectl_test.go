//go:build linux

// Package e2e drives a real `kplane apiserver` process with the real kubectl, so the whole
// client path is exercised: discovery and its cache, OpenAPI (explain, apply's strategic merge
// patch), protobuf request bodies, server-side tables, watch, dry run and error statuses.
//
// The tests need kubectl (from $KUBECTL or PATH). They are Linux-only because the server and
// watchers run in their own process groups with a parent-death signal, so that nothing started
// here can outlive the test binary, even when it is killed by `go test -timeout`.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	// kubectlTimeout bounds one kubectl call; a hang (e.g. kubectl waiting for a deletion that
	// never completes) then fails the test with the output so far instead of the whole run.
	kubectlTimeout = 30 * time.Second
	// watchTimeout is how long a watcher may take to show a change made by another kubectl.
	watchTimeout = 10 * time.Second
)

// env is the server and kubectl setup shared by all tests; TestMain fills it.
var env struct {
	bin        string // the kplane binary under test
	kubectl    string
	kubeconfig string
	cacheDir   string
	serverURL  string
	dataDir    string // the server's (its certificate is tls.crt there)
	kubectlEnv []string
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

// runMain is TestMain's body, split out so its deferred cleanup runs before os.Exit.
func runMain(m *testing.M) int {
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = "kubectl"
	}
	path, err := exec.LookPath(kubectl)
	if err != nil {
		// Every machine of this project has kubectl; without it these tests cannot mean anything.
		fmt.Fprintf(os.Stderr, "e2e: kubectl not found (%v); set $KUBECTL or put it on PATH\n", err)
		return 1
	}
	env.kubectl = path

	dir, err := os.MkdirTemp("", "kplane-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	bin := filepath.Join(dir, "kplane")
	env.bin = bin
	build := exec.Command("go", "build", "-o", bin, "github.com/kplane/kplane/cmd/kplane")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build kplane: %v\n%s", err, out)
		return 1
	}

	env.kubeconfig = filepath.Join(dir, "kubeconfig")
	env.cacheDir = filepath.Join(dir, "kubectl-cache")
	// HOME points into the temp dir so kubectl cannot read or write the user's ~/.kube, and
	// KUBECONFIG is dropped so only --kubeconfig decides which server is used.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "HOME=") {
			env.kubectlEnv = append(env.kubectlEnv, kv)
		}
	}
	env.kubectlEnv = append(env.kubectlEnv, "HOME="+filepath.Join(dir, "home"))

	logPath := filepath.Join(dir, "apiserver.log")
	env.dataDir = filepath.Join(dir, "data")
	stop, err := startServer(bin, env.dataDir, logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		printLogTail(logPath)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: apiserver did not stop cleanly:", err)
	}
	if code != 0 {
		printLogTail(logPath)
	}
	return code
}

// startServer runs `kplane apiserver` and returns once /readyz answers 200. stop terminates
// the server's whole process group and waits for it.
func startServer(bin, dataDir, logPath string) (stop func() error, err error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "apiserver",
		"--secure-port", "0", "--data-dir", dataDir, "--write-kubeconfig", env.kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// SIGTERM first so embedded etcd shuts down cleanly; WaitDelay then escalates to SIGKILL.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		logFile.Close()
		return nil, fmt.Errorf("start apiserver: %w", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	stop = func() error {
		cancel()
		<-exited
		// exec reports a clean exit after Cancel as the context's error.
		if errors.Is(waitErr, context.Canceled) {
			return nil
		}
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM {
			return nil // killed by our SIGTERM before it installed its handler
		}
		return waitErr
	}

	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-exited:
			return nil, fmt.Errorf("apiserver exited before becoming ready: %v", waitErr)
		default:
		}
		if time.Now().After(deadline) {
			_ = stop()
			return nil, errors.New("apiserver not ready within 60s")
		}
		// The kubeconfig is written atomically once the port is bound; it names the real port.
		if env.serverURL == "" {
			if url, err := serverFromKubeconfig(env.kubeconfig); err == nil {
				env.serverURL = url
			}
		}
		if env.serverURL != "" {
			if resp, err := client.Get(env.serverURL + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return stop, nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func serverFromKubeconfig(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var cfg struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", err
	}
	if len(cfg.Clusters) == 0 || cfg.Clusters[0].Cluster.Server == "" {
		return "", fmt.Errorf("%s names no server", path)
	}
	return cfg.Clusters[0].Cluster.Server, nil
}

func printLogTail(path string) {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	fmt.Fprintf(os.Stderr, "--- last lines of the apiserver log ---\n%s\n", strings.Join(lines, "\n"))
}

// ---- kubectl helpers ----

// result is one finished kubectl call.
type result struct {
	args           []string
	stdout, stderr string
	err            error
}

func (r result) String() string {
	status := "exit 0"
	if r.err != nil {
		status = r.err.Error()
	}
	return fmt.Sprintf("kubectl %s\n(%s)\n--- stdout ---\n%s--- stderr ---\n%s",
		strings.Join(r.args, " "), status, r.stdout, r.stderr)
}

// kc runs kubectl against the test server, in one namespace unless ns is empty.
type kc struct {
	t  *testing.T
	ns string
	// kubeconfig names another server than the shared one (empty: env.kubeconfig).
	kubeconfig string
}

var nsCounter atomic.Int64

// newNamespace creates a namespace of the test's own (with `kubectl create namespace`, which
// sends a protobuf body). Namespaces are not deleted afterwards: without a namespace controller
// deletion would stay in Terminating, and the server and its data dir go away with the run.
func newNamespace(t *testing.T) kc {
	t.Helper()
	name := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-"))
	name = strings.Trim(strings.TrimPrefix(name, "test"), "-")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	name = fmt.Sprintf("%s-%d", name, nsCounter.Add(1))
	k := kc{t: t}
	if out := k.ok("create", "namespace", name); !strings.Contains(out, "namespace/"+name+" created") {
		t.Fatalf("create namespace %s: unexpected output %q", name, out)
	}
	return kc{t: t, ns: name}
}

func (k kc) run(stdin string, args ...string) result {
	k.t.Helper()
	if k.ns != "" {
		args = append([]string{"-n", k.ns}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	kubeconfig := env.kubeconfig
	if k.kubeconfig != "" {
		kubeconfig = k.kubeconfig
	}
	full := append([]string{"--kubeconfig", kubeconfig, "--cache-dir", env.cacheDir}, args...)
	cmd := exec.CommandContext(ctx, env.kubectl, full...)
	cmd.Env = env.kubectlEnv
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	// The parent-death signal ends a call in flight if the test binary itself is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v (%v)", kubectlTimeout, err)
	}
	return result{args: args, stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// ok runs kubectl, fails the test unless it succeeds, and returns its stdout.
func (k kc) ok(args ...string) string {
	k.t.Helper()
	return k.okIn("", args...)
}

func (k kc) okIn(stdin string, args ...string) string {
	k.t.Helper()
	r := k.run(stdin, args...)
	if r.err != nil {
		k.t.Fatalf("kubectl failed:\n%s", r)
	}
	return r.stdout
}

// fail runs kubectl and fails the test unless kubectl exits non-zero.
func (k kc) fail(args ...string) result {
	k.t.Helper()
	return k.failIn("", args...)
}

func (k kc) failIn(stdin string, args ...string) result {
	k.t.Helper()
	r := k.run(stdin, args...)
	if r.err == nil {
		k.t.Fatalf("kubectl succeeded, want an error:\n%s", r)
	}
	var ee *exec.ExitError
	if !errors.As(r.err, &ee) {
		k.t.Fatalf("kubectl did not run to a non-zero exit:\n%s", r)
	}
	return r
}

// jsonpath returns `kubectl get <obj> -o jsonpath=<expr>`.
func (k kc) jsonpath(obj, expr string) string {
	k.t.Helper()
	return k.ok("get", obj, "-o", "jsonpath="+expr)
}

// expectJSONPath checks one field of a live object.
func (k kc) expectJSONPath(obj, expr, want string) {
	k.t.Helper()
	if got := k.jsonpath(obj, expr); got != want {
		k.t.Errorf("%s %s = %q, want %q", obj, expr, got, want)
	}
}

// expectNotFound checks the object is gone: get fails with a NotFound status.
func (k kc) expectNotFound(obj string) {
	k.t.Helper()
	r := k.fail("get", obj)
	if !strings.Contains(r.stderr, "(NotFound)") {
		k.t.Errorf("get %s: want a NotFound error:\n%s", obj, r)
	}
}

func expectContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q; got:\n%s", what, w, got)
		}
	}
}

func expectMatch(t *testing.T, what, got string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(got) {
			t.Errorf("%s does not match %s; got:\n%s", what, p, got)
		}
	}
}

// table is kubectl's human-readable table output, split into cells.
type table struct {
	header []string
	rows   []map[string]string
}

// parseTable splits kubectl's column output. Columns are found from the header: kubectl pads
// with at least three spaces and header names have at most single inner spaces ("NOMINATED
// NODE"), so every cell starts where its header starts; that keeps empty cells (no SHORTNAMES)
// in the right column.
func parseTable(t *testing.T, out string) table {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("no table in output %q", out)
	}
	var starts []int
	var tab table
	for _, loc := range regexp.MustCompile(`\S+( \S+)*`).FindAllStringIndex(lines[0], -1) {
		// Header text is ASCII, so byte offsets are rune offsets.
		starts = append(starts, loc[0])
		tab.header = append(tab.header, lines[0][loc[0]:loc[1]])
	}
	for _, line := range lines[1:] {
		rs := []rune(line)
		row := map[string]string{}
		for i, s := range starts {
			end := len(rs)
			if i+1 < len(starts) && starts[i+1] < end {
				end = starts[i+1]
			}
			if s < end {
				row[tab.header[i]] = strings.TrimSpace(string(rs[s:end]))
			} else {
				row[tab.header[i]] = ""
			}
		}
		tab.rows = append(tab.rows, row)
	}
	return tab
}

func (tab table) row(t *testing.T, name string) map[string]string {
	t.Helper()
	for _, r := range tab.rows {
		if r["NAME"] == name {
			return r
		}
	}
	t.Fatalf("no row NAME=%s in table %v", name, tab.rows)
	return nil
}

func expectHeader(t *testing.T, what string, tab table, want ...string) {
	t.Helper()
	if strings.Join(tab.header, "|") != strings.Join(want, "|") {
		t.Errorf("%s: columns %q, want %q", what, tab.header, want)
	}
}

// step is one stage of a step-driven test.
type step struct {
	name string
	fn   func(t *testing.T)
}

// runSteps runs steps as ordered subtests and stops at the first failure, since later steps
// build on the state the earlier ones left.
func runSteps(t *testing.T, list []step) {
	t.Helper()
	for _, s := range list {
		if !t.Run(s.name, s.fn) {
			t.FailNow()
		}
	}
}

// ---- manifests ----

const appManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - name: http
    port: 80
    targetPort: 80
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data:
  greeting: hello
  mode: test
`

// podManifest is a pod already bound to a node, so its wide columns (IP, NODE) are filled once
// its status carries an IP.
const podManifest = `apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels: {app: web}
spec:
  nodeName: node-1
  containers:
  - name: nginx
    image: nginx:1.27
`

// applyV1 and applyV2 differ in a label, the replica count and a second service port.
const applyV1 = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  labels: {app: api}
spec:
  replicas: 1
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: app
        image: busybox:1.36
        command: [sleep, infinity]
---
apiVersion: v1
kind: Service
metadata:
  name: api
spec:
  selector: {app: api}
  ports:
  - name: http
    port: 80
    targetPort: 8080
`

const applyV2 = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  labels: {app: api, tier: backend}
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: app
        image: busybox:1.36
        command: [sleep, infinity]
---
apiVersion: v1
kind: Service
metadata:
  name: api
spec:
  selector: {app: api}
  ports:
  - name: http
    port: 80
    targetPort: 8080
  - name: metrics
    port: 9090
    targetPort: 9090
`

// ---- tests ----

// TestCreateGet covers create -f of a multi-document manifest and the server-side tables and
// YAML that `kubectl get` prints.
func TestCreateGet(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	out := k.okIn(appManifest, "create", "-f", "-")
	expectContains(t, "create -f output", out,
		"deployment.apps/web created", "service/web created", "configmap/web-config created")

	t.Run("deployments table", func(t *testing.T) {
		tab := parseTable(t, k.ok("get", "deployments"))
		expectHeader(t, "get deployments", tab, "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE")
		r := tab.row(t, "web")
		// Nothing runs pods here, so only the desired count (after the slash) is certain.
		if !regexp.MustCompile(`^\d+/2$`).MatchString(r["READY"]) || r["AGE"] == "" {
			t.Errorf("deployment row %v: want READY n/2 and an AGE", r)
		}
	})
	t.Run("services table", func(t *testing.T) {
		tab := parseTable(t, k.ok("get", "services"))
		expectHeader(t, "get services", tab, "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE")
		r := tab.row(t, "web")
		want := map[string]string{"TYPE": "ClusterIP", "EXTERNAL-IP": "<none>", "PORT(S)": "80/TCP"}
		for col, v := range want {
			if r[col] != v {
				t.Errorf("service row %s = %q, want %q (row %v)", col, r[col], v, r)
			}
		}
		if !regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+$`).MatchString(r["CLUSTER-IP"]) {
			t.Errorf("service CLUSTER-IP %q is not an allocated IPv4 address", r["CLUSTER-IP"])
		}
	})
	t.Run("configmaps table", func(t *testing.T) {
		tab := parseTable(t, k.ok("get", "configmaps"))
		expectHeader(t, "get configmaps", tab, "NAME", "DATA", "AGE")
		if r := tab.row(t, "web-config"); r["DATA"] != "2" {
			t.Errorf("configmap DATA = %q, want 2", r["DATA"])
		}
	})
	t.Run("pods table and wide", func(t *testing.T) {
		k.okIn(podManifest, "create", "-f", "-")
		// Play kubelet: report an IP through the status subresource.
		k.ok("patch", "pod", "web-0", "--subresource=status", "--type=merge",
			"-p", `{"status":{"phase":"Running","podIP":"10.244.1.5","podIPs":[{"ip":"10.244.1.5"}]}}`)
		tab := parseTable(t, k.ok("get", "pods"))
		expectHeader(t, "get pods", tab, "NAME", "READY", "STATUS", "RESTARTS", "AGE")
		if r := tab.row(t, "web-0"); r["READY"] != "0/1" || r["STATUS"] != "Running" || r["RESTARTS"] != "0" {
			t.Errorf("pod row %v: want READY 0/1, STATUS Running, RESTARTS 0", r)
		}
		wide := parseTable(t, k.ok("get", "pods", "-o", "wide"))
		expectHeader(t, "get pods -o wide", wide,
			"NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES")
		if r := wide.row(t, "web-0"); r["IP"] != "10.244.1.5" || r["NODE"] != "node-1" {
			t.Errorf("wide pod row %v: want IP 10.244.1.5 on NODE node-1", r)
		}
	})
	t.Run("get -o yaml", func(t *testing.T) {
		var svc struct {
			Metadata struct {
				UID             string `json:"uid"`
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Spec map[string]any `json:"spec"`
		}
		out := k.ok("get", "service", "web", "-o", "yaml")
		if err := yaml.Unmarshal([]byte(out), &svc); err != nil {
			t.Fatalf("service YAML does not parse: %v\n%s", err, out)
		}
		if svc.Metadata.UID == "" || svc.Metadata.ResourceVersion == "" {
			t.Errorf("service YAML lacks metadata.uid or resourceVersion:\n%s", out)
		}
		// Defaults the server fills in, as kube-apiserver does.
		for field, want := range map[string]any{"sessionAffinity": "None", "type": "ClusterIP",
			"internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack"} {
			if svc.Spec[field] != want {
				t.Errorf("service spec.%s = %v, want %v\n%s", field, svc.Spec[field], want, out)
			}
		}
		k.expectJSONPath("service/web", "{.spec.ports[0].protocol}", "TCP")
		k.expectJSONPath("deployment/web",
			"{.spec.strategy.type} {.spec.revisionHistoryLimit} {.spec.progressDeadlineSeconds}",
			"RollingUpdate 10 600")
		k.expectJSONPath("deployment/web",
			"{.spec.template.spec.restartPolicy} {.spec.template.spec.dnsPolicy} {.spec.template.spec.containers[0].imagePullPolicy}",
			"Always ClusterFirst IfNotPresent")
	})
}

// TestApply covers client-side apply: create, a three-way strategic merge update, a no-op,
// and reverting to the first manifest (which must drop what it no longer declares).
func TestApply(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	runSteps(t, []step{
		{"first apply creates", func(t *testing.T) {
			out := k.okIn(applyV1, "apply", "-f", "-")
			expectContains(t, "apply output", out, "deployment.apps/api created", "service/api created")
			if ann := k.jsonpath("deployment/api", `{.metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration}`); ann == "" {
				t.Errorf("apply did not store the last-applied-configuration annotation")
			}
		}},
		{"changed manifest is configured", func(t *testing.T) {
			out := k.okIn(applyV2, "apply", "-f", "-")
			expectContains(t, "apply output", out, "deployment.apps/api configured", "service/api configured")
			k.expectJSONPath("deployment/api", "{.spec.replicas} {.metadata.labels.tier}", "2 backend")
			// The allocated clusterIP is not in the manifest: the patch must have kept it.
			k.expectJSONPath("service/api", `{range .spec.ports[*]}{.name}:{.port}->{.targetPort} {end}`,
				"http:80->8080 metrics:9090->9090 ")
			if ip := k.jsonpath("service/api", "{.spec.clusterIP}"); ip == "" {
				t.Errorf("service lost its clusterIP in the apply patch")
			}
		}},
		{"same manifest is unchanged", func(t *testing.T) {
			rv := k.jsonpath("deployment/api", "{.metadata.resourceVersion}")
			out := k.okIn(applyV2, "apply", "-f", "-")
			expectContains(t, "apply output", out, "deployment.apps/api unchanged", "service/api unchanged")
			k.expectJSONPath("deployment/api", "{.metadata.resourceVersion}", rv)
		}},
		{"reverting drops removed fields", func(t *testing.T) {
			out := k.okIn(applyV1, "apply", "-f", "-")
			expectContains(t, "apply output", out, "deployment.apps/api configured", "service/api configured")
			k.expectJSONPath("deployment/api", "{.spec.replicas} {.metadata.labels}", `1 {"app":"api"}`)
			k.expectJSONPath("service/api", `{range .spec.ports[*]}{.name} {end}`, "http ")
		}},
	})
}

// TestServerDryRun checks that --dry-run=server reports what it would do and stores nothing.
func TestServerDryRun(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry\ndata:\n  key: %s\n"

	out := k.okIn(fmt.Sprintf(cm, "one"), "apply", "--dry-run=server", "-f", "-")
	expectContains(t, "dry-run apply of a new object", out, "configmap/dry created (server dry run)")
	k.expectNotFound("configmap/dry")

	k.okIn(fmt.Sprintf(cm, "one"), "apply", "-f", "-")
	rv := k.jsonpath("configmap/dry", "{.metadata.resourceVersion}")
	out = k.okIn(fmt.Sprintf(cm, "two"), "apply", "--dry-run=server", "-f", "-")
	expectContains(t, "dry-run apply of a change", out, "configmap/dry configured (server dry run)")
	k.expectJSONPath("configmap/dry", "{.data.key} {.metadata.resourceVersion}", "one "+rv)
}

// syncBuffer is an io.Writer that can be read while a process writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// watcher is a background `kubectl get -w`.
type watcher struct {
	cmd            *exec.Cmd
	cancel         context.CancelFunc
	stdout, stderr syncBuffer
	done           chan struct{}
}

func (k kc) startWatch(args ...string) *watcher {
	k.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	full := append([]string{"--kubeconfig", env.kubeconfig, "--cache-dir", env.cacheDir, "-n", k.ns}, args...)
	w := &watcher{cancel: cancel, done: make(chan struct{})}
	w.cmd = exec.CommandContext(ctx, env.kubectl, full...)
	w.cmd.Env = env.kubectlEnv
	w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	w.cmd.Cancel = func() error { return syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL) }
	if err := w.cmd.Start(); err != nil {
		cancel()
		k.t.Fatalf("start kubectl %s: %v", strings.Join(args, " "), err)
	}
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	k.t.Cleanup(w.stop)
	return w
}

// stop kills the watcher and waits for it; safe to call more than once.
func (w *watcher) stop() {
	w.cancel()
	<-w.done
}

// waitFor waits until the watch output matches pattern.
func (w *watcher) waitFor(t *testing.T, pattern string) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(watchTimeout)
	for !re.MatchString(w.stdout.String()) {
		select {
		case <-w.done:
			t.Fatalf("watcher exited before output matched %s\n--- stdout ---\n%s--- stderr ---\n%s",
				pattern, w.stdout.String(), w.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			w.stop()
			t.Fatalf("watch output did not match %s within %v\n--- stdout ---\n%s--- stderr ---\n%s",
				pattern, watchTimeout, w.stdout.String(), w.stderr.String())
		}
	}
}

// TestWatch runs `kubectl get -w` in the background and changes the watched object with a
// second kubectl. Each case first waits for the initial listing, so the change is certain to
// arrive as a watch event rather than in the list.
func TestWatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		create  []string // creates the watched object
		watch   []string // kubectl get -w arguments
		initial string   // pattern of the listing printed before the change
		change  [][]string
		want    []string // patterns that must appear afterwards, in this order
	}{
		{
			name:    "configmaps with events",
			create:  []string{"create", "configmap", "watched", "--from-literal=a=b"},
			watch:   []string{"get", "configmaps", "-w", "--output-watch-events", "-L", "color"},
			initial: `(?m)^ADDED\s+watched\s`,
			change: [][]string{
				{"label", "configmap", "watched", "color=blue"},
				{"delete", "configmap", "watched"},
			},
			want: []string{`(?m)^MODIFIED\s+watched\s.*\sblue\s*$`, `(?m)^DELETED\s+watched\s`},
		},
		{
			name:    "single pod",
			create:  []string{"run", "watched-pod", "--image=nginx:1.27"},
			watch:   []string{"get", "pod", "watched-pod", "-w", "-L", "stage"},
			initial: `(?m)^watched-pod\s+0/1\s+Pending\s`,
			change:  [][]string{{"label", "pod", "watched-pod", "stage=canary"}},
			want:    []string{`(?m)^watched-pod\s.*\scanary\s*$`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newNamespace(t)
			k.ok(tc.create...)
			w := k.startWatch(tc.watch...)
			w.waitFor(t, tc.initial)
			for _, c := range tc.change {
				k.ok(c...)
			}
			for _, p := range tc.want {
				w.waitFor(t, p)
			}
			w.stop()
		})
	}
}

// TestDescribe checks kubectl's describe of a pod and a service, which reads the object plus
// related lists (events, endpoints) through several requests.
func TestDescribe(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	k.okIn(appManifest, "create", "-f", "-")
	k.ok("run", "described", "--image=nginx:1.27", "--labels=app=web,tier=front")

	out := k.ok("describe", "pod", "described")
	expectMatch(t, "describe pod", out,
		`(?m)^Name:\s+described$`,
		`(?m)^Namespace:\s+`+regexp.QuoteMeta(k.ns)+`$`,
		`(?m)^Labels:\s+app=web$`,
		`(?m)^\s+tier=front$`,
		`(?m)^Status:\s+Pending$`,
		`(?m)^Containers:$`,
		`(?m)^\s+Image:\s+nginx:1\.27$`,
		`(?m)^QoS Class:\s+BestEffort$`)

	out = k.ok("describe", "service", "web")
	expectMatch(t, "describe service", out,
		`(?m)^Name:\s+web$`,
		`(?m)^Selector:\s+app=web$`,
		`(?m)^Type:\s+ClusterIP$`,
		`(?m)^IP:\s+\d+\.\d+\.\d+\.\d+$`,
		`(?m)^Port:\s+http\s+80/TCP$`,
		`(?m)^TargetPort:\s+80/TCP$`,
		`(?m)^Session Affinity:\s+None$`)
}

// TestModify walks one set of objects through label, annotate, the three patch types, replace
// and scale.
func TestModify(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	k.okIn(applyV2, "create", "-f", "-")
	k.ok("create", "configmap", "settings", "--from-literal=a=1")
	// A second container shows that a strategic merge patch merges containers by name.
	k.ok("patch", "deployment", "api", "--type=json", "-p",
		`[{"op":"add","path":"/spec/template/spec/containers/-","value":{"name":"sidecar","image":"busybox:1.36"}}]`)

	runSteps(t, []step{
		{"label", func(t *testing.T) {
			expectContains(t, "label output", k.ok("label", "configmap", "settings", "env=prod"), "configmap/settings labeled")
			k.expectJSONPath("configmap/settings", "{.metadata.labels.env}", "prod")
			k.ok("label", "configmap", "settings", "env=dev", "--overwrite")
			k.expectJSONPath("configmap/settings", "{.metadata.labels.env}", "dev")
			expectContains(t, "unlabel output", k.ok("label", "configmap", "settings", "env-"), "configmap/settings unlabeled")
			k.expectJSONPath("configmap/settings", "{.metadata.labels}", "")
		}},
		{"annotate", func(t *testing.T) {
			expectContains(t, "annotate output", k.ok("annotate", "configmap", "settings", "owner=team-a"), "configmap/settings annotated")
			k.expectJSONPath("configmap/settings", "{.metadata.annotations.owner}", "team-a")
		}},
		{"strategic merge patch", func(t *testing.T) {
			out := k.ok("patch", "deployment", "api", "-p",
				`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"busybox:1.37"}]}}}}`)
			expectContains(t, "patch output", out, "deployment.apps/api patched")
			k.expectJSONPath("deployment/api", `{range .spec.template.spec.containers[*]}{.name}={.image} {end}`,
				"app=busybox:1.37 sidecar=busybox:1.36 ")
			// Service ports merge on their port number: only 9090's targetPort changes.
			k.ok("patch", "service", "api", "-p", `{"spec":{"ports":[{"port":9090,"targetPort":9191}]}}`)
			k.expectJSONPath("service/api", `{range .spec.ports[*]}{.name}:{.port}->{.targetPort} {end}`,
				"http:80->8080 metrics:9090->9191 ")
		}},
		{"merge patch", func(t *testing.T) {
			k.ok("patch", "configmap", "settings", "--type=merge", "-p", `{"data":{"b":"2"}}`)
			k.expectJSONPath("configmap/settings", "{.data}", `{"a":"1","b":"2"}`)
			k.ok("patch", "configmap", "settings", "--type=merge", "-p", `{"data":{"a":null}}`)
			k.expectJSONPath("configmap/settings", "{.data}", `{"b":"2"}`)
			// Unlike the strategic patch above, a merge patch replaces lists whole.
			k.ok("patch", "service", "api", "--type=merge", "-p", `{"spec":{"ports":[{"name":"only","port":7070}]}}`)
			k.expectJSONPath("service/api", `{range .spec.ports[*]}{.name}:{.port} {end}`, "only:7070 ")
		}},
		{"json patch", func(t *testing.T) {
			k.ok("patch", "configmap", "settings", "--type=json", "-p",
				`[{"op":"add","path":"/data/c","value":"3"},{"op":"replace","path":"/data/b","value":"20"}]`)
			k.expectJSONPath("configmap/settings", "{.data}", `{"b":"20","c":"3"}`)
			rv := k.jsonpath("configmap/settings", "{.metadata.resourceVersion}")
			// A failing "test" operation rejects the whole patch.
			k.fail("patch", "configmap", "settings", "--type=json", "-p",
				`[{"op":"remove","path":"/data/c"},{"op":"test","path":"/data/b","value":"nope"}]`)
			k.expectJSONPath("configmap/settings", "{.data} {.metadata.resourceVersion}", `{"b":"20","c":"3"} `+rv)
		}},
		{"replace", func(t *testing.T) {
			var obj map[string]any
			out := k.ok("get", "configmap", "settings", "-o", "yaml")
			if err := yaml.Unmarshal([]byte(out), &obj); err != nil {
				t.Fatalf("configmap YAML does not parse: %v\n%s", err, out)
			}
			obj["data"].(map[string]any)["replaced"] = "yes"
			data, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "settings.yaml")
			if err := os.WriteFile(file, data, 0o600); err != nil {
				t.Fatal(err)
			}
			expectContains(t, "replace output", k.ok("replace", "-f", file), "configmap/settings replaced")
			k.expectJSONPath("configmap/settings", "{.data.replaced} {.metadata.annotations.owner}", "yes team-a")
			// The file still carries the old resourceVersion: a second replace must conflict.
			r := k.fail("replace", "-f", file)
			expectContains(t, "stale replace", r.stderr, "(Conflict)", "the object has been modified")
		}},
		{"scale", func(t *testing.T) {
			expectContains(t, "scale output", k.ok("scale", "deployment", "api", "--replicas=3"), "deployment.apps/api scaled")
			k.expectJSONPath("deployment/api", "{.spec.replicas}", "3")
			if got := k.ok("get", "deployment", "api", "--subresource=scale", "-o", "jsonpath={.spec.replicas}"); got != "3" {
				t.Errorf("scale subresource spec.replicas = %q, want 3", got)
			}
		}},
	})
}

// TestDelete checks that kubectl's delete returns once the object is gone, after which get
// reports NotFound.
func TestDelete(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	// The pod is not bound to a node, so like in Kubernetes it is deleted at once; a bound pod
	// would wait for a kubelet that does not exist here (see the graceful case below).
	k.ok("run", "doomed", "--image=nginx:1.27")
	k.ok("create", "configmap", "doomed", "--from-literal=a=b")
	for _, tc := range []struct{ kind, resource, printed string }{
		{"pod", "pods", `pod "doomed" deleted`},
		{"configmap", "configmaps", `configmap "doomed" deleted`},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			expectContains(t, "delete output", k.ok("delete", tc.kind, "doomed"), tc.printed)
			r := k.fail("get", tc.kind, "doomed")
			expectContains(t, "get after delete", r.stderr, "(NotFound)", tc.resource+` "doomed" not found`)
		})
	}

	t.Run("graceful pod", func(t *testing.T) {
		k.okIn(podManifest, "create", "-f", "-")
		k.ok("delete", "pod", "web-0", "--wait=false")
		// Without a kubelet to confirm, the pod stays, marked with the default grace period.
		k.expectJSONPath("pod/web-0", "{.metadata.deletionGracePeriodSeconds}", "30")
		if ts := k.jsonpath("pod/web-0", "{.metadata.deletionTimestamp}"); ts == "" {
			t.Errorf("gracefully deleted pod has no deletionTimestamp")
		}
		expectContains(t, "force delete output",
			k.ok("delete", "pod", "web-0", "--grace-period=0", "--force"), `pod "web-0" force deleted`)
		k.expectNotFound("pod/web-0")
	})
}

// TestAPIResources checks discovery as kubectl shows it, including short names.
func TestAPIResources(t *testing.T) {
	t.Parallel()
	tab := parseTable(t, kc{t: t}.ok("api-resources"))
	expectHeader(t, "api-resources", tab, "NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND")
	for _, want := range []map[string]string{
		{"NAME": "pods", "SHORTNAMES": "po", "APIVERSION": "v1", "NAMESPACED": "true", "KIND": "Pod"},
		{"NAME": "services", "SHORTNAMES": "svc", "APIVERSION": "v1", "NAMESPACED": "true", "KIND": "Service"},
		{"NAME": "namespaces", "SHORTNAMES": "ns", "APIVERSION": "v1", "NAMESPACED": "false", "KIND": "Namespace"},
		{"NAME": "deployments", "SHORTNAMES": "deploy", "APIVERSION": "apps/v1", "NAMESPACED": "true", "KIND": "Deployment"},
		{"NAME": "endpointslices", "SHORTNAMES": "", "APIVERSION": "discovery.k8s.io/v1", "NAMESPACED": "true", "KIND": "EndpointSlice"},
		{"NAME": "leases", "SHORTNAMES": "", "APIVERSION": "coordination.k8s.io/v1", "NAMESPACED": "true", "KIND": "Lease"},
	} {
		got := tab.row(t, want["NAME"])
		for col, v := range want {
			if got[col] != v {
				t.Errorf("api-resources %s: %s = %q, want %q", want["NAME"], col, got[col], v)
			}
		}
	}
	// Short names resolve through the same discovery data.
	k := newNamespace(t)
	k.ok("create", "service", "clusterip", "short", "--tcp=80:80")
	if out := k.ok("get", "svc,deploy,po", "-o", "name"); strings.TrimSpace(out) != "service/short" {
		t.Errorf("get svc,deploy,po -o name = %q, want service/short", out)
	}
}

// TestInvalid checks 422 responses: kubectl shows "is invalid" with the offending field path,
// and nothing is stored.
func TestInvalid(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	cases := []struct {
		name  string
		stdin string
		args  []string
		obj   string
		wants []string
	}{
		{
			name:  "service port 0",
			args:  []string{"create", "service", "clusterip", "bad", "--tcp=0:80"},
			obj:   "service/bad",
			wants: []string{`Service "bad" is invalid`, "spec.ports[0].port", "Invalid value: 0"},
		},
		{
			name:  "container name",
			stdin: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad-pod\nspec:\n  containers:\n  - name: Bad_Name\n    image: nginx\n",
			args:  []string{"create", "-f", "-"},
			obj:   "pod/bad-pod",
			wants: []string{`Pod "bad-pod" is invalid`, "spec.containers[0].name", `Invalid value: "Bad_Name"`},
		},
		{
			name: "selector does not match template",
			stdin: `apiVersion: apps/v1
kind: Deployment
metadata:
  name: mismatch
spec:
  selector:
    matchLabels: {app: a}
  template:
    metadata:
      labels: {app: b}
    spec:
      containers:
      - name: c
        image: nginx
`,
			args:  []string{"apply", "-f", "-"},
			obj:   "deployment/mismatch",
			wants: []string{`Deployment "mismatch" is invalid`, "spec.template.metadata.labels"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kt := kc{t: t, ns: k.ns}
			// -v=6 logs each request with its status code, so the 422 itself can be checked.
			r := kt.failIn(tc.stdin, append(tc.args, "-v=6")...)
			expectContains(t, "stderr", r.stderr, append(tc.wants, "422 Unprocessable Entity")...)
			kt.expectNotFound(tc.obj)
		})
	}
}

// TestUnknownField checks strict field validation: kubectl create and apply send
// fieldValidation=Strict, so an unknown field is an error naming the field.
func TestUnknownField(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	const pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: typo\nspec:\n  containers:\n  - name: c\n    image: nginx\n    imagePullPolicyy: Always\n"
	r := k.failIn(pod, "create", "-f", "-", "-v=6")
	expectContains(t, "create with an unknown field", r.stderr,
		"fieldValidation=Strict", `unknown field "spec.containers[0].imagePullPolicyy"`)
	k.expectNotFound("pod/typo")

	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\ndata:\n  a: %s\n%s"
	r = k.failIn(fmt.Sprintf(cm, "one", "bogus: 1\n"), "create", "-f", "-")
	expectContains(t, "create with an unknown top-level field", r.stderr, `unknown field "bogus"`)
	k.expectNotFound("configmap/typo")

	// Apply to an existing object goes through PATCH, which must validate strictly too.
	k.okIn(fmt.Sprintf(cm, "one", ""), "apply", "-f", "-")
	r = k.failIn(fmt.Sprintf(cm, "two", "bogus: 1\n"), "apply", "-f", "-")
	expectContains(t, "apply patch with an unknown field", r.stderr, `unknown field "bogus"`)
	k.expectJSONPath("configmap/typo", "{.data.a}", "one")
}

// TestExplain checks that kubectl explain finds field docs in the served OpenAPI v3.
func TestExplain(t *testing.T) {
	t.Parallel()
	k := kc{t: t}
	for _, tc := range []struct {
		field string
		wants []string
	}{
		{"pod.spec.restartPolicy", []string{"KIND:       Pod", "FIELD: restartPolicy <string>", "DESCRIPTION:",
			"Restart policy for all containers within the pod"}},
		{"deployment.spec.replicas", []string{"GROUP:      apps", "FIELD: replicas <integer>", "Number of desired pods"}},
		{"service.spec.ports", []string{"FIELD: ports <[]ServicePort>", "targetPort"}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			expectContains(t, "explain "+tc.field, k.ok("explain", tc.field), tc.wants...)
		})
	}
}

// TestProtobufCreate covers the imperative create commands, which send protobuf bodies (the
// generic create -f path sends JSON).
func TestProtobufCreate(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	const proto = "Content-Type: application/vnd.kubernetes.protobuf"
	// -v=8 logs request headers, proving the body really was protobuf.
	name := k.ns + "-extra"
	r := kc{t: t}.run("", "create", "namespace", name, "-v=8")
	if r.err != nil {
		t.Fatalf("create namespace failed:\n%s", r)
	}
	expectContains(t, "create namespace", r.stdout+r.stderr, proto, "namespace/"+name+" created")
	kc{t: t}.expectJSONPath("namespace/"+name, "{.status.phase}", "Active")

	r = k.run("", "create", "configmap", "literal", "--from-literal=greeting=hello world", "--from-literal=n=42", "-v=8")
	if r.err != nil {
		t.Fatalf("create configmap failed:\n%s", r)
	}
	expectContains(t, "create configmap", r.stdout+r.stderr, proto, "configmap/literal created")
	k.expectJSONPath("configmap/literal", "{.data}", `{"greeting":"hello world","n":"42"}`)

	// Secret data are bytes fields in protobuf; JSON shows them base64-encoded.
	k.ok("create", "secret", "generic", "creds", "--from-literal=password=s3cr=t")
	k.expectJSONPath("secret/creds", "{.type} {.data.password}", "Opaque czNjcj10")

	k.ok("create", "deployment", "proto", "--image=nginx:1.27", "--replicas=2", "--port=80")
	k.expectJSONPath("deployment/proto", "{.spec.replicas} {.spec.template.spec.containers[0].ports[0].containerPort}", "2 80")
}

// TestServerSideApply covers apply --server-side with kubectl: create, a conflicting manager,
// --force-conflicts, kubectl diff, and the migration from client-side apply.
func TestServerSideApply(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	const deploy = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: %d
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: %s
`
	managers := func(obj string) string {
		return k.jsonpath(obj, `{range .metadata.managedFields[*]}{.manager}/{.operation} {end}`)
	}
	runSteps(t, []step{
		{"apply creates", func(t *testing.T) {
			out := k.okIn(fmt.Sprintf(deploy, 2, "nginx:1"), "apply", "--server-side", "-f", "-")
			expectContains(t, "apply output", out, "deployment.apps/web serverside-applied")
			k.expectJSONPath("deployment/web", "{.spec.replicas}", "2")
			if got := managers("deployment/web"); got != "kubectl/Apply " {
				t.Errorf("managers = %q, want kubectl's Apply", got)
			}
		}},
		{"another manager conflicts", func(t *testing.T) {
			r := k.failIn(fmt.Sprintf(deploy, 3, "nginx:1"), "apply", "--server-side", "--field-manager", "other", "-f", "-")
			expectContains(t, "conflict", r.stderr, `Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas`)
			k.expectJSONPath("deployment/web", "{.spec.replicas}", "2")
		}},
		{"force-conflicts takes the field", func(t *testing.T) {
			k.okIn(fmt.Sprintf(deploy, 3, "nginx:1"), "apply", "--server-side", "--field-manager", "other", "--force-conflicts", "-f", "-")
			k.expectJSONPath("deployment/web", "{.spec.replicas}", "3")
			if got := managers("deployment/web"); got != "kubectl/Apply other/Apply " && got != "other/Apply kubectl/Apply " {
				t.Errorf("managers = %q", got)
			}
		}},
		{"diff shows a change and stores nothing", func(t *testing.T) {
			rv := k.jsonpath("deployment/web", "{.metadata.resourceVersion}")
			for _, args := range [][]string{{"diff", "-f", "-"}, {"diff", "--server-side", "--force-conflicts", "-f", "-"}} {
				r := k.run(fmt.Sprintf(deploy, 3, "nginx:2"), args...)
				var ee *exec.ExitError
				if !errors.As(r.err, &ee) || ee.ExitCode() != 1 {
					t.Fatalf("kubectl diff: want exit 1 (differences found):\n%s", r)
				}
				expectContains(t, "diff", r.stdout, "-      - image: nginx:1", "+      - image: nginx:2")
			}
			r := k.run(fmt.Sprintf(deploy, 3, "nginx:1"), "diff", "--server-side", "--field-manager", "other", "-f", "-")
			if r.err != nil || r.stdout != "" {
				t.Errorf("diff of the live state: want no differences:\n%s", r)
			}
			k.expectJSONPath("deployment/web", "{.metadata.resourceVersion} {.spec.template.spec.containers[0].image}", rv+" nginx:1")
		}},
		{"client-side apply migrates to server-side", func(t *testing.T) {
			const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: migrated\ndata:\n  %s\n"
			k.okIn(fmt.Sprintf(cm, "a: one"), "apply", "-f", "-")
			if got := managers("configmap/migrated"); got != "kubectl-client-side-apply/Update " {
				t.Fatalf("managers after client-side apply = %q", got)
			}
			// The server-side manifest drops key a: kubectl hands the client-side manager's
			// fields to the server-side one, so dropping a removes it, without a conflict.
			k.okIn(fmt.Sprintf(cm, "b: two"), "apply", "--server-side", "-f", "-")
			k.expectJSONPath("configmap/migrated", "{.data}", `{"b":"two"}`)
			// As with kube-apiserver v1.36: kubectl's Apply, and the client-side manager's
			// entry turned into kubectl-last-applied's Apply.
			if got := managers("configmap/migrated"); got != "kubectl-last-applied/Apply kubectl/Apply " {
				t.Errorf("managers after migration = %q, want kubectl-last-applied's and kubectl's Apply", got)
			}
		}},
	})
}

// TestApplyListRoundTrip applies what `kubectl get -o yaml` prints for several objects: a
// kind: List. kubectl cannot check a List's fields on the server (List is not a served kind),
// so with its default --validate=strict it validates client-side against /openapi/v2.
//
// KNOWN SERVER BUG: kplane serves only /openapi/v3; GET /openapi/v2 is 404, so the default
// case fails with "error validating data: the server could not find the requested resource".
// kube-apiserver serves /openapi/v2 (kubectl fetches it as protobuf), and this round trip works
// there. The --validate=false case shows the server side of the List itself is fine.
func TestApplyListRoundTrip(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	for i, tc := range []struct {
		name  string
		extra []string
	}{
		{"validate=false", []string{"--validate=false"}},
		// Default validation checks a List against /openapi/v2 on the client.
		{"default validation", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Fresh objects per case: a get -o yaml carries resourceVersions, which make a second
			// apply of the same output a conflict (as with kube-apiserver).
			first, second := fmt.Sprint("first-", i), fmt.Sprint("second-", i)
			k.ok("create", "configmap", first, "--from-literal=a=1")
			k.ok("create", "configmap", second, "--from-literal=b=2")
			list := k.ok("get", "configmaps", first, second, "-o", "yaml")
			if !strings.Contains(list, "kind: List") {
				t.Fatalf("get of two objects -o yaml is not a List:\n%s", list)
			}
			r := kc{t: t, ns: k.ns}.run(list, append([]string{"apply", "-f", "-"}, tc.extra...)...)
			if r.err != nil {
				t.Fatalf("apply of a List failed:\n%s", r)
			}
			expectMatch(t, "apply of a List", r.stdout, "configmap/"+first+" configured", "configmap/"+second+" configured")
		})
	}
}
