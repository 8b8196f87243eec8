package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
)

// kubectl runs the real kubectl against the test apiserver with a kubeconfig and HOME of its
// own, so the user's ~/.kube is neither read nor written.
type kubectl struct {
	t          *testing.T
	kubeconfig string
	env        []string
	ns         string
}

func newKubectl(t *testing.T, ns string) kubectl {
	t.Helper()
	path := os.Getenv("KUBECTL")
	if path == "" {
		path = "kubectl"
	}
	if _, err := exec.LookPath(path); err != nil {
		t.Skipf("kubectl not found: %v", err)
	}
	dir := t.TempDir()
	k := kubectl{t: t, kubeconfig: filepath.Join(dir, "kubeconfig"), ns: ns}
	if err := os.WriteFile(k.kubeconfig, srv.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "HOME=") {
			k.env = append(k.env, kv)
		}
	}
	k.env = append(k.env, "HOME="+dir)
	return k
}

func (k kubectl) command(ctx context.Context, args ...string) *exec.Cmd {
	path := os.Getenv("KUBECTL")
	if path == "" {
		path = "kubectl"
	}
	full := append([]string{"--kubeconfig", k.kubeconfig, "-n", k.ns}, args...)
	cmd := exec.CommandContext(ctx, path, full...)
	cmd.Env = k.env
	// No parent-death signal: Linux sends it when the thread that forked kubectl ends, and
	// the agent in this process ends threads (each one that started a container's process
	// ends with it, see package mountns), so kubectl would be killed at random. The context
	// ends it instead.
	return cmd
}

// run runs kubectl to the end and returns its stdout, stderr and error.
func (k kubectl) run(args ...string) (string, string, error) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := k.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// ok runs kubectl and fails the test unless it succeeds.
func (k kubectl) ok(args ...string) string {
	k.t.Helper()
	out, errOut, err := k.run(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// fails runs kubectl, fails the test if it succeeds, and returns its stderr.
func (k kubectl) fails(args ...string) string {
	k.t.Helper()
	out, errOut, err := k.run(args...)
	if err == nil {
		k.t.Fatalf("kubectl %s succeeded: %q", strings.Join(args, " "), out)
	}
	return errOut
}

func runningPod(t *testing.T, pods *client.Typed[*corev1.Pod], name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	eventually(t, name+" Running", func() (bool, string) {
		var err error
		p, err = pods.Get(context.Background(), name)
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%+v", p.Status)
	})
	return p
}

func TestKubectlLogs(t *testing.T) {
	c := newClient(t)
	a := startAgent(t, c, "node-logs", "127.91.0.0/24")
	ns := testserver.Namespace(t, c, "node-logs-")
	k := newKubectl(t, ns)
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)

	eventually(t, "node's kubelet endpoint", func() (bool, string) {
		n, err := client.Resource[*corev1.Node](c, "nodes").Get(ctx, "node-logs")
		if err != nil {
			return false, err.Error()
		}
		port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
		return port != 0 && int(port) == a.Port(), fmt.Sprint(port, " want ", a.Port())
	})

	// "three" waits for a file the test creates, so -f must show a line printed after it started.
	script := `echo one; echo two; while [ ! -e "$HOME/go" ]; do sleep 0.05; done; echo three; sleep 100`
	if _, err := pods.Create(ctx, shPod(ns, "web", "node-logs", script, corev1.RestartPolicyAlways)); err != nil {
		t.Fatal(err)
	}
	p := runningPod(t, pods, "web")
	eventually(t, "both lines logged", func() (bool, string) {
		out, errOut, err := k.run("logs", "web")
		return err == nil && out == "one\ntwo\n", out + errOut
	})
	if out := k.ok("logs", "web", "--tail=1"); out != "two\n" {
		t.Errorf("--tail=1: %q", out)
	}
	if out := k.ok("logs", "web", "--tail=0"); out != "" {
		t.Errorf("--tail=0: %q", out)
	}
	if out := k.ok("logs", "web", "--limit-bytes=5"); out != "one\nt" {
		t.Errorf("--limit-bytes=5: %q", out)
	}
	if out := k.ok("logs", "pod/web", "-c", "main"); out != "one\ntwo\n" {
		t.Errorf("-c main: %q", out)
	}
	// Each line has the time it was written: --timestamps shows it, --since filters by it.
	stamped := strings.Split(strings.TrimSuffix(k.ok("logs", "web", "--timestamps"), "\n"), "\n")
	for i, want := range []string{"one", "two"} {
		ts, text, _ := strings.Cut(stamped[min(i, len(stamped)-1)], " ")
		if at, err := time.Parse(time.RFC3339Nano, ts); err != nil || time.Since(at) > time.Minute || text != want || len(stamped) != 2 {
			t.Errorf("--timestamps: %q", stamped)
		}
	}
	if out := k.ok("logs", "web", "--since=1h"); out != "one\ntwo\n" {
		t.Errorf("--since=1h: %q", out)
	}
	if out := k.ok("logs", "web", "--since-time="+time.Now().Add(time.Hour).Format(time.RFC3339)); out != "" {
		t.Errorf("--since-time in the future: %q", out)
	}
	if e := k.fails("logs", "web", "-c", "nope"); !strings.Contains(e, "container nope is not valid for pod web") {
		t.Errorf("unknown container: %s", e)
	}
	if e := k.fails("logs", "web", "--previous"); !strings.Contains(e, `previous terminated container "main" in pod "web" not found`) {
		t.Errorf("--previous without a restart: %s", e)
	}

	// -f streams the existing lines, then one written later.
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := k.command(fctx, "logs", "-f", "web")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl logs -f ended early: %s", stderr.String())
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatalf("kubectl logs -f: no line: %s", stderr.String())
		}
		return ""
	}
	if l1, l2 := next(), next(); l1 != "one" || l2 != "two" {
		t.Fatalf("-f first lines %q, %q", l1, l2)
	}
	if err := os.WriteFile(filepath.Join(ContainerDir(a.o.DataDir, p.UID, "main"), "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if l := next(); l != "three" {
		t.Fatalf("-f later line %q", l)
	}
	cancel()
	_ = cmd.Wait()
	for range lines { // the reader ends with kubectl's stdout
	}
}

func TestKubectlLogsPrevious(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-logs-prev", "127.92.0.0/24")
	ns := testserver.Namespace(t, c, "node-logs-prev-")
	k := newKubectl(t, ns)
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	if _, err := pods.Create(ctx, shPod(ns, "crash", "node-logs-prev", `echo "run $(date +%s%N)"; exit 1`, corev1.RestartPolicyAlways)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a restart", func() (bool, string) {
		p, err := pods.Get(ctx, "crash")
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount >= 2, fmt.Sprintf("%+v", p.Status)
	})
	out := k.ok("logs", "crash", "--previous")
	if !strings.HasPrefix(out, "run ") || strings.Count(out, "\n") != 1 {
		t.Errorf("--previous: %q, want the one line of one run", out)
	}
}

func TestKubectlLogsErrors(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-logs-err", "127.93.0.0/24")
	ns := testserver.Namespace(t, c, "node-logs-err-")
	k := newKubectl(t, ns)
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)

	two := shPod(ns, "two", "node-logs-err", "echo a; sleep 100", corev1.RestartPolicyAlways)
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "b", Image: "sh", Command: []string{"/bin/sh", "-c", "echo b; sleep 100"}})
	two.Spec.Containers[0].Name = "a"
	if _, err := pods.Create(ctx, two); err != nil {
		t.Fatal(err)
	}
	runningPod(t, pods, "two")
	// The API wants a container named; kubectl itself defaults to the first and says so.
	path := "/api/v1/namespaces/" + ns + "/pods/two/log"
	if e := k.fails("get", "--raw", path); !strings.Contains(e, "a container name must be specified for pod two, choose one of: [a b]") {
		t.Errorf("no container: %s", e)
	}
	eventually(t, "container b's log", func() (bool, string) {
		out, errOut, err := k.run("logs", "two", "-c", "b")
		return err == nil && out == "b\n", out + errOut
	})
	if _, e, _ := k.run("logs", "two"); !strings.Contains(e, `Defaulted container "a" out of: a, b`) {
		t.Errorf("kubectl's default container: %s", e)
	}

	unbound := shPod(ns, "unbound", "", "echo x", corev1.RestartPolicyAlways)
	if _, err := pods.Create(ctx, unbound); err != nil {
		t.Fatal(err)
	}
	if out := k.ok("logs", "unbound"); out != "" { // not scheduled: nothing ran, an empty log
		t.Errorf("unbound pod: log %q, want empty", out)
	}
	if e := k.fails("logs", "missing"); !strings.Contains(e, `pods "missing" not found`) {
		t.Errorf("missing pod: %s", e)
	}
	if e := k.fails("get", "--raw", path+"?container=a&tailLines=-1"); !strings.Contains(e, "tailLines") {
		t.Errorf("negative tailLines: %s", e)
	}

	disc := k.ok("get", "--raw", "/api/v1")
	if !strings.Contains(disc, `"name":"pods/log"`) {
		t.Errorf("pods/log not in discovery: %s", disc)
	}
}

// TestLogWriter: records become their text; partial records join the next; a record cut
// by the end of what was written so far is kept until its end arrives.
func TestLogWriter(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	ts := at.Format(time.RFC3339Nano)
	file := ts + " stdout F one\n" + ts + " stderr P tw\n" + ts + " stderr F o\nnot a record\n" + ts + " stdout F thr"
	cases := []struct {
		name string
		req  logRequest
		want string
	}{
		{"plain", logRequest{}, "one\ntwo\nnot a record\n"},
		{"timestamps", logRequest{timestamps: true}, ts + " one\n" + ts + " tw" + ts + " o\nnot a record\n"},
		{"since after", logRequest{since: at.Add(time.Second)}, "not a record\n"},
	}
	for _, tc := range cases {
		var out bytes.Buffer
		rec := httptest.NewRecorder()
		rec.Body = &out
		lw := &logWriter{out: &limitedFlusher{w: rec, rc: http.NewResponseController(rec), left: -1},
			in: bufio.NewReaderSize(strings.NewReader(file), 16), req: tc.req}
		if _, err := lw.copy(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if out.String() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, out.String(), tc.want)
		}
		if string(lw.partial) != ts+" stdout F thr" {
			t.Errorf("%s: kept %q of the unfinished record", tc.name, lw.partial)
		}
	}
}
