package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// LogFile is the name of a container's log file (stdout and stderr together, of its current
// or last run; the run before is in PreviousLogFile) in its directory
// <data-dir>/pods/<uid>/<container>/.
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

// podWorker owns one pod's processes: one goroutine (run) starts, restarts and stops them and
// writes the pod's status; informer handlers only hand it the pod's latest state.
type podWorker struct {
	a   *Agent
	uid types.UID
	// ctx is the agent's context (run's), kept for the API reads a container start makes
	// (env from ConfigMaps and Secrets) from the several places run starts containers.
	ctx context.Context

	mu      sync.Mutex
	pod     *corev1.Pod
	removed bool
	wake    chan struct{}

	// Owned by run.
	ip        string
	startTime metav1.Time

	// containers are the pod's init containers (the first nInit, run one after another
	// to completion) followed by its containers, started together once mainStarted.
	containers  []*container
	nInit       int
	mainStarted bool
	exits       chan exit

	// probeResults carries the reports of probe runs, each its own goroutine in probing.
	probeResults chan probeResult
	probing      sync.WaitGroup

	lastStatus *corev1.PodStatus
	conditions map[corev1.PodConditionType]corev1.PodCondition
}

type container struct {
	spec corev1.Container
	dir  string

	cmd       *exec.Cmd // nil unless running
	startedAt metav1.Time
	restarts  int32
	last      *corev1.ContainerStateTerminated
	// nextStart is when a restart is due (zero: none pending).
	nextStart time.Time
	backoff   time.Duration
	// waiting explains why the container is not running (start error, backoff).
	waitingReason, waitingMessage string
	// finished: exited and will not be restarted.
	finished bool
	// init: an init container (restarted only on failure, whatever the pod's policy).
	init bool
	probeState
}

type exit struct {
	index int
	code  int32
	at    time.Time
}

func newPodWorker(ctx context.Context, a *Agent, p *corev1.Pod) *podWorker {
	return &podWorker{a: a, uid: p.UID, ctx: ctx, pod: p, wake: make(chan struct{}, 1)}
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
		w.event(pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", "no IP for the pod: %v", err)
		return
	}
	w.ip = ip.String()
	w.startTime = metav1.Now()
	if pod.Status.StartTime != nil {
		w.startTime = *pod.Status.StartTime
	}
	w.conditions = map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range pod.Status.Conditions {
		w.conditions[c.Type] = c
	}
	for _, spec := range pod.Spec.InitContainers {
		w.containers = append(w.containers, &container{spec: spec, dir: ContainerDir(w.a.o.DataDir, w.uid, spec.Name), init: true})
	}
	w.nInit = len(w.containers)
	for _, spec := range pod.Spec.Containers {
		w.containers = append(w.containers, &container{spec: spec, dir: ContainerDir(w.a.o.DataDir, w.uid, spec.Name)})
	}
	w.exits = make(chan exit, len(w.containers))
	// Probe runs end with probeCtx, which ends when run returns; run waits for them so that
	// the agent's Run returns only once every goroutine it started has ended.
	probeCtx, stopProbes := context.WithCancel(ctx)
	w.probeResults = make(chan probeResult, 3*len(w.containers))
	defer w.probing.Wait()
	defer stopProbes()
	w.writeStatus(ctx) // Pending, with the IP, before anything runs
	w.advance(pod)

	timer := time.NewTimer(0)
	defer timer.Stop()
	dirty, retryAt := true, time.Time{}
	for {
		if dirty {
			if w.writeStatus(ctx) {
				dirty, retryAt = false, time.Time{}
			} else {
				retryAt = time.Now().Add(statusRetry)
			}
		}
		timer.Reset(w.nextWake(retryAt))
		select {
		case <-ctx.Done():
			w.stopAll(context.Background(), w.a.o.ShutdownGrace)
			return
		case <-w.wake:
			pod, removed := w.latest()
			if removed {
				w.stopAll(ctx, 0)
				_ = os.RemoveAll(w.a.podDir(w.uid))
				return
			}
			if pod.DeletionTimestamp != nil {
				w.killing(pod)
				w.stopAll(ctx, gracePeriod(pod))
				w.a.deletePod(ctx, pod)
				return
			}
		case e := <-w.exits:
			pod, _ := w.latest()
			w.exited(pod, e)
			w.resetProbes(e.index)
			w.advance(pod)
			dirty = true
		case r := <-w.probeResults:
			pod, _ := w.latest()
			if w.probeDone(pod, r) {
				dirty = true
			}
		case <-timer.C:
			pod, _ := w.latest()
			now := time.Now()
			for i, c := range w.containers {
				if !c.nextStart.IsZero() && !now.Before(c.nextStart) {
					c.nextStart = time.Time{}
					w.startContainer(pod, i)
					dirty = true
				}
			}
			w.runDueProbes(probeCtx, now)
			if !retryAt.IsZero() && !now.Before(retryAt) {
				dirty = true
			}
		}
	}
}

// nextWake is how long until the next due restart, probe run, SIGKILL after a failed probe,
// or status retry (an hour if none).
func (w *podWorker) nextWake(retryAt time.Time) time.Duration {
	next := retryAt
	if p := w.nextProbeWake(); !p.IsZero() && (next.IsZero() || p.Before(next)) {
		next = p
	}
	for _, c := range w.containers {
		if !c.nextStart.IsZero() && (next.IsZero() || c.nextStart.Before(next)) {
			next = c.nextStart
		}
	}
	if next.IsZero() {
		return time.Hour
	}
	return max(time.Until(next), 0)
}

func gracePeriod(p *corev1.Pod) time.Duration {
	switch {
	case p.DeletionGracePeriodSeconds != nil:
		return time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	case p.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

// start starts container i; a failure to start counts as an exit with code 128.
func (w *podWorker) start(pod *corev1.Pod, i int) {
	c := w.containers[i]
	cmd, logf, err := w.command(pod, c)
	if err == nil {
		err = cmd.Start()
		logf.Close() // the child has its own copy
		if err != nil {
			// Nothing ran: give back the last run's log, so --previous still shows it.
			_ = os.Rename(filepath.Join(c.dir, PreviousLogFile), filepath.Join(c.dir, LogFile))
		}
	}
	if err != nil {
		w.log().Error("starting container", "container", c.spec.Name, "err", err)
		w.event(pod, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		if w.configFailed(c, err) {
			return
		}
		now := time.Now()
		c.last = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error(),
			StartedAt: metav1.NewTime(now), FinishedAt: metav1.NewTime(now)}
		c.waitingReason, c.waitingMessage = "RunContainerError", err.Error()
		w.afterExit(pod, c, 128, now)
		return
	}
	c.cmd, c.startedAt, c.waitingReason, c.waitingMessage = cmd, metav1.Now(), "", ""
	w.event(pod, corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	go func() {
		_ = cmd.Wait()
		code := int32(cmd.ProcessState.ExitCode())
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int32(ws.Signal())
		}
		w.exits <- exit{index: i, code: code, at: time.Now()}
	}()
}

// command builds the container's process: command+args ("kplane" as the first word is this
// binary) with $(VAR) expanded, the environment of containerEnv (env, envFrom,
// POD_IP/POD_NAME/POD_NAMESPACE, the agent's PATH), the container's directory as working
// directory (spec.workingDir inside it), output to LogFile.
func (w *podWorker) command(pod *corev1.Pod, c *container) (*exec.Cmd, *os.File, error) {
	if c.init && c.spec.RestartPolicy != nil && *c.spec.RestartPolicy == corev1.ContainerRestartPolicyAlways {
		// A sidecar would never complete and hold the pod in Pending without a word; say so.
		return nil, nil, &configError{errors.New("sidecar containers (an init container with restartPolicy Always) are not supported by the kplane node agent")}
	}
	env, argv, err := w.containerEnv(pod, c)
	if err != nil {
		return nil, nil, err
	}
	if len(argv) == 0 {
		return nil, nil, errNoCommand
	}
	if argv[0] == "kplane" {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, err
		}
		argv[0] = exe
	}
	dir := c.dir
	if c.spec.WorkingDir != "" {
		dir = filepath.Join(c.dir, c.spec.WorkingDir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	// Each run gets a fresh LogFile; the last run's output is kept for `kubectl logs --previous`.
	logPath := filepath.Join(c.dir, LogFile)
	if err := os.Rename(logPath, filepath.Join(c.dir, PreviousLogFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, logf, nil
}

// exited records a container's exit and decides on its restart.
func (w *podWorker) exited(pod *corev1.Pod, e exit) {
	c := w.containers[e.index]
	pid := c.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL) // whatever the container left behind in its group
	c.cmd = nil
	reason := "Completed"
	if e.code != 0 {
		reason = "Error"
	}
	c.last = &corev1.ContainerStateTerminated{ExitCode: e.code, Reason: reason, StartedAt: c.startedAt, FinishedAt: metav1.NewTime(e.at)}
	if e.at.Sub(c.startedAt.Time) > 10*time.Minute { // ran long enough: forget past crashes
		c.backoff = 0
	}
	w.afterExit(pod, c, e.code, e.at)
}

// afterExit schedules a restart as the restart policy says, or marks the container finished.
func (w *podWorker) afterExit(pod *corev1.Pod, c *container, code int32, at time.Time) {
	switch restartPolicy(pod, c) {
	case corev1.RestartPolicyNever:
		c.finished = true
		return
	case corev1.RestartPolicyOnFailure:
		if code == 0 {
			c.finished = true
			return
		}
	}
	if c.backoff == 0 {
		c.backoff = w.a.o.BackoffBase
	} else {
		c.backoff = min(2*c.backoff, w.a.o.BackoffMax)
	}
	c.nextStart = at.Add(c.backoff)
	c.restarts++
	w.event(pod, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s", c.spec.Name)
	if c.waitingReason == "" {
		c.waitingReason = "CrashLoopBackOff"
		c.waitingMessage = fmt.Sprintf("back-off %s restarting failed container %s", c.backoff, c.spec.Name)
	}
}

// stopAll sends SIGTERM to every running container's process group, waits up to grace for
// them to exit, then sends SIGKILL and waits for the rest. A cancelled ctx cuts the grace short.
func (w *podWorker) stopAll(ctx context.Context, grace time.Duration) {
	running := 0
	for _, c := range w.containers {
		c.nextStart = time.Time{}
		if c.cmd != nil {
			running++
			sig := syscall.SIGTERM
			if grace <= 0 {
				sig = syscall.SIGKILL
			}
			_ = syscall.Kill(-c.cmd.Process.Pid, sig)
		}
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	killAll := func() {
		for _, c := range w.containers {
			if c.cmd != nil {
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	done := ctx.Done()
	for running > 0 {
		select {
		case e := <-w.exits:
			c := w.containers[e.index]
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			c.cmd = nil
			running--
		case <-deadline.C:
			killAll()
		case <-done:
			done = nil
			killAll()
		}
	}
}

// status computes the pod's status from its containers. Until every init container has
// completed the pod is Pending (Failed if one failed for good) and its containers wait with
// reason PodInitializing. A running container is started once its startup probe (if any)
// passed, and ready once also its readiness probe (if any) passes; the pod is ready when all
// its containers are.
func (w *podWorker) status(pod *corev1.Pod) corev1.PodStatus {
	st := corev1.PodStatus{
		HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP: w.ip, PodIPs: []corev1.PodIP{{IP: w.ip}},
		StartTime: &w.startTime, QOSClass: pod.Status.QOSClass,
	}
	initialized, initFailed := w.initialized(), false
	for _, c := range w.containers[:w.nInit] {
		st.InitContainerStatuses = append(st.InitContainerStatuses, c.status(initialized))
		initFailed = initFailed || (c.finished && !c.completed())
	}
	allReady, allFinished, anyStarted, anyFailed := true, true, false, false
	for _, c := range w.containers[w.nInit:] {
		st.ContainerStatuses = append(st.ContainerStatuses, c.status(initialized))
		anyStarted = anyStarted || c.cmd != nil || c.last != nil
		anyFailed = anyFailed || (c.finished && c.last != nil && c.last.ExitCode != 0)
		allReady = allReady && c.cmd != nil && c.ready()
		allFinished = allFinished && c.finished
	}
	switch {
	case initFailed || (allFinished && anyFailed):
		st.Phase = corev1.PodFailed
	case !initialized:
		st.Phase = corev1.PodPending
	case allFinished:
		st.Phase = corev1.PodSucceeded
	case anyStarted:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	ready := corev1.ConditionFalse
	reason := "ContainersNotReady"
	if allReady {
		ready, reason = corev1.ConditionTrue, ""
	}
	if allFinished || initFailed {
		reason = "PodCompleted"
	}
	init, initReason := corev1.ConditionTrue, ""
	if !initialized {
		init, initReason = corev1.ConditionFalse, "ContainersNotInitialized"
	}
	st.Conditions = []corev1.PodCondition{
		w.condition(corev1.PodScheduled, corev1.ConditionTrue, ""),
		w.condition(corev1.PodInitialized, init, initReason),
		w.condition(corev1.ContainersReady, ready, reason),
		w.condition(corev1.PodReady, ready, reason),
	}
	return st
}

// status is the container's status; initialized says whether the pod's init containers
// are all done (before, a container that never ran waits with reason PodInitializing).
func (c *container) status(initialized bool) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: c.spec.Image, RestartCount: c.restarts}
	if c.last != nil && !c.finished {
		cs.LastTerminationState.Terminated = c.last
	}
	switch {
	case c.cmd != nil:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: c.startedAt}
		cs.Ready, cs.Started = c.ready(), new(c.started())
	case c.finished && c.last != nil:
		cs.State.Terminated = c.last
		cs.LastTerminationState = corev1.ContainerState{}
		cs.Started = new(false)
		cs.Ready = c.init && c.completed() // as the kubelet: a completed init container is ready
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.waitingReason, Message: c.waitingMessage}
		switch {
		case cs.State.Waiting.Reason != "":
		case !initialized && c.last == nil:
			cs.State.Waiting.Reason = "PodInitializing"
		default:
			cs.State.Waiting.Reason = "ContainerCreating"
		}
		cs.Started = new(false)
	}
	return cs
}

// condition keeps the transition time of a condition whose status did not change.
func (w *podWorker) condition(t corev1.PodConditionType, s corev1.ConditionStatus, reason string) corev1.PodCondition {
	if old, ok := w.conditions[t]; ok && old.Status == s && old.Reason == reason {
		return old
	}
	c := corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.Now()}
	w.conditions[t] = c
	return c
}

// writeStatus writes the computed status if it differs from the last one written. It reports
// whether the status is now written (false: try again later).
func (w *podWorker) writeStatus(ctx context.Context) bool {
	pods := client.Resource[*corev1.Pod](w.a.c, "pods")
	cached, _ := w.latest()
	st := w.status(cached)
	if w.lastStatus != nil && reflect.DeepEqual(*w.lastStatus, st) {
		return true
	}
	for range 3 {
		pod, err := pods.Namespace(cached.Namespace).Get(ctx, cached.Name)
		if err == nil && pod.UID != w.uid {
			err = fmt.Errorf("pod was replaced (uid %s)", pod.UID)
		}
		if err != nil {
			if client.IsNotFound(err) {
				return true // gone; the informer tells the worker
			}
			if ctx.Err() == nil {
				w.log().Error("reading pod for status", "err", err)
			}
			return false
		}
		pod.Status = st
		_, err = pods.Namespace(pod.Namespace).UpdateStatus(ctx, pod)
		if err == nil {
			w.lastStatus = &st
			return true
		}
		if !client.IsConflict(err) {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				w.log().Error("writing pod status", "err", err)
			}
			return false
		}
	}
	return false
}
