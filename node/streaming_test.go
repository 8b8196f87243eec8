package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport/spdy"
)

// testHTTPServerEnv, in a pod's environment, makes this test binary (as the pod's command)
// serve HTTP on $POD_IP:8080 instead of running tests: "/" answers "hello from $POD_NAME",
// "/bytes?n=N" N bytes.
const testHTTPServerEnv = "KPLANE_NODE_TEST_HTTP"

func serveTestHTTP() {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", os.Getenv("POD_NAME"))
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for n > 0 {
			m, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				fmt.Println("the client went away") // to the pod's log
				return
			}
			n -= m
		}
	})
	err := http.ListenAndServe(net.JoinHostPort(os.Getenv("POD_IP"), "8080"), mux)
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// httpPod runs this test binary as an HTTP server on port 8080 ("http"), Ready once it listens.
func httpPod(t *testing.T, ns, name, node string) *corev1.Pod {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: new(int64(1)), AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "main", Image: "test", Command: []string{exe},
				Env:   []corev1.EnvVar{{Name: testHTTPServerEnv, Value: "1"}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}},
					PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1},
			}}},
	}
}

func readyPod(t *testing.T, pods *client.Typed[*corev1.Pod], name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	eventually(t, name+" Ready", func() (bool, string) {
		var err error
		if p, err = pods.Get(context.Background(), name); err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", p.Status)
	})
	return p
}

// streamTest is what each streaming test starts from: a node agent of its own, a namespace,
// kubectl in it, and the pods API.
type streamTest struct {
	c    *client.Client
	ns   string
	k    kubectl
	pods *client.Typed[*corev1.Pod]
}

func newStreamTest(t *testing.T, node, cidr string) streamTest {
	t.Helper()
	c := newClient(t)
	startAgent(t, c, node, cidr)
	ns := testserver.Namespace(t, c, node+"-")
	return streamTest{c: c, ns: ns, k: newKubectl(t, ns), pods: client.Resource[*corev1.Pod](c, "pods").Namespace(ns)}
}

// create creates p and waits until it runs (ready: until it is Ready).
func (s streamTest) create(t *testing.T, p *corev1.Pod, ready bool) {
	t.Helper()
	if _, err := s.pods.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if ready {
		readyPod(t, s.pods, p.Name)
	} else {
		runningPod(t, s.pods, p.Name)
	}
}

// spdyOnly makes kubectl use SPDY for exec, attach, cp and port-forward (its fallback when the
// WebSocket upgrade fails), so that both protocols are tested.
var spdyOnly = []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}

// protocols are the ways kubectl can talk to the streaming endpoints: its first choice, and SPDY.
var protocols = []struct {
	name string
	env  []string
}{{"websocket", nil}, {"spdy", spdyOnly}}

// runIn runs kubectl with extra environment and stdin, returning its output and exit code.
func (k kubectl) runIn(env []string, stdin string, args ...string) (string, string, int) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := k.command(ctx, args...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		k.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

func TestKubectlExec(t *testing.T) {
	s := newStreamTest(t, "node-exec", "127.94.0.0/24")
	k := s.k
	pod := shPod(s.ns, "web", "node-exec", "sleep 1000", corev1.RestartPolicyAlways)
	pod.Spec.Containers[0].WorkingDir = "wd"
	s.create(t, pod, false)
	notExecutable := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(notExecutable, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			k := k
			k.t = t
			// stdout and stderr apart, the container's environment and working directory.
			out, errOut, code := k.runIn(proto.env, "", "exec", "web", "--", "sh", "-c", `echo "$GREETING $POD_NAME"; pwd; echo oops >&2`)
			if code != 0 || !strings.HasPrefix(out, "hi web\n/") || !strings.HasSuffix(out, "/main/wd\n") || errOut != "oops\n" {
				t.Errorf("exec: code %d, stdout %q, stderr %q", code, out, errOut)
			}
			// stdin, to its end.
			if out, errOut, code := k.runIn(proto.env, "one\ntwo\n", "exec", "-i", "web", "--", "sh", "-c", "cat; echo end"); code != 0 || out != "one\ntwo\nend\n" {
				t.Errorf("exec -i: code %d, stdout %q, stderr %q", code, out, errOut)
			}
			// Exit codes, as kubectl reports them and exits with them.
			if _, errOut, code := k.runIn(proto.env, "", "exec", "web", "--", "sh", "-c", "exit 3"); code != 3 || errOut != "command terminated with exit code 3\n" {
				t.Errorf("exit 3: code %d, stderr %q", code, errOut)
			}
			// A program that does not exist: 127, as a shell; one that cannot run: 126.
			if _, errOut, code := k.runIn(proto.env, "", "exec", "web", "--", "no-such-program"); code != 127 ||
				errOut != "exec: \"no-such-program\": executable file not found in $PATH\ncommand terminated with exit code 127\n" {
				t.Errorf("missing program: code %d, stderr %q", code, errOut)
			}
			if _, errOut, code := k.runIn(proto.env, "", "exec", "web", "--", notExecutable); code != 126 ||
				errOut != "exec: \""+notExecutable+"\": permission denied\ncommand terminated with exit code 126\n" {
				t.Errorf("program not executable: code %d, stderr %q", code, errOut)
			}
		})
	}
}

// TestKubectlExecSeesVolumes: an exec'd process is in the container's mount namespace, and
// its program is looked up in the container's PATH as the container sees its files: here a
// script in a ConfigMap volume mounted where the host has no directory.
func TestKubectlExecSeesVolumes(t *testing.T) {
	s := newStreamTest(t, "node-execvol", "127.105.0.0/24")
	ctx := context.Background()
	bin := "/opt/" + s.ns + "/bin" // does not exist on the host
	if _, err := client.Resource[*corev1.ConfigMap](s.c, "configmaps").Namespace(s.ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "tools"},
		Data:       map[string]string{"greet": "#!/bin/sh\necho \"hello from $1 in $(pwd)\"\n"}}); err != nil {
		t.Fatal(err)
	}
	pod := shPod(s.ns, "web", "node-execvol", "sleep 1000", corev1.RestartPolicyAlways)
	pod.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "tools"}, DefaultMode: new(int32(0o755))}}}}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "tools", MountPath: bin}}
	c.Env = append(c.Env, corev1.EnvVar{Name: "PATH", Value: bin + ":/usr/bin:/bin"})
	s.create(t, pod, false)
	if out, errOut, code := s.k.runIn(nil, "", "exec", "web", "--", "greet", "exec"); code != 0 || !strings.HasPrefix(out, "hello from exec in /") {
		t.Errorf("exec greet: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, errOut, code := s.k.runIn(nil, "", "exec", "web", "--", "ls", bin); code != 0 || out != "greet\n" {
		t.Errorf("exec ls: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat("/opt/" + s.ns); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mount path was made on the host: %v", err)
	}
}

func TestKubectlExecBadInput(t *testing.T) {
	s := newStreamTest(t, "node-exec-bad", "127.95.0.0/24")
	k, ns, pods, ctx := s.k, s.ns, s.pods, context.Background()

	// Two containers: one runs, one has ended; a third pod whose container never starts (its
	// ConfigMap is missing), one never scheduled.
	two := shPod(ns, "two", "node-exec-bad", "sleep 1000", corev1.RestartPolicyNever)
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "done", Image: "sh", Command: []string{"true"}})
	waiting := shPod(ns, "waiting", "node-exec-bad", "sleep 1000", corev1.RestartPolicyAlways)
	waiting.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}}}}
	unbound := shPod(ns, "unbound", "", "sleep 1000", corev1.RestartPolicyAlways)
	for _, p := range []*corev1.Pod{two, waiting, unbound} {
		if _, err := pods.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "one container of two ended, the other waiting", func() (bool, string) {
		t2, err1 := pods.Get(ctx, "two")
		w, err2 := pods.Get(ctx, "waiting")
		if err := errors.Join(err1, err2); err != nil {
			return false, err.Error()
		}
		ended := len(t2.Status.ContainerStatuses) == 2 && t2.Status.ContainerStatuses[1].State.Terminated != nil && t2.Status.ContainerStatuses[0].State.Running != nil
		configErr := len(w.Status.ContainerStatuses) == 1 && w.Status.ContainerStatuses[0].State.Waiting != nil &&
			w.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		return ended && configErr, fmt.Sprintf("%+v %+v", t2.Status.ContainerStatuses, w.Status.ContainerStatuses)
	})

	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			k := k
			k.t = t
			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"exec", "two", "-c", "done", "--", "true"}, `error: unable to upgrade connection: container not found ("done")` + "\n"},
				{[]string{"exec", "waiting", "--", "true"}, `error: unable to upgrade connection: container not found ("main")` + "\n"},
				{[]string{"attach", "two", "-c", "done"}, "error: unable to upgrade connection: container done not found in pod two_" + ns + "\n"},
				{[]string{"exec", "two", "-c", "nope", "--", "true"}, "Error from server (BadRequest): container nope is not valid for pod two\n"},
				{[]string{"exec", "unbound", "--", "true"}, "Error from server (BadRequest): pod unbound does not have a host assigned\n"},
				{[]string{"exec", "missing", "--", "true"}, `Error from server (NotFound): pods "missing" not found` + "\n"},
			} {
				if _, errOut, code := k.runIn(proto.env, "", tc.args...); code != 1 || !strings.HasSuffix(errOut, tc.want) {
					t.Errorf("kubectl %s: code %d, stderr %q, want it to end with %q", strings.Join(tc.args, " "), code, errOut, tc.want)
				}
			}
		})
	}
	// Not an upgrade: kube-apiserver's answer.
	if e := k.fails("get", "--raw", "/api/v1/namespaces/"+ns+"/pods/two/exec?command=true&container=main"); !strings.Contains(e, "Upgrade request required") {
		t.Errorf("exec without upgrade: %s", e)
	}
	disc := k.ok("get", "--raw", "/api/v1")
	for _, sub := range []string{`{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]}`,
		`{"name":"pods/attach","singularName":"","namespaced":true,"kind":"PodAttachOptions","verbs":["create","get"]}`,
		`{"name":"pods/portforward","singularName":"","namespaced":true,"kind":"PodPortForwardOptions","verbs":["create","get"]}`} {
		if !strings.Contains(disc, sub) {
			t.Errorf("discovery lacks %s", sub)
		}
	}

	// The pod deleted while a command runs in it: the command is killed with the container.
	started := make(chan struct{})
	type result struct {
		errOut string
		code   int
	}
	done := make(chan result)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := k.command(ctx, "exec", "two", "-c", "main", "--", "sh", "-c", "echo started; sleep 100")
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		stdout, _ := cmd.StdoutPipe()
		_ = cmd.Start()
		if line, _ := bufio.NewReader(stdout).ReadString('\n'); line == "started\n" {
			close(started)
		}
		_ = cmd.Wait()
		done <- result{errOut.String(), cmd.ProcessState.ExitCode()}
	}()
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("exec ended before the pod was deleted: %+v", r)
	}
	if err := pods.Delete(ctx, "two", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.code != 137 || r.errOut != "command terminated with exit code 137\n" {
		t.Errorf("exec in a deleted pod: %+v", r)
	}
}

// onTerminal runs kubectl on a new pseudo-terminal of 101 columns and 33 rows, types input once
// it has printed want, and returns what it printed and its exit code.
func (k kubectl) onTerminal(want, input string, args ...string) (string, int) {
	k.t.Helper()
	master, tty, err := openPTY()
	if err != nil {
		k.t.Fatal(err)
	}
	defer master.Close()
	if err := setTerminalSize(master, 101, 33); err != nil {
		k.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := k.command(ctx, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true} // no Pdeathsig: see command
	err = cmd.Start()
	tty.Close()
	if err != nil {
		k.t.Fatal(err)
	}
	var mu sync.Mutex
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return // EIO once kubectl has exited
			}
		}
	}()
	printed := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	eventually(k.t, fmt.Sprintf("kubectl to print %q", want), func() (bool, string) { return strings.Contains(printed(), want), printed() })
	if _, err := master.WriteString(input); err != nil {
		k.t.Fatal(err)
	}
	_ = cmd.Wait()
	<-read
	return printed(), cmd.ProcessState.ExitCode()
}

func TestKubectlExecAndAttachOnTerminal(t *testing.T) {
	s := newStreamTest(t, "node-tty", "127.96.0.0/24")
	k := s.k
	s.create(t, shPod(s.ns, "web", "node-tty", "sleep 1000", corev1.RestartPolicyAlways), false)
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			k := k
			k.t = t
			k.env = append(slices.Clone(k.env), proto.env...)
			out, code := k.onTerminal("xterm", "hello\r", "exec", "-it", "web", "--", "sh", "-c", `stty size; tty; echo "$TERM"; read x; echo "got $x"; exit 5`)
			if code != 5 || !strings.Contains(out, "33 101\r\n/dev/pts/") || !strings.Contains(out, "got hello\r\n") || !strings.Contains(out, "command terminated with exit code 5") {
				t.Errorf("exec -it: code %d, output %q", code, out)
			}
		})
	}

	// A container on a terminal of its own, with stdin: attach types into it and sees its output.
	term := shPod(s.ns, "term", "node-tty", `read x; echo "got $x"; sleep 0.2`, corev1.RestartPolicyNever)
	term.Spec.Containers[0].TTY, term.Spec.Containers[0].Stdin = true, true
	s.create(t, term, false)
	out, code := k.onTerminal("If you don't see a command prompt", "hello\r", "attach", "-it", "term")
	if code != 0 || !strings.Contains(out, "got hello\r\n") {
		t.Errorf("attach -it: code %d, output %q", code, out)
	}
	if logs := k.ok("logs", "term"); !strings.Contains(logs, "got hello") {
		t.Errorf("the terminal's output is not in the log: %q", logs)
	}
}

func TestKubectlAttach(t *testing.T) {
	s := newStreamTest(t, "node-attach", "127.97.0.0/24")
	k := s.k
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			k := k
			k.t = t
			// stdinOnce: the container reads what the first session sends, and its stdin ends
			// with that session's.
			name := "once-" + proto.name
			once := shPod(s.ns, name, "node-attach", `while read l; do echo "got $l"; echo "err $l" >&2; done; echo bye`, corev1.RestartPolicyNever)
			once.Spec.Containers[0].Stdin, once.Spec.Containers[0].StdinOnce = true, true
			s.create(t, once, false)
			out, errOut, code := k.runIn(proto.env, "a\nb\n", "attach", "-i", name)
			if code != 0 || out != "got a\ngot b\nbye\n" || !strings.Contains(errOut, "err a\nerr b\n") {
				t.Errorf("attach -i: code %d, stdout %q, stderr %q", code, out, errOut)
			}
			// Output only, until the container exits.
			name = "ticks-" + proto.name
			s.create(t, shPod(s.ns, name, "node-attach", `sleep 1.5; for i in 1 2 3; do echo "tick $i"; sleep 0.1; done`, corev1.RestartPolicyNever), false)
			if out, errOut, code := k.runIn(proto.env, "", "attach", name); code != 0 || !strings.HasSuffix(out, "tick 3\n") {
				t.Errorf("attach: code %d, stdout %q, stderr %q", code, out, errOut)
			}
		})
	}
}

func TestKubectlCp(t *testing.T) {
	s := newStreamTest(t, "node-cp", "127.98.0.0/24")
	k := s.k
	s.create(t, shPod(s.ns, "web", "node-cp", "sleep 1000", corev1.RestartPolicyAlways), false)
	src := t.TempDir()
	files := map[string]string{"a.txt": "alpha\n", "d/b.txt": "beta\n", "d/e/c.bin": strings.Repeat("\x00\xff", 100000)}
	for name, content := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			k := k
			k.t = t
			// Into the pod (relative paths are in the container's working directory), and back.
			in := "in-" + proto.name
			if _, errOut, code := k.runIn(proto.env, "", "cp", src, "web:"+in); code != 0 {
				t.Fatalf("cp to the pod: code %d, %s", code, errOut)
			}
			if out, _, _ := k.runIn(proto.env, "", "exec", "web", "--", "cat", in+"/d/b.txt"); out != "beta\n" {
				t.Errorf("file copied to the pod: %q", out)
			}
			back := filepath.Join(t.TempDir(), "back")
			if _, errOut, code := k.runIn(proto.env, "", "cp", "web:"+in, back); code != 0 {
				t.Fatalf("cp from the pod: code %d, %s", code, errOut)
			}
			for name, content := range files {
				if got, err := os.ReadFile(filepath.Join(back, name)); err != nil || string(got) != content {
					t.Errorf("%s copied back: %d bytes, %v", name, len(got), err)
				}
			}
			one := filepath.Join(t.TempDir(), "one.txt")
			if _, errOut, code := k.runIn(proto.env, "", "cp", "web:"+in+"/a.txt", one); code != 0 {
				t.Fatalf("cp a file from the pod: code %d, %s", code, errOut)
			}
			if got, _ := os.ReadFile(one); string(got) != "alpha\n" {
				t.Errorf("one file copied back: %q", got)
			}
		})
	}
}

// forwarding runs kubectl port-forward target :remote and returns the local address it
// forwards from, the command (which ends with the test at the latest) and its stderr (to read
// once it has ended).
func (k kubectl) forwarding(env []string, target, remote string) (string, *exec.Cmd, *bytes.Buffer) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := k.command(ctx, "port-forward", target, ":"+remote)
	cmd.Env = append(cmd.Env, env...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		k.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	forwarding := regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> \d+$`)
	for lines.Scan() {
		if m := forwarding.FindStringSubmatch(lines.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return "127.0.0.1:" + m[1], cmd, &errOut
		}
	}
	cancel()
	_ = cmd.Wait()
	k.t.Fatalf("kubectl port-forward %s: %s", target, errOut.String())
	return "", nil, nil
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return string(body)
}

func TestKubectlPortForward(t *testing.T) {
	s := newStreamTest(t, "node-pf", "127.99.0.0/24")
	k := s.k
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: s.ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}}
	if _, err := client.Resource[*corev1.Service](s.c, "services").Namespace(s.ns).Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	s.create(t, httpPod(t, s.ns, "web", "node-pf"), true)

	goneBefore := 0
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			k := k
			k.t = t
			for _, target := range []struct{ name, port string }{{"pod/web", "8080"}, {"svc/web", "80"}} {
				addr, _, _ := k.forwarding(proto.env, target.name, target.port)
				for range 3 { // one session, several connections
					if got := httpGet(t, "http://"+addr+"/"); got != "hello from web\n" {
						t.Errorf("%s: %q", target.name, got)
					}
				}
				const n = 8 << 20
				if got := httpGet(t, fmt.Sprintf("http://%s/bytes?n=%d", addr, n)); len(got) != n {
					t.Errorf("%s: %d bytes, want %d", target.name, len(got), n)
				}
			}
			// A download given up: the pod's side ends too (it would write for minutes).
			addr, _, _ := k.forwarding(proto.env, "pod/web", "8080")
			resp, err := http.Get(fmt.Sprintf("http://%s/bytes?n=%d", addr, 1<<40))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			eventually(t, "the pod to see the client go", func() (bool, string) {
				logs, _, _ := k.run("logs", "web")
				return strings.Count(logs, "the client went away") == goneBefore+1, logs
			})
			goneBefore++
			// Nothing listens on the port: the connection's error reaches kubectl, which ends its
			// session on it (client-go's choice since v1.23; the session itself survives, see
			// TestPortForwardSessionSurvivesAClosedPort).
			addr, cmd, errOut := k.forwarding(proto.env, "pod/web", "9999")
			if conn, err := net.Dial("tcp", addr); err == nil {
				_, _ = io.Copy(io.Discard, conn)
				conn.Close()
			}
			exited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(exited) }()
			select {
			case <-exited:
				if e := errOut.String(); !strings.Contains(e, "error forwarding port 9999 to pod web") || !strings.Contains(e, "connect: connection refused") ||
					!strings.Contains(e, "lost connection to pod") {
					t.Errorf("port-forward to a closed port: %s", e)
				}
			case <-time.After(5 * time.Second):
				// The agent resets the streams of a connection it could not make (the kubelet's
				// library does); when the reset reaches kubectl before its data stream is set
				// up, kubectl says so and keeps the session, as against a kubelet.
				_ = cmd.Process.Kill()
				<-exited
				if e := errOut.String(); !strings.Contains(e, "error creating forwarding stream for port") {
					t.Errorf("port-forward to a closed port: kubectl went on without a word: %s", e)
				}
			}
		})
	}
}

// TestPortForwardSessionSurvivesAClosedPort drives a port-forward session through the
// apiserver with client-go's SPDY dialer: a connection to a closed port gets its error on its
// error stream, and the next connection in the same session reaches an open port.
func TestPortForwardSessionSurvivesAClosedPort(t *testing.T) {
	s := newStreamTest(t, "node-pf-err", "127.100.0.0/24")
	s.create(t, httpPod(t, s.ns, "web", "node-pf-err"), true)
	ns := s.ns
	rt, upgrader, err := spdy.RoundTripperFor(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL + "/api/v1/namespaces/" + ns + "/pods/web/portforward")
	conn, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u).Dial("portforward.k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	forward := func(id, port int, request string) (data, errs string) {
		h := http.Header{}
		h.Set(corev1.StreamType, corev1.StreamTypeError)
		h.Set(corev1.PortHeader, strconv.Itoa(port))
		h.Set(corev1.PortForwardRequestIDHeader, strconv.Itoa(id))
		errStream, err := conn.CreateStream(h)
		if err != nil {
			t.Fatal(err)
		}
		_ = errStream.Close() // nothing to send on it
		defer conn.RemoveStreams(errStream)
		h.Set(corev1.StreamType, corev1.StreamTypeData)
		// The agent may fail the connection, and reset this stream, before it is set up.
		if dataStream, err := conn.CreateStream(h); err == nil {
			defer conn.RemoveStreams(dataStream)
			_, _ = io.WriteString(dataStream, request)
			_ = dataStream.Close() // the end of the request
			got, _ := io.ReadAll(dataStream)
			data = string(got)
		}
		msg, _ := io.ReadAll(errStream)
		return data, string(msg)
	}
	if _, errs := forward(0, 9999, "hello?"); !strings.Contains(errs, "error forwarding port 9999 to pod web") || !strings.Contains(errs, "connection refused") {
		t.Errorf("closed port: error stream %q", errs)
	}
	if data, errs := forward(1, 8080, "GET / HTTP/1.0\r\n\r\n"); !strings.HasSuffix(data, "\r\n\r\nhello from web\n") || errs != "" {
		t.Errorf("open port after a closed one: data %q, error stream %q", data, errs)
	}
}
