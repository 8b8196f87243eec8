//go:build linux

package e2e

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// roleProcess is a running kplane role (controller-manager, proxy, ...).
type roleProcess struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	err    error
}

// startManager runs a controller manager against the test server, electing its leader on
// the lease named lease with short durations (3 s lease) so takeovers are quick.
func startManager(t *testing.T, lease string) *roleProcess {
	t.Helper()
	return startRole(t, "controller-manager", "--kubeconfig", env.kubeconfig, "--secure-port", "0",
		"--leader-elect-resource-name", lease, "--leader-elect-lease-duration", "3s",
		"--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "200ms")
}

// startRole runs `kplane <args>` until the test ends, its output kept for failure reports.
func startRole(t *testing.T, args ...string) *roleProcess {
	t.Helper()
	cmd := exec.Command(env.bin, args...)
	p := &roleProcess{cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		// Stopped as an operator would, so that it removes what it made (the node agent's
		// tmpfs mounts); a role the test froze is woken for that.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("kplane %s output:\n%s", args[0], p.out.String())
		}
	})
	return p
}

// waitLog waits until the manager's log contains s.
func (p *roleProcess) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(watchTimeout)
	for !strings.Contains(p.out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("kplane %s never logged %q:\n%s", p.cmd.Args[1], s, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventually retries a jsonpath read until it equals want.
func (k kc) eventually(obj, expr, want string, within time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := k.run("", "get", obj, "-o", "jsonpath="+expr)
		if r.err == nil && r.stdout == want {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("%s %s never became %q; last:\n%s", obj, expr, want, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const managedApp = `
apiVersion: v1
kind: Node
metadata:
  name: e2e-node
  labels: {topology.kubernetes.io/zone: zone-a}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, labels: {app: web}}
spec:
  nodeName: e2e-node
  containers: [{name: app, image: app, ports: [{name: http, containerPort: 8080}]}]
`

func podStatus(ip, ready string) string {
	return `{"status":{"phase":"Running","podIP":"` + ip + `","podIPs":[{"ip":"` + ip + `"}],"conditions":[{"type":"Ready","status":"` + ready + `"}]}}`
}

// TestControllerManager: the controller manager keeps a service's Endpoints and EndpointSlice
// in step with its pods; with two replicas, killing the leader hands the work to the other
// within the lease duration; SIGTERM stops a replica cleanly.
func TestControllerManager(t *testing.T) {
	k := newNamespace(t)
	lease := "e2e-" + k.ns
	a := startManager(t, lease)
	a.waitLog(t, "became leader")
	k.okIn(managedApp, "apply", "-f", "-")
	k.ok("patch", "pod", "web-1", "--subresource=status", "--type=merge", "-p", podStatus("10.1.0.5", "True"))
	k.eventually("endpoints/web", "{.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}", "10.1.0.5:8080", watchTimeout)
	k.eventually("endpointslices", "{.items[0].endpoints[0].addresses[0]}:{.items[0].endpoints[0].zone}:{.items[0].ports[0].port}", "10.1.0.5:zone-a:8080", watchTimeout)

	b := startManager(t, lease)
	b.waitLog(t, "waiting to become leader")
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	killed := time.Now()
	k.ok("patch", "pod", "web-1", "--subresource=status", "--type=merge", "-p", podStatus("10.1.0.5", "False"))
	// 3 s of lease, a retry period, then a sync: well inside 10 s.
	k.eventually("endpoints/web", "{.subsets[0].notReadyAddresses[0].ip}", "10.1.0.5", watchTimeout)
	k.eventually("endpointslices", "{.items[0].endpoints[0].conditions.ready}", "false", watchTimeout)
	if took := time.Since(killed); took < 2*time.Second {
		t.Errorf("the standby acted %v after the leader died, before the 3s lease could expire", took)
	}

	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.exited:
		if b.err != nil {
			t.Errorf("controller manager exited with %v after SIGTERM", b.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("controller manager still running 10s after SIGTERM")
	}
	if !strings.Contains(b.out.String(), "released the lease") {
		t.Errorf("the leader did not release its lease on SIGTERM:\n%s", b.out.String())
	}
}
