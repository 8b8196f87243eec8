package node

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// LogFile is the name of a container's log file (stdout and stderr together, of its current
// or last run; the run before is in PreviousLogFile) in its directory
// <data-dir>/pods/<uid>/<container>/. Each line is "<RFC 3339 time> <stream> <F|P> <text>",
// the CRI log format (P: a piece of a longer line that the next record continues).
const LogFile = "container.log"

// statusRetry is how soon a failed pod status write is tried again.
const statusRetry = time.Second

func (a *Agent) podDir(uid types.UID) string {
	return filepath.Join(a.o.DataDir, "pods", string(uid))
}

// ContainerDir is the working directory of a container of the pod uid under dataDir; its log
// is LogFile in it.
func ContainerDir(dataDir string, uid types.UID, container string) string {
	return filepath.Join(dataDir, "pods", string(uid), container)
}

// podWorker carries out one pod's lifecycle: one goroutine (run) feeds the pod's state
// machine (machine.go) with what happens — API updates, process exits, probe results, time —
// and executes the actions it decides: starting processes, signalling them, running probes,
// writing status and events. Informer handlers only hand it the pod's latest state.
type podWorker struct {
	a   *Agent
	uid types.UID

	mu      sync.Mutex
	pod     *corev1.Pod
	removed bool
	// runs are the containers' current or last runs, by container index (nil: never
	// started); the log server and exec read them under mu.
	runs []*containerRun
	// volumes are the pod's volumes once set up (nil before), by name.
	volumes map[string]podVolume
	wake    chan struct{}

	// Owned by run.
	ip           string
	exits        chan exitReport
	probeResults chan probeReport
	probing      sync.WaitGroup
	// tokens are the service-account tokens of projected volumes, by audience/expiration.
	tokens map[string]cachedToken
	// volumesOf is the pod the volumes were last written for (its labels and annotations
	// feed downward API files).
	volumesOf *corev1.Pod
	// written is the pod as the last status write returned it, and writtenOver the
	// resourceVersion that write replaced (writeStatus).
	written     *corev1.Pod
	writtenOver string
}

type exitReport struct {
	index, run int
	code       int32
	reason     string
	at         time.Time
}

type probeReport struct {
	probeAction
	ok  bool
	msg string
}

func newPodWorker(a *Agent, p *corev1.Pod) *podWorker {
	return &podWorker{a: a, uid: p.UID, pod: p, wake: make(chan struct{}, 1), tokens: map[string]cachedToken{}}
}

func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	w.pod = p
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) remove() {
	w.mu.Lock()
	w.removed = true
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *podWorker) latest() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.removed
}

func (w *podWorker) log() *slog.Logger {
	p, _ := w.latest()
	return slog.With("pod", p.Namespace+"/"+p.Name)
}

// run runs the pod until it is deleted (gracefully, then the object is deleted), removed
// from the API, or ctx is cancelled (processes stopped within the shutdown grace).
func (w *podWorker) run(ctx context.Context) {
	pod, _ := w.latest()
	ip, err := w.a.ips.allocate(w.uid, pod.Status.PodIP)
	if err != nil {
		w.log().Error("no pod IP", "err", err)
		w.a.events.Eventf(pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", "no IP for the pod: %v", err)
		return
	}
	w.ip = ip.String()
	nContainers := len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
	w.mu.Lock()
	w.runs = make([]*containerRun, nContainers)
	w.mu.Unlock()
	w.exits = make(chan exitReport, nContainers)
	w.probeResults = make(chan probeReport, 3*nContainers)
	// Probe runs end with probeCtx, which ends when run returns; run waits for them so that
	// the agent's Run returns only once every goroutine it started has ended.
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer w.probing.Wait()
	defer stopProbes()

	clk := w.a.clock
	m := newPodMachine(pod, w.ip, machineConfig{
		BackoffBase: w.a.o.BackoffBase, BackoffMax: w.a.o.BackoffMax,
		SetupRetryBase: setupRetryBase, SetupRetryMax: setupRetryMax, StatusRetry: statusRetry,
	}, clk.Now())
	// apiCtx carries the API calls; after ctx ends, the containers still have to be stopped
	// and their exits collected, which needs no API.
	apiCtx := ctx
	timer := clk.NewTimer(time.Hour)
	defer timer.Stop()
	// Volumes follow their sources (ConfigMaps, Secrets, tokens) at this pace.
	resync := clk.NewTicker(w.a.o.SyncFrequency)
	defer resync.Stop()
	done := ctx.Done()
	for {
		w.execute(apiCtx, probeCtx, m)
		if m.Done() {
			return
		}
		wait := time.Hour
		if next := m.NextWake(); !next.IsZero() {
			wait = max(next.Sub(clk.Now()), 0)
		}
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-done:
			done = nil
			m.Shutdown(w.a.o.ShutdownGrace, clk.Now())
		case <-w.wake:
			pod, removed := w.latest()
			if removed {
				m.Removed(clk.Now())
			} else {
				m.Update(pod, clk.Now())
				if v := w.volumesOf; v != nil && (!maps.Equal(v.Labels, pod.Labels) || !maps.Equal(v.Annotations, pod.Annotations)) {
					w.refreshVolumes(apiCtx, pod)
				}
			}
		case <-resync.C():
			if pod, removed := w.latest(); !removed && w.volumesOf != nil && done != nil {
				w.refreshVolumes(apiCtx, pod)
			}
		case e := <-w.exits:
			m.Exited(e.index, e.run, e.code, e.reason, e.at)
		case r := <-w.probeResults:
			m.ProbeDone(r.index, r.run, r.kind, r.ok, r.msg, clk.Now())
		case <-timer.C():
			m.Tick(clk.Now())
		}
	}
}

// execute carries out the machine's actions until it has no more: each start and setup is
// reported back at once, which may decide more.
func (w *podWorker) execute(ctx, probeCtx context.Context, m *podMachine) {
	for a := m.Ready(); !a.empty(); a = m.Ready() {
		pod := m.Pod()
		for _, e := range a.events {
			if e.eventType == corev1.EventTypeWarning {
				w.log().Info("pod event", "reason", e.reason, "message", e.message)
			}
			w.a.events.Eventf(pod, e.eventType, e.reason, "%s", e.message)
		}
		for _, s := range a.signals {
			w.signal(s)
		}
		if a.setup {
			err := w.setup(ctx, pod)
			m.SetupDone(err, "FailedMount", w.a.clock.Now())
		}
		for _, s := range a.starts {
			w.start(ctx, m, pod, s)
		}
		for _, p := range a.probes {
			w.probe(probeCtx, p)
		}
		if a.status != nil {
			ok := w.writeStatus(ctx, pod, a.status)
			m.StatusWritten(a.status, ok, w.a.clock.Now())
		}
		if a.deletePod {
			w.a.deletePod(ctx, pod)
		}
		if a.removeDir {
			_ = w.a.removePodDirs(w.uid)
		}
	}
}

// setup prepares what the pod's containers share before any of them starts: its
// directory and its volumes.
func (w *podWorker) setup(ctx context.Context, pod *corev1.Pod) error {
	if err := os.MkdirAll(w.a.podDir(w.uid), 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, envTimeout)
	defer cancel()
	vols, err := w.setupVolumes(ctx, pod)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.volumes = vols
	w.mu.Unlock()
	w.volumesOf = pod
	return nil
}

// refreshVolumes brings the volumes' files up to date; a source that cannot be read now
// (a ConfigMap deleted) leaves its volume as it was, as the kubelet does.
func (w *podWorker) refreshVolumes(ctx context.Context, pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(ctx, envTimeout)
	defer cancel()
	if _, err := w.setupVolumes(ctx, pod); err != nil && ctx.Err() == nil {
		w.log().Info("volumes not brought up to date", "err", err)
	}
	w.volumesOf = pod
}

// start starts a container's run and reports it to the machine.
func (w *podWorker) start(ctx context.Context, m *podMachine, pod *corev1.Pod, s startAction) {
	spec := containerSpec(pod, s.index)
	r, err := w.a.startContainer(ctx, w, pod, spec, s)
	now := w.a.clock.Now()
	if err != nil {
		w.log().Error("starting container", "container", spec.Name, "err", err)
		var ce *configError
		m.StartFailed(s.index, s.run, err, errors.As(err, &ce), now)
		return
	}
	w.mu.Lock()
	w.runs[s.index] = r
	w.mu.Unlock()
	go func() {
		code, reason := r.wait()
		w.exits <- exitReport{index: s.index, run: s.run, code: code, reason: reason, at: w.a.clock.Now()}
	}()
	m.Started(s.index, s.run, now)
}

// containerSpec is the pod's container index: init containers first, then containers.
func containerSpec(pod *corev1.Pod, index int) corev1.Container {
	if index < len(pod.Spec.InitContainers) {
		return pod.Spec.InitContainers[index]
	}
	return pod.Spec.Containers[index-len(pod.Spec.InitContainers)]
}

// signal sends a signal to a container's run, if that run is still the current one.
func (w *podWorker) signal(s signalAction) {
	w.mu.Lock()
	r := w.runs[s.index]
	w.mu.Unlock()
	if r != nil && r.run == s.run {
		r.signal(s.sig)
	}
}

// probe runs a probe in its own goroutine, so a slow probe never stalls the worker.
func (w *podWorker) probe(ctx context.Context, p probeAction) {
	w.mu.Lock()
	r := w.runs[p.index]
	w.mu.Unlock()
	if r == nil || r.run != p.run {
		return
	}
	run := probeRun{spec: p.spec, podIP: w.ip, ports: r.spec.Ports, env: r.env, dir: r.dir, start: r.startProcess}
	w.probing.Go(func() {
		rep := probeReport{probeAction: p}
		rep.ok, rep.msg = run.do(ctx)
		select {
		case w.probeResults <- rep:
		case <-ctx.Done():
		}
	})
}

// writeStatus writes st as the pod's status. The first try replaces the latest version of the
// pod the worker knows without reading it: the informer's, or, while the informer has not seen
// the worker's own last status write yet, what that write returned. On a conflict (someone
// else wrote) it reads the pod and tries again, a few times. It reports whether the status is
// now written (false: try again later); a pod gone or replaced counts as written, since the
// informer tells the worker.
func (w *podWorker) writeStatus(ctx context.Context, cached *corev1.Pod, st *corev1.PodStatus) bool {
	pods := client.Resource[*corev1.Pod](w.a.c, "pods").Namespace(cached.Namespace)
	base := cached
	if w.written != nil && cached.ResourceVersion == w.writtenOver {
		base = w.written
	}
	pod := new(*base) // a copy: the informer's object is shared
	for try := range 4 {
		if try > 0 {
			var err error
			pod, err = pods.Get(ctx, cached.Name)
			if err == nil && pod.UID != w.uid {
				return true
			}
			if err != nil {
				if client.IsNotFound(err) {
					return true
				}
				if ctx.Err() == nil {
					w.log().Error("reading pod for status", "err", err)
				}
				return false
			}
		}
		over := pod.ResourceVersion
		pod.Status = *st
		got, err := pods.UpdateStatus(ctx, pod)
		switch {
		case err == nil:
			w.written, w.writtenOver = got, over
			return true
		case client.IsNotFound(err):
			return true
		case !client.IsConflict(err):
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				w.log().Error("writing pod status", "err", err)
			}
			return false
		}
	}
	return false
}

// setupRetryBase and setupRetryMax pace the retries of a failed pod setup (the kubelet's
// volume manager starts at 500 ms too, but doubles up to two minutes; a ConfigMap created a
// little after its pod should not cost that long here).
const (
	setupRetryBase = 500 * time.Millisecond
	setupRetryMax  = 8 * time.Second
)

var errNoCommand = errors.New("container has no command (images are not run; give command or args)")

// killGroup sends sig to the process group led by pid.
func killGroup(pid int, sig syscall.Signal) {
	if pid > 0 {
		_ = syscall.Kill(-pid, sig)
	}
}
