package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kplane/kplane/node/mountns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Probe runs, as the kubelet's: exec in the container's directory and environment,
// tcpSocket, and httpGet to the pod IP by default. When probes run and what their results
// mean is the pod state machine's business (machine.go).

// probeRun is what one probe run needs, copied so that its goroutine shares nothing with the
// worker.
type probeRun struct {
	spec  corev1.Probe
	podIP string
	ports []corev1.ContainerPort
	env   []string
	dir   string
	// start starts an exec probe's command in the container (its mount namespace); nil
	// starts it as it is.
	start func(*exec.Cmd) (*mountns.Process, error)
}

// maxProbeOutput bounds the output of an exec probe or body kept for the log.
const maxProbeOutput = 10 << 10

// do runs the probe once within its timeout, reporting success and a message on failure.
func (r probeRun) do(ctx context.Context) (bool, string) {
	timeout := time.Duration(r.spec.TimeoutSeconds) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	switch h := r.spec.ProbeHandler; {
	case h.Exec != nil:
		err = r.exec(ctx, h.Exec)
	case h.HTTPGet != nil:
		err = r.httpGet(ctx, h.HTTPGet)
	case h.TCPSocket != nil:
		err = r.tcp(ctx, h.TCPSocket)
	case h.GRPC != nil:
		err = errors.New("grpc probes are not supported") // TODO
	default:
		err = errors.New("probe has no handler")
	}
	if err != nil {
		return false, err.Error()
	}
	return true, ""
}

// exec runs the command in the container's directory with its environment; exit code 0 passes.
// It runs in its own process group so a timeout kills whatever the command started too.
func (r probeRun) exec(ctx context.Context, a *corev1.ExecAction) error {
	if len(a.Command) == 0 {
		return errors.New("exec probe has no command")
	}
	argv := append([]string(nil), a.Command...)
	if argv[0] == "kplane" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		argv[0] = exe
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if r.start == nil { // else start gives it the run's environment and directory
		cmd.Dir, cmd.Env = r.dir, r.env
	}
	out := &limitedBuffer{max: maxProbeOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second // a grandchild holding the output pipe must not hold us
	var err error
	if r.start != nil {
		var p *mountns.Process
		if p, err = r.start(cmd); err == nil {
			err = p.Wait()
		}
	} else {
		err = cmd.Run()
	}
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // leftovers of the group
	}
	if ctx.Err() != nil {
		return fmt.Errorf("exec probe timed out after %ds", r.spec.TimeoutSeconds)
	}
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// port resolves a probe's port: a number, or the name of one of the container's ports (or a
// number written as a string).
func (r probeRun) port(p intstr.IntOrString) (int, error) {
	n := int(p.IntVal)
	if p.Type == intstr.String {
		n = -1
		for _, cp := range r.ports {
			if cp.Name == p.StrVal {
				n = int(cp.ContainerPort)
			}
		}
		if n < 0 {
			var err error
			if n, err = strconv.Atoi(p.StrVal); err != nil {
				return 0, fmt.Errorf("no container port named %q", p.StrVal)
			}
		}
	}
	if n <= 0 || n > 65535 {
		return 0, fmt.Errorf("invalid port %d", n)
	}
	return n, nil
}

// host is the probe's host, the pod IP when empty.
func (r probeRun) host(h string) string {
	if h == "" {
		return r.podIP
	}
	return h
}

func (r probeRun) tcp(ctx context.Context, a *corev1.TCPSocketAction) error {
	port, err := r.port(a.Port)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(r.host(a.Host), strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return conn.Close()
}

// httpGet passes on a status in [200, 400). Redirects are not followed (a 3xx passes, as it
// does for the kubelet when the redirect leaves the host), and connections are not kept, so
// nothing outlives the run.
func (r probeRun) httpGet(ctx context.Context, a *corev1.HTTPGetAction) error {
	if a.Scheme != "" && a.Scheme != corev1.URISchemeHTTP {
		return fmt.Errorf("scheme %s is not supported", a.Scheme) // TODO: HTTPS
	}
	port, err := r.port(a.Port)
	if err != nil {
		return err
	}
	path := a.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	url := "http://" + net.JoinHostPort(r.host(a.Host), strconv.Itoa(port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-probe/kplane")
	req.Header.Set("Accept", "*/*")
	for _, h := range a.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Set(h.Name, h.Value)
	}
	client := &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := &limitedBuffer{max: maxProbeOutput}
	_, _ = io.Copy(body, resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d: %s", resp.StatusCode, strings.TrimSpace(body.String()))
	}
	return nil
}

// limitedBuffer keeps the first max bytes written and discards the rest.
type limitedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string { return b.buf.String() }
