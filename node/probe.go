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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Probes run as the kubelet's: a container's startup probe runs first and gates the others
// (the container is not "started" until it succeeds); then liveness (failureThreshold
// consecutive failures kill the container, which is then restarted per restartPolicy) and
// readiness (the container is Ready only while it passes). Each probe run is its own goroutine
// that reports a probeResult on the worker's channel, so a slow probe never stalls the worker.

type probeKind int

const (
	startupProbe probeKind = iota
	livenessProbe
	readinessProbe
)

func (k probeKind) String() string {
	return [...]string{"startup", "liveness", "readiness"}[k]
}

// title is the kind as the kubelet's Unhealthy events begin ("Readiness probe failed: ...").
func (k probeKind) title() string {
	return [...]string{"Startup", "Liveness", "Readiness"}[k]
}

// prober is one probe of one run of a container. Owned by the worker goroutine.
type prober struct {
	spec corev1.Probe // with defaults applied
	// next is when the next run is due; inFlight: a run has not reported yet.
	next     time.Time
	inFlight bool
	// successes and failures count consecutive results; ok is the settled result, flipped
	// only when a threshold is reached.
	successes, failures int32
	ok                  bool
}

// probeState is the probing state of a container's current run; it is reset whenever the
// container starts or exits, and gen tells results of an earlier run apart.
type probeState struct {
	gen    int
	probes [3]*prober // by probeKind; nil: none configured, or the container is not running
	// execEnv and execDir are the container's environment and working directory, for exec
	// probes (taken from its process, so they match what it runs with).
	execEnv []string
	execDir string
	// killAt: a failed liveness or startup probe sent SIGTERM; SIGKILL is due then.
	killAt time.Time
}

type probeResult struct {
	index, gen int
	kind       probeKind
	ok         bool
	msg        string
}

// started says whether the container's startup probe (if any) has succeeded.
func (s *probeState) started() bool {
	p := s.probes[startupProbe]
	return p == nil || p.ok
}

// ready says whether the container's readiness probe (if any) passes and it has started.
func (s *probeState) ready() bool {
	p := s.probes[readinessProbe]
	return s.started() && (p == nil || p.ok)
}

// withProbeDefaults fills Kubernetes' defaults (the API server fills them too, but a pod
// written by an older server or an in-process test may lack them).
func withProbeDefaults(p corev1.Probe) corev1.Probe {
	if p.PeriodSeconds <= 0 {
		p.PeriodSeconds = 10
	}
	if p.TimeoutSeconds <= 0 {
		p.TimeoutSeconds = 1
	}
	if p.SuccessThreshold <= 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold <= 0 {
		p.FailureThreshold = 3
	}
	return p
}

// startContainer starts container i and, if it runs, arms its probes.
func (w *podWorker) startContainer(pod *corev1.Pod, i int) {
	w.start(pod, i)
	w.resetProbes(i)
}

// resetProbes forgets the probing of the container's previous run and, if it is running now,
// sets up its probes, first due after initialDelaySeconds. A liveness probe counts as passing
// until it fails; readiness and startup as failing until they pass.
func (w *podWorker) resetProbes(i int) {
	c := w.containers[i]
	c.gen++
	c.probes, c.killAt = [3]*prober{}, time.Time{}
	if c.cmd == nil {
		return
	}
	c.execEnv, c.execDir = c.cmd.Env, c.cmd.Dir
	for kind, spec := range []*corev1.Probe{c.spec.StartupProbe, c.spec.LivenessProbe, c.spec.ReadinessProbe} {
		if spec == nil {
			continue
		}
		p := &prober{spec: withProbeDefaults(*spec), ok: probeKind(kind) == livenessProbe}
		p.next = c.startedAt.Add(time.Duration(p.spec.InitialDelaySeconds) * time.Second)
		c.probes[kind] = p
	}
}

// activeProbes lists the probes of container c that may run now: none while it is not running or is
// being killed, only the startup probe until it succeeded, then liveness and readiness.
func (c *container) activeProbes() []probeKind {
	if c.cmd == nil || !c.killAt.IsZero() {
		return nil
	}
	if p := c.probes[startupProbe]; p != nil && !p.ok {
		return []probeKind{startupProbe}
	}
	var kinds []probeKind
	for _, k := range []probeKind{livenessProbe, readinessProbe} {
		if c.probes[k] != nil {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// nextProbeWake is the earliest due probe run or pending SIGKILL (zero: none).
func (w *podWorker) nextProbeWake() time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, c := range w.containers {
		if c.cmd != nil {
			earlier(c.killAt)
		}
		for _, k := range c.activeProbes() {
			if p := c.probes[k]; !p.inFlight {
				earlier(p.next)
			}
		}
	}
	return next
}

// runDueProbes launches every probe run that is due and sends SIGKILL to containers whose
// grace after a probe failure is over.
func (w *podWorker) runDueProbes(ctx context.Context, now time.Time) {
	for i, c := range w.containers {
		if c.cmd != nil && !c.killAt.IsZero() && !now.Before(c.killAt) {
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			c.killAt = now.Add(time.Hour) // sent; the exit resets it
		}
		for _, k := range c.activeProbes() {
			p := c.probes[k]
			if p.inFlight || now.Before(p.next) {
				continue
			}
			p.inFlight = true
			p.next = now.Add(time.Duration(p.spec.PeriodSeconds) * time.Second)
			run := probeRun{spec: p.spec, podIP: w.ip, ports: c.spec.Ports, env: c.execEnv, dir: c.execDir}
			r := probeResult{index: i, gen: c.gen, kind: k}
			w.probing.Go(func() {
				r.ok, r.msg = run.do(ctx)
				select {
				case w.probeResults <- r:
				case <-ctx.Done():
				}
			})
		}
	}
}

// probeDone records a probe result; it reports whether the container's status may have
// changed. Failing liveness or startup probes kill the container.
func (w *podWorker) probeDone(pod *corev1.Pod, r probeResult) bool {
	c := w.containers[r.index]
	p := c.probes[r.kind]
	if r.gen != c.gen || p == nil {
		return false // from an earlier run of the container
	}
	p.inFlight = false
	was := p.ok
	if r.ok {
		p.successes, p.failures = p.successes+1, 0
		if p.successes >= p.spec.SuccessThreshold {
			p.ok = true
		}
	} else {
		p.successes, p.failures = 0, p.failures+1
		if p.failures >= p.spec.FailureThreshold {
			p.ok = false
		}
		if r.kind != readinessProbe || was {
			w.log().Info("probe failed", "container", c.spec.Name, "probe", r.kind.String(), "output", r.msg)
		}
		w.event(pod, corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", r.kind.title(), r.msg)
	}
	if !r.ok && r.kind != readinessProbe && p.failures >= p.spec.FailureThreshold {
		w.killForProbe(pod, c, p, r.kind)
		return true
	}
	return was != p.ok
}

// killForProbe sends SIGTERM to a container whose liveness or startup probe failed; SIGKILL
// follows after the probe's terminationGracePeriodSeconds, else the pod's. Its exit then
// restarts it per restartPolicy, as any exit.
func (w *podWorker) killForProbe(pod *corev1.Pod, c *container, p *prober, kind probeKind) {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case p.spec.TerminationGracePeriodSeconds != nil:
		grace = *p.spec.TerminationGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	w.log().Info("killing container after failed probe", "container", c.spec.Name, "probe", kind.String(), "grace", grace)
	w.event(pod, corev1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", c.spec.Name, kind.String())
	sig := syscall.SIGTERM
	if grace <= 0 {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	c.killAt = time.Now().Add(time.Duration(grace) * time.Second)
}

// probeRun is what one probe run needs, copied so that its goroutine shares nothing with the
// worker.
type probeRun struct {
	spec  corev1.Probe
	podIP string
	ports []corev1.ContainerPort
	env   []string
	dir   string
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
	cmd.Dir, cmd.Env = r.dir, r.env
	out := &limitedBuffer{max: maxProbeOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second // a grandchild holding the output pipe must not hold us
	err := cmd.Run()
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
