package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var srv *testserver.Server

func TestMain(m *testing.M) {
	if os.Getenv(testHTTPServerEnv) != "" { // this binary runs as a pod's HTTP server
		serveTestHTTP()
		return
	}
	testserver.Main(m, func(s *testserver.Server, _ *client.Client) { srv = s })
}

func newClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startAgent runs an agent named after the test with short timings until the test ends;
// change adjusts its options.
func startAgent(t *testing.T, c *client.Client, name, cidr string, change ...func(*Options)) *Agent {
	t.Helper()
	o := DefaultOptions()
	o.HostnameOverride, o.DataDir, o.PodCIDR, o.Port = name, t.TempDir(), cidr, 0
	o.RenewInterval, o.StatusInterval, o.BackoffBase, o.BackoffMax = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond
	o.SyncFrequency = 200 * time.Millisecond
	for _, f := range change {
		f(&o)
	}
	a, err := New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(20 * time.Second):
			t.Error("agent did not stop")
		}
		if m := mountsUnder(o.DataDir); len(m) > 0 {
			t.Errorf("the stopped agent left mounts behind: %v", m)
		}
	})
	return a
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNodeRegisteredAndLeaseRenewed(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-reg", "127.78.0.0/24")
	ctx := context.Background()
	var n *corev1.Node
	eventually(t, "node Ready", func() (bool, string) {
		var err error
		n, err = client.Resource[*corev1.Node](c, "nodes").Get(ctx, "node-reg")
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprint(n.Status.Conditions)
	})
	if n.Labels[corev1.LabelHostname] != "node-reg" {
		t.Errorf("hostname label = %q", n.Labels[corev1.LabelHostname])
	}
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 110 {
		t.Errorf("pods capacity = %v", q.String())
	}
	if q := n.Status.Allocatable[corev1.ResourceCPU]; q.Value() < 1 {
		t.Errorf("cpu allocatable = %v", q.String())
	}
	if _, ok := n.Status.Capacity[corev1.ResourceMemory]; !ok {
		t.Error("no memory capacity")
	}
	want := map[corev1.NodeAddressType]string{corev1.NodeInternalIP: "127.0.0.1", corev1.NodeHostName: "node-reg"}
	for _, a := range n.Status.Addresses {
		if want[a.Type] == a.Address {
			delete(want, a.Type)
		}
	}
	if len(want) > 0 {
		t.Errorf("addresses %v lack %v", n.Status.Addresses, want)
	}

	leases := client.Resource[*coordinationv1.Lease](c, "leases").Namespace(LeaseNamespace)
	var first time.Time
	eventually(t, "lease", func() (bool, string) {
		l, err := leases.Get(ctx, "node-reg")
		if err != nil {
			return false, err.Error()
		}
		first = l.Spec.RenewTime.Time
		return *l.Spec.HolderIdentity == "node-reg", ""
	})
	eventually(t, "lease renewed", func() (bool, string) {
		l, err := leases.Get(ctx, "node-reg")
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(first), l.Spec.RenewTime.String()
	})
	// The Ready heartbeat moves too.
	hb := readyCondition(n).LastHeartbeatTime.Time
	eventually(t, "node heartbeat", func() (bool, string) {
		n, err := client.Resource[*corev1.Node](c, "nodes").Get(ctx, "node-reg")
		if err != nil {
			return false, err.Error()
		}
		return readyCondition(n).LastHeartbeatTime.After(hb), ""
	})
}

func readyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// shPod is a pod running script with sh. It mounts no service-account token: the test
// namespaces have no controller manager to make the default account and kube-root-ca.crt
// (TestServiceAccountVolume makes them).
func shPod(ns, name, node, script string, policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: policy, TerminationGracePeriodSeconds: new(int64(5)), AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "main", Image: "sh", Command: []string{"/bin/sh", "-c", script},
				Env: []corev1.EnvVar{{Name: "GREETING", Value: "hi"}}}}},
	}
}

func TestPodRunsAndIsDeleted(t *testing.T) {
	c := newClient(t)
	a := startAgent(t, c, "node-run", "127.79.0.0/24")
	ns := testserver.Namespace(t, c, "node-run-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	// The trap makes the shell outlive its sleep on SIGTERM; it exits within the grace period.
	pidFile := filepath.Join(t.TempDir(), "pid")
	// "$$$$": the agent reduces "$$" to "$" in command and args, as the kubelet does.
	pod := shPod(ns, "web", "node-run", `echo $$$$ > `+pidFile+`; trap 'echo bye; exit 0' TERM; echo "$GREETING $POD_NAME $POD_NAMESPACE $POD_IP"; while :; do sleep 0.1; done`, corev1.RestartPolicyAlways)
	p, err := pods.Create(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod Running and Ready", func() (bool, string) {
		p, err = pods.Get(ctx, "web")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == corev1.ConditionTrue, fmt.Sprintf("%+v", p.Status)
	})
	if !strings.HasPrefix(p.Status.PodIP, "127.79.0.") || len(p.Status.PodIPs) != 1 || p.Status.HostIP != "127.0.0.1" || p.Status.StartTime == nil {
		t.Errorf("status IPs/start: %+v", p.Status)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady} {
		if podCondition(p, ct) != corev1.ConditionTrue {
			t.Errorf("condition %s = %q", ct, podCondition(p, ct))
		}
	}
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil || !cs[0].Ready {
		t.Errorf("container statuses: %+v", cs)
	}
	logPath := filepath.Join(ContainerDir(a.o.DataDir, p.UID, "main"), LogFile)
	want := fmt.Sprintf("hi web %s %s", ns, p.Status.PodIP)
	eventually(t, "log line", func() (bool, string) {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), want), string(b)
	})

	pid := readPID(t, pidFile)
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod object deleted", func() (bool, string) {
		_, err := pods.Get(ctx, "web")
		return client.IsNotFound(err), fmt.Sprint(err)
	})
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("container process %d still exists after deletion: %v", pid, err)
	}
	if _, err := os.Stat(logPath); !os.IsNotExist(err) {
		t.Errorf("pod directory left behind: %v", err)
	}
}

func TestPodCompletes(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-done", "127.80.0.0/24")
	ns := testserver.Namespace(t, c, "node-done-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	cases := []struct {
		name     string
		script   string
		policy   corev1.RestartPolicy
		phase    corev1.PodPhase
		exitCode int32
	}{
		{"ok-never", "echo done", corev1.RestartPolicyNever, corev1.PodSucceeded, 0},
		{"fail-never", "exit 3", corev1.RestartPolicyNever, corev1.PodFailed, 3},
		{"ok-onfailure", "exit 0", corev1.RestartPolicyOnFailure, corev1.PodSucceeded, 0},
	}
	for _, tc := range cases {
		if _, err := pods.Create(ctx, shPod(ns, tc.name, "node-done", tc.script, tc.policy)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		eventually(t, tc.name+" "+string(tc.phase), func() (bool, string) {
			p, err := pods.Get(ctx, tc.name)
			if err != nil {
				return false, err.Error()
			}
			if p.Status.Phase != tc.phase {
				return false, fmt.Sprintf("%+v", p.Status)
			}
			cs := p.Status.ContainerStatuses
			if len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != tc.exitCode || cs[0].RestartCount != 0 {
				t.Errorf("%s: container statuses %+v", tc.name, cs)
			}
			return true, ""
		})
	}
}

func TestPodRestarts(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-restart", "127.81.0.0/24")
	ns := testserver.Namespace(t, c, "node-restart-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	for _, policy := range []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure} {
		name := strings.ToLower(string(policy))
		if _, err := pods.Create(ctx, shPod(ns, name, "node-restart", "exit 1", policy)); err != nil {
			t.Fatal(err)
		}
		eventually(t, name+" restarted twice", func() (bool, string) {
			p, err := pods.Get(ctx, name)
			if err != nil {
				return false, err.Error()
			}
			cs := p.Status.ContainerStatuses
			if p.Status.Phase != corev1.PodRunning || len(cs) != 1 || cs[0].RestartCount < 2 {
				return false, fmt.Sprintf("%+v", p.Status)
			}
			if t := cs[0].LastTerminationState.Terminated; t == nil || t.ExitCode != 1 {
				return false, fmt.Sprintf("last termination %+v", cs[0].LastTerminationState)
			}
			return true, ""
		})
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, "pid file", func() (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, string(b)
	})
	return pid
}

// TestShutdownStopsPods: when the agent's context ends, its container processes are gone
// by the time Run returns.
func TestShutdownStopsPods(t *testing.T) {
	c := newClient(t)
	o := DefaultOptions()
	o.HostnameOverride, o.DataDir, o.PodCIDR, o.Port = "node-stop", t.TempDir(), "127.82.0.0/24", 0
	a, err := New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	ns := testserver.Namespace(t, c, "node-stop-")
	pidFile := filepath.Join(t.TempDir(), "pid")
	// Ignores SIGTERM, so only the SIGKILL after the shutdown grace stops it.
	pod := shPod(ns, "stubborn", "node-stop", `echo $$$$ > `+pidFile+`; trap '' TERM; while :; do sleep 0.1; done`, corev1.RestartPolicyAlways)
	if _, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, pidFile)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not stop")
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("container process %d still exists after shutdown: %v", pid, err)
	}
}

func TestIPAM(t *testing.T) {
	a, err := newIPAM("10.0.0.0/30") // usable: .1, .2
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		op, uid, preferred, want string
	}{
		{"alloc", "a", "", "10.0.0.1"},
		{"alloc", "a", "", "10.0.0.1"}, // same pod, same address
		{"alloc", "b", "10.0.0.3", "10.0.0.2"},
		{"alloc", "c", "", "error"},
		{"release", "a", "", ""},
		{"alloc", "c", "", "10.0.0.1"},
		{"release", "b", "", ""},
		{"alloc", "d", "10.0.0.2", "10.0.0.2"},
	}
	for i, s := range steps {
		if s.op == "release" {
			a.release(typesUID(s.uid))
			continue
		}
		ip, err := a.allocate(typesUID(s.uid), s.preferred)
		got := ip.String()
		if err != nil {
			got = "error"
		}
		if got != s.want {
			t.Errorf("step %d (%s %s): got %s, want %s", i, s.op, s.uid, got, s.want)
		}
	}
}

func typesUID(s string) types.UID { return types.UID(s) }
