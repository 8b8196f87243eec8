package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// fastProbe probes every second, failing after threshold failures.
func fastProbe(h corev1.ProbeHandler, threshold int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: threshold}
}

func execProbe(threshold int32, argv ...string) *corev1.Probe {
	return fastProbe(corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: argv}}, threshold)
}

func getPod(ctx context.Context, t *testing.T, c *client.Client, ns, name string) (*corev1.Pod, string) {
	t.Helper()
	p, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Get(ctx, name)
	if err != nil {
		return nil, err.Error()
	}
	return p, fmt.Sprintf("%+v", p.Status)
}

// TestProbes covers readiness (exec passing late, tcpSocket never passing, httpGet with a
// named port and a header), startup gating, and liveness failures restarting the container.
func TestProbes(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-probe", "127.83.0.0/24")
	ns := testserver.Namespace(t, c, "node-probe-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)

	// A server in the test process stands in for the container's HTTP endpoint.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && r.Header.Get("X-Probe") == "yes" && strings.HasPrefix(r.UserAgent(), "kube-probe/") {
			return
		}
		http.Error(rw, "no", http.StatusInternalServerError)
	})}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	httpProbe := func(path string, threshold int32) *corev1.Probe {
		return fastProbe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: path, Port: intstr.FromString("http"),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "yes"}}}}, threshold)
	}

	// A port nobody listens on: take one and close it.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	_ = closed.Close()

	late := shPod(ns, "late", "node-probe", "sleep 2; touch ready; sleep 100", corev1.RestartPolicyAlways)
	late.Spec.Containers[0].ReadinessProbe = execProbe(3, "test", "-f", "ready")

	never := shPod(ns, "never", "node-probe", "sleep 100", corev1.RestartPolicyAlways)
	never.Spec.Containers[0].ReadinessProbe = fastProbe(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
		Host: "127.0.0.1", Port: intstr.FromInt32(int32(closedPort))}}, 1)

	web := shPod(ns, "web", "node-probe", "sleep 100", corev1.RestartPolicyAlways)
	web.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: port}}
	web.Spec.Containers[0].ReadinessProbe = httpProbe("/healthz", 3)

	// Not started (so not ready, having no readiness probe) until its startup probe passes.
	slow := shPod(ns, "slow", "node-probe", "sleep 2; touch started; sleep 100", corev1.RestartPolicyAlways)
	slow.Spec.Containers[0].StartupProbe = execProbe(10, "test", "-f", "started")

	sick := shPod(ns, "sick", "node-probe", "sleep 100", corev1.RestartPolicyAlways)
	sick.Spec.TerminationGracePeriodSeconds = new(int64(1))
	sick.Spec.Containers[0].Ports = web.Spec.Containers[0].Ports
	sick.Spec.Containers[0].LivenessProbe = httpProbe("/broken", 2)

	for _, p := range []*corev1.Pod{late, never, web, slow, sick} {
		if _, err := pods.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	// late and slow: Running but neither ready (nor, for slow, started) before their files exist.
	for _, name := range []string{"late", "slow"} {
		var p *corev1.Pod
		eventually(t, name+" Running", func() (bool, string) {
			var detail string
			p, detail = getPod(ctx, t, c, ns, name)
			return p != nil && p.Status.Phase == corev1.PodRunning, detail
		})
		cs := p.Status.ContainerStatuses[0]
		if cs.Ready || podCondition(p, corev1.PodReady) != corev1.ConditionFalse || podCondition(p, corev1.ContainersReady) != corev1.ConditionFalse {
			t.Errorf("%s ready before its probe passed: %+v", name, p.Status)
		}
		if started := cs.Started != nil && *cs.Started; started != (name == "late") {
			t.Errorf("%s: started = %v", name, started)
		}
	}
	for _, name := range []string{"late", "slow", "web"} {
		eventually(t, name+" Ready", func() (bool, string) {
			p, detail := getPod(ctx, t, c, ns, name)
			if p == nil || podCondition(p, corev1.PodReady) != corev1.ConditionTrue || podCondition(p, corev1.ContainersReady) != corev1.ConditionTrue {
				return false, detail
			}
			cs := p.Status.ContainerStatuses[0]
			return cs.Ready && cs.Started != nil && *cs.Started && cs.RestartCount == 0, detail
		})
	}

	eventually(t, "sick restarted after liveness failures", func() (bool, string) {
		p, detail := getPod(ctx, t, c, ns, "sick")
		if p == nil || len(p.Status.ContainerStatuses) != 1 {
			return false, detail
		}
		cs := p.Status.ContainerStatuses[0]
		last := cs.LastTerminationState.Terminated
		return cs.RestartCount >= 1 && last != nil && last.ExitCode == 128+15, detail
	})

	// never has been probed a few times by now and must still not be ready.
	p, detail := getPod(ctx, t, c, ns, "never")
	if p == nil || p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].Ready || podCondition(p, corev1.PodReady) != corev1.ConditionFalse {
		t.Errorf("never: %s", detail)
	}
}

// TestInitContainers: init containers run one after another before the containers, each
// after the previous completed; a failing one holds the pod in Pending (restartPolicy
// Always) or fails it (Never).
func TestInitContainers(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-init", "127.84.0.0/24")
	ns := testserver.Namespace(t, c, "node-init-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	out := filepath.Join(t.TempDir(), "order")

	initC := func(name, script string) corev1.Container {
		return corev1.Container{Name: name, Image: "sh", Command: []string{"/bin/sh", "-c", script},
			Env: []corev1.EnvVar{{Name: "OUT", Value: out}}}
	}
	ok := shPod(ns, "ok", "node-init", `echo main >> "$OUT"; sleep 100`, corev1.RestartPolicyAlways)
	ok.Spec.Containers[0].Env = append(ok.Spec.Containers[0].Env, corev1.EnvVar{Name: "OUT", Value: out})
	ok.Spec.InitContainers = []corev1.Container{initC("first", `sleep 1; echo first >> "$OUT"`), initC("second", `echo second >> "$OUT"`)}

	stuck := shPod(ns, "stuck", "node-init", "sleep 100", corev1.RestartPolicyAlways)
	stuck.Spec.InitContainers = []corev1.Container{initC("fail", "exit 2")}

	failed := shPod(ns, "failed", "node-init", "sleep 100", corev1.RestartPolicyNever)
	failed.Spec.InitContainers = []corev1.Container{initC("fail", "exit 2")}

	sidecar := shPod(ns, "sidecar", "node-init", "sleep 100", corev1.RestartPolicyAlways)
	sidecar.Spec.InitContainers = []corev1.Container{initC("proxy", "sleep 100")}
	sidecar.Spec.InitContainers[0].RestartPolicy = new(corev1.ContainerRestartPolicyAlways)

	for _, p := range []*corev1.Pod{ok, stuck, failed, sidecar} {
		if _, err := pods.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	// While first sleeps: Pending, not initialized, the container waiting for it.
	eventually(t, "ok initializing", func() (bool, string) {
		p, detail := getPod(ctx, t, c, ns, "ok")
		if p == nil || len(p.Status.InitContainerStatuses) != 2 || p.Status.InitContainerStatuses[0].State.Running == nil {
			return false, detail
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return p.Status.Phase == corev1.PodPending && podCondition(p, corev1.PodInitialized) == corev1.ConditionFalse &&
			w != nil && w.Reason == "PodInitializing", detail
	})
	eventually(t, "ok Running and Ready", func() (bool, string) {
		p, detail := getPod(ctx, t, c, ns, "ok")
		if p == nil || p.Status.Phase != corev1.PodRunning || podCondition(p, corev1.PodReady) != corev1.ConditionTrue ||
			podCondition(p, corev1.PodInitialized) != corev1.ConditionTrue {
			return false, detail
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.State.Terminated == nil || s.State.Terminated.Reason != "Completed" || !s.Ready {
				return false, detail
			}
		}
		return true, ""
	})
	eventually(t, "order of runs", func() (bool, string) {
		b, _ := os.ReadFile(out)
		return string(b) == "first\nsecond\nmain\n", string(b)
	})

	eventually(t, "stuck init container restarted", func() (bool, string) {
		p, detail := getPod(ctx, t, c, ns, "stuck")
		if p == nil || len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].RestartCount < 2 {
			return false, detail
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return p.Status.Phase == corev1.PodPending && podCondition(p, corev1.PodInitialized) == corev1.ConditionFalse &&
			w != nil && w.Reason == "PodInitializing", detail
	})

	// Sidecars are not supported: said in the status, not left Pending without a word.
	eventually(t, "sidecar refused", func() (bool, string) {
		p, detail := getPod(ctx, t, c, ns, "sidecar")
		if p == nil || len(p.Status.InitContainerStatuses) != 1 {
			return false, detail
		}
		w := p.Status.InitContainerStatuses[0].State.Waiting
		return p.Status.Phase == corev1.PodPending && w != nil && w.Reason == "CreateContainerConfigError" &&
			strings.Contains(w.Message, "sidecar"), detail
	})

	eventually(t, "failed pod Failed", func() (bool, string) {
		p, detail := getPod(ctx, t, c, ns, "failed")
		if p == nil || p.Status.Phase != corev1.PodFailed || len(p.Status.InitContainerStatuses) != 1 {
			return false, detail
		}
		s := p.Status.InitContainerStatuses[0]
		return s.State.Terminated != nil && s.State.Terminated.ExitCode == 2 && p.Status.ContainerStatuses[0].State.Running == nil &&
			p.Status.ContainerStatuses[0].RestartCount == 0, detail
	})
}

// TestProbeRun checks single probe runs: exec in the container's directory and env, its
// timeout (killing the command's children too), ports by name, and httpGet's Host header.
func TestProbeRun(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "here"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Host != "example.test" {
			rw.WriteHeader(http.StatusNotFound)
		}
	})}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	run := probeRun{podIP: "127.0.0.1", dir: dir, env: []string{"PATH=" + os.Getenv("PATH"), "WANT=yes"},
		ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
	cases := []struct {
		name string
		h    corev1.ProbeHandler
		ok   bool
	}{
		{"exec env and dir", corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", `test -f here && test "$WANT" = yes`}}}, true},
		{"exec fails", corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}}, false},
		{"exec times out", corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 30; true"}}}, false},
		{"tcp by name", corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("web")}}, true},
		{"unknown port name", corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("nope")}}, false},
		{"http host header", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(int32(port)),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "Host", Value: "example.test"}}}}, true},
		{"http 404", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "x", Port: intstr.FromInt32(int32(port))}}, false},
		{"https unsupported", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Scheme: corev1.URISchemeHTTPS, Port: intstr.FromInt32(int32(port))}}, false},
	}
	for _, tc := range cases {
		run.spec = withProbeDefaults(corev1.Probe{ProbeHandler: tc.h})
		start := time.Now()
		ok, msg := run.do(context.Background())
		if ok != tc.ok {
			t.Errorf("%s: ok = %v (%s)", tc.name, ok, msg)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s took %s (timeout 1 s)", tc.name, d)
		}
	}
}
