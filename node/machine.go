package node

import (
	"fmt"
	"reflect"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podMachine is the lifecycle of one pod on this node as plain data: it decides what to
// start, restart, probe, signal and report, and does no I/O and reads no clock. Its inputs
// are methods (Update, Removed, Shutdown, SetupDone, Started, Exited, ProbeDone, Tick,
// StatusWritten), each given the current time; its outputs accumulate until Ready drains
// them, and NextWake says when Tick is due. The pod worker (worker.go) owns one machine,
// feeds it from the processes, probes and API, and carries out what Ready returns.
//
// Contract: after every input, call Ready and carry out all its actions, reporting each
// start with Started (or StartFailed) and each setup with SetupDone before the next input;
// call Tick no later than NextWake. Once Done reports true, the machine takes no more input.
type podMachine struct {
	cfg machineConfig
	pod *corev1.Pod // the latest state from the API
	ip  string

	startTime metav1.Time
	// containers are the pod's init containers (the first nInit, run one after another to
	// completion) followed by its containers, started together once mainStarted.
	containers  []*containerState
	nInit       int
	mainStarted bool

	// setup is the pod-level preparation (volumes) that comes before any container.
	setupDone    bool
	setupPending bool // a setup action is out, its result not reported yet
	setupAt      time.Time
	setupBackoff time.Duration

	// stopping, once set, means no container starts again; stopAt is when SIGKILL follows
	// the SIGTERM sent to every running container (zero once it is sent).
	stopping stopReason
	stopAt   time.Time

	conditions    map[corev1.PodConditionType]corev1.PodCondition
	written       *corev1.PodStatus // the last status written to the API
	statusPending bool              // a status write is out
	statusRetryAt time.Time

	out  actions
	done bool
}

// machineConfig holds the timings of a pod's lifecycle.
type machineConfig struct {
	// BackoffBase and BackoffMax pace container restarts (doubling per quick exit).
	BackoffBase, BackoffMax time.Duration
	// SetupRetryBase and SetupRetryMax pace the retries of a failed pod setup (a volume whose
	// ConfigMap does not exist yet).
	SetupRetryBase, SetupRetryMax time.Duration
	// StatusRetry is how soon a failed status write is tried again.
	StatusRetry time.Duration
}

type stopReason int

const (
	running      stopReason = iota
	deleting                // the pod has a deletionTimestamp: stop gracefully, then delete the object
	removed                 // the object is gone from the API: kill at once
	shuttingDown            // the agent stops: stop gracefully, keep the object
)

// containerState is one container of the pod as the machine sees it.
type containerState struct {
	spec corev1.Container
	init bool // an init container: restarted only on failure, whatever the pod's policy

	// run counts the container's starts; actions about a run carry its number, so that a
	// late report about an earlier run is told apart.
	run      int
	starting bool // a start action is out
	running  bool
	// startedAt is when the current (or last) run started.
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
	// probes of the current run, by kind; nil when not configured or not running.
	probes [3]*prober
	// killAt: a failed liveness or startup probe sent SIGTERM; SIGKILL is due then.
	killAt time.Time
}

// prober is one probe of one run of a container.
type prober struct {
	spec corev1.Probe // with defaults applied
	// next is when the next run is due; inFlight: a run has not reported yet.
	next     time.Time
	inFlight bool
	// successes and failures count consecutive results; ok is the settled result, flipped
	// only when a threshold is reached; everOK: ok was true at some point of this run.
	successes, failures int32
	ok, everOK          bool
	// quick is the next interval of the quick retries a readiness probe gets until it first
	// passes, for one period after its first run (zero: retry at the period); quickUntil
	// ends them.
	quick      time.Duration
	quickUntil time.Time
}

// A readiness probe that has not passed yet in a run is tried again after quickRetryStart,
// doubling up to quickRetryMax, for one period after its first run: a container becomes
// Ready within tens of milliseconds of listening instead of a whole period after its first
// try, and a slow starter costs at most ten probes a second for one period. Failures in
// that window are what a start looks like, so they make no Unhealthy event.
const (
	quickRetryStart = 25 * time.Millisecond
	quickRetryMax   = 100 * time.Millisecond
)

// actions are what the machine asks the worker to do.
type actions struct {
	// setup asks for the pod-level preparation (volumes); report it with SetupDone.
	setup bool
	// starts lists containers to start; report each with Started or StartFailed.
	starts []startAction
	// signals lists signals for a container's run (its whole process group).
	signals []signalAction
	// probes lists probe runs; report each with ProbeDone.
	probes []probeAction
	events []eventAction
	// status is a status to write; report it with StatusWritten.
	status *corev1.PodStatus
	// deletePod: every container has stopped after the pod's deletion; delete the object
	// (grace period 0) and the pod's directory. removeDir: only the directory.
	deletePod, removeDir bool
}

type startAction struct{ index, run int }

type signalAction struct {
	index, run int
	sig        syscall.Signal
}

type probeAction struct {
	index, run int
	kind       probeKind
	spec       corev1.Probe
}

type eventAction struct{ eventType, reason, message string }

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

func (a *actions) empty() bool {
	return !a.setup && len(a.starts) == 0 && len(a.signals) == 0 && len(a.probes) == 0 && len(a.events) == 0 &&
		a.status == nil && !a.deletePod && !a.removeDir
}

// newPodMachine starts the lifecycle of pod, which has the address ip, at now: its first
// action sets the pod up.
func newPodMachine(pod *corev1.Pod, ip string, cfg machineConfig, now time.Time) *podMachine {
	m := &podMachine{cfg: cfg, pod: pod, ip: ip, startTime: metav1.NewTime(now), conditions: map[corev1.PodConditionType]corev1.PodCondition{}}
	if pod.Status.StartTime != nil {
		m.startTime = *pod.Status.StartTime
	}
	for _, c := range pod.Status.Conditions {
		m.conditions[c.Type] = c
	}
	for _, spec := range pod.Spec.InitContainers {
		m.containers = append(m.containers, &containerState{spec: spec, init: true})
	}
	m.nInit = len(m.containers)
	for _, spec := range pod.Spec.Containers {
		m.containers = append(m.containers, &containerState{spec: spec})
	}
	m.setupPending = true
	m.out.setup = true
	m.status(now) // the conditions date from the pod's arrival
	return m
}

// Ready returns the actions decided since the last call and forgets them.
func (m *podMachine) Ready() actions {
	a := m.out
	m.out = actions{}
	return a
}

// Done reports whether the pod's lifecycle on this node is over.
func (m *podMachine) Done() bool { return m.done }

// Pod is the pod's latest state as given to the machine.
func (m *podMachine) Pod() *corev1.Pod { return m.pod }

// Update gives the pod's latest state from the API; a deletionTimestamp starts its graceful
// stop (a shorter grace period given later cuts the wait short).
func (m *podMachine) Update(pod *corev1.Pod, now time.Time) {
	m.pod = pod
	if pod.DeletionTimestamp != nil && m.stopping != removed && m.stopping != shuttingDown {
		grace := gracePeriod(pod)
		if m.stopping == running {
			m.stop(deleting, grace, now, true)
		} else if at := now.Add(grace); !m.stopAt.IsZero() && at.Before(m.stopAt) {
			m.stopAt = at
		}
	}
	m.settle(now)
}

// Removed says the pod is gone from the API: its containers are killed at once.
func (m *podMachine) Removed(now time.Time) {
	m.stop(removed, 0, now, false)
	m.settle(now)
}

// Shutdown says the agent is stopping: containers get SIGTERM and grace to exit (a pod
// already being deleted keeps its earlier deadline), the pod object stays.
func (m *podMachine) Shutdown(grace time.Duration, now time.Time) {
	switch m.stopping {
	case running:
		m.stop(shuttingDown, grace, now, false)
	case deleting:
		m.stopping = shuttingDown
		if at := now.Add(grace); !m.stopAt.IsZero() && at.Before(m.stopAt) {
			m.stopAt = at
		}
	}
	m.settle(now)
}

// stop sends every running container SIGTERM (SIGKILL with no grace) and ends what is
// pending; SIGKILL follows at now+grace.
func (m *podMachine) stop(why stopReason, grace time.Duration, now time.Time, events bool) {
	m.stopping, m.stopAt = why, now.Add(grace)
	sig := syscall.SIGTERM
	if grace <= 0 {
		sig = syscall.SIGKILL
	}
	for i, c := range m.containers {
		c.nextStart = time.Time{}
		if !c.running {
			continue
		}
		if events {
			m.event(corev1.EventTypeNormal, "Killing", "Stopping container %s", c.spec.Name)
		}
		m.out.signals = append(m.out.signals, signalAction{index: i, run: c.run, sig: sig})
	}
}

// SetupDone reports the pod-level setup: on failure (err is the reason shown in events)
// it is tried again with a doubling delay and the containers keep waiting.
func (m *podMachine) SetupDone(err error, reason string, now time.Time) {
	m.setupPending = false
	if err != nil {
		m.event(corev1.EventTypeWarning, reason, "%v", err)
		if m.setupBackoff == 0 {
			m.setupBackoff = m.cfg.SetupRetryBase
		} else {
			m.setupBackoff = min(2*m.setupBackoff, m.cfg.SetupRetryMax)
		}
		m.setupAt = now.Add(m.setupBackoff)
	} else {
		m.setupDone = true
		m.advance()
	}
	m.settle(now)
}

// Started reports that container index's run started at now.
func (m *podMachine) Started(index, run int, now time.Time) {
	c := m.containers[index]
	if run != c.run || !c.starting {
		return
	}
	c.starting, c.running = false, true
	c.startedAt, c.waitingReason, c.waitingMessage = metav1.NewTime(now), "", ""
	m.event(corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	m.armProbes(c, now)
	if m.stopping != running { // stopped while it was starting
		m.out.signals = append(m.out.signals, signalAction{index: index, run: run, sig: syscall.SIGKILL})
	}
	m.settle(now)
}

// StartFailed reports that container index could not be started. A config error (a missing
// ConfigMap, Secret or key) makes it wait with CreateContainerConfigError and be tried again
// after BackoffBase, without a restart counted, since nothing ran; any other error counts
// as an exit with code 128 (StartError).
func (m *podMachine) StartFailed(index, run int, err error, configErr bool, now time.Time) {
	c := m.containers[index]
	if run != c.run || !c.starting {
		return
	}
	c.starting = false
	m.event(corev1.EventTypeWarning, "Failed", "Error: %v", err)
	switch {
	case m.stopping != running:
	case configErr:
		c.waitingReason, c.waitingMessage = "CreateContainerConfigError", err.Error()
		c.nextStart = now.Add(m.cfg.BackoffBase)
	default:
		c.last = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error(),
			StartedAt: metav1.NewTime(now), FinishedAt: metav1.NewTime(now)}
		c.waitingReason, c.waitingMessage = "RunContainerError", err.Error()
		m.afterExit(c, 128, now)
		m.advance()
	}
	m.settle(now)
}

// Exited reports that container index's run ended with code at now; reason overrides the
// usual Completed/Error (OOMKilled).
func (m *podMachine) Exited(index, run int, code int32, reason string, now time.Time) {
	c := m.containers[index]
	if run != c.run || !c.running {
		return
	}
	c.running = false
	c.probes, c.killAt = [3]*prober{}, time.Time{}
	if reason == "" {
		reason = "Completed"
		if code != 0 {
			reason = "Error"
		}
	}
	c.last = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: c.startedAt, FinishedAt: metav1.NewTime(now)}
	if m.stopping == running {
		if now.Sub(c.startedAt.Time) > 10*time.Minute { // ran long enough: forget past crashes
			c.backoff = 0
		}
		m.afterExit(c, code, now)
		m.advance()
	}
	m.settle(now)
}

// afterExit schedules a restart as the restart policy says, or marks the container finished.
func (m *podMachine) afterExit(c *containerState, code int32, at time.Time) {
	switch m.restartPolicy(c) {
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
		c.backoff = m.cfg.BackoffBase
	} else {
		c.backoff = min(2*c.backoff, m.cfg.BackoffMax)
	}
	c.nextStart = at.Add(c.backoff)
	c.restarts++
	m.event(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s", c.spec.Name)
	if c.waitingReason == "" {
		c.waitingReason = "CrashLoopBackOff"
		c.waitingMessage = fmt.Sprintf("back-off %s restarting failed container %s", c.backoff, c.spec.Name)
	}
}

// restartPolicy is the policy that applies to c: the pod's, except that an init container
// runs to completion, so it is restarted only on failure even under Always.
func (m *podMachine) restartPolicy(c *containerState) corev1.RestartPolicy {
	if c.init && m.pod.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		return corev1.RestartPolicyOnFailure
	}
	return m.pod.Spec.RestartPolicy
}

// completed says whether an init container ran to completion successfully.
func (c *containerState) completed() bool {
	return c.finished && c.last != nil && c.last.ExitCode == 0
}

// initialized says whether every init container completed.
func (m *podMachine) initialized() bool {
	for _, c := range m.containers[:m.nInit] {
		if !c.completed() {
			return false
		}
	}
	return true
}

// advance starts what comes next once the pod is set up: the first init container that has
// not completed, if it has never run (one running, starting, waiting for its restart, or
// failed for good holds the rest back), or, once all completed, the pod's containers.
func (m *podMachine) advance() {
	if !m.setupDone || m.stopping != running {
		return
	}
	for i, c := range m.containers[:m.nInit] {
		if c.completed() {
			continue
		}
		if !c.running && !c.starting && c.last == nil && c.nextStart.IsZero() && !c.finished {
			m.start(i)
		}
		return
	}
	if m.mainStarted {
		return
	}
	m.mainStarted = true
	for i := m.nInit; i < len(m.containers); i++ {
		m.start(i)
	}
}

func (m *podMachine) start(i int) {
	c := m.containers[i]
	c.run++
	c.starting, c.nextStart = true, time.Time{}
	m.out.starts = append(m.out.starts, startAction{index: i, run: c.run})
}

// armProbes sets up the probes of a container's new run, first due after
// initialDelaySeconds. A liveness probe counts as passing until it fails; readiness and
// startup as failing until they pass.
//
// A liveness probe's first run waits at least one period: the kubelet probes on a ticker
// started with the pod, so its first liveness run comes about a period after a container
// starts, never in the moment before the program listens. Probed at once, every start of a
// container whose liveness probe has no initial delay (the chart `helm create` writes) would
// log an Unhealthy event, and with failureThreshold 1 be killed before it could listen.
func (m *podMachine) armProbes(c *containerState, now time.Time) {
	c.probes, c.killAt = [3]*prober{}, time.Time{}
	for kind, spec := range []*corev1.Probe{c.spec.StartupProbe, c.spec.LivenessProbe, c.spec.ReadinessProbe} {
		if spec == nil {
			continue
		}
		p := &prober{spec: withProbeDefaults(*spec), ok: probeKind(kind) == livenessProbe}
		delay := p.spec.InitialDelaySeconds
		if probeKind(kind) == livenessProbe {
			delay = max(delay, p.spec.PeriodSeconds)
		}
		p.next = now.Add(time.Duration(delay) * time.Second)
		if probeKind(kind) == readinessProbe {
			p.quick = quickRetryStart
			p.quickUntil = p.next.Add(time.Duration(p.spec.PeriodSeconds) * time.Second)
		}
		c.probes[kind] = p
	}
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

// started says whether the container's startup probe (if any) has succeeded.
func (c *containerState) started() bool {
	p := c.probes[startupProbe]
	return p == nil || p.ok
}

// ready says whether the container's readiness probe (if any) passes and it has started.
func (c *containerState) ready() bool {
	p := c.probes[readinessProbe]
	return c.started() && (p == nil || p.ok)
}

// activeProbes lists the probes of c that may run now: none while it is not running or is
// being killed, only the startup probe until it succeeded, then liveness and readiness.
func (m *podMachine) activeProbes(c *containerState) []probeKind {
	if !c.running || !c.killAt.IsZero() || m.stopping != running {
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

// ProbeDone records the result of a probe run; failing liveness or startup probes kill the
// container.
func (m *podMachine) ProbeDone(index, run int, kind probeKind, ok bool, msg string, now time.Time) {
	c := m.containers[index]
	p := c.probes[kind]
	if run != c.run || p == nil || !p.inFlight {
		return // about an earlier run of the container
	}
	p.inFlight = false
	if ok {
		p.successes, p.failures = p.successes+1, 0
		if p.successes >= p.spec.SuccessThreshold {
			p.ok, p.everOK = true, true
		}
	} else {
		p.successes, p.failures = 0, p.failures+1
		if p.failures >= p.spec.FailureThreshold {
			p.ok = false
		}
		if p.everOK || p.quickUntil.IsZero() || !now.Before(p.quickUntil) {
			m.event(corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", kind.title(), msg)
		}
	}
	switch {
	case p.quick == 0:
	case p.everOK || !now.Before(p.quickUntil):
		p.quick = 0
	case !ok:
		// Not listening yet, most likely: look again soon rather than a period later.
		p.next = now.Add(p.quick)
		p.quick = min(2*p.quick, quickRetryMax)
	}
	if !ok && kind != readinessProbe && p.failures >= p.spec.FailureThreshold {
		m.killForProbe(index, p, kind, now)
	}
	m.settle(now)
}

// killForProbe sends SIGTERM to a container whose liveness or startup probe failed; SIGKILL
// follows after the probe's terminationGracePeriodSeconds, else the pod's. Its exit then
// restarts it per restartPolicy, as any exit.
func (m *podMachine) killForProbe(index int, p *prober, kind probeKind, now time.Time) {
	c := m.containers[index]
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case p.spec.TerminationGracePeriodSeconds != nil:
		grace = *p.spec.TerminationGracePeriodSeconds
	case m.pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *m.pod.Spec.TerminationGracePeriodSeconds
	}
	m.event(corev1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", c.spec.Name, kind.String())
	sig := syscall.SIGTERM
	if grace <= 0 {
		sig = syscall.SIGKILL
	}
	m.out.signals = append(m.out.signals, signalAction{index: index, run: c.run, sig: sig})
	c.killAt = now.Add(time.Duration(grace) * time.Second)
}

// Tick lets time pass: due restarts, setup retries and probe runs start, and SIGKILL goes to
// containers whose grace is over.
func (m *podMachine) Tick(now time.Time) {
	if m.stopping != running {
		if !m.stopAt.IsZero() && !now.Before(m.stopAt) {
			for i, c := range m.containers {
				if c.running {
					m.out.signals = append(m.out.signals, signalAction{index: i, run: c.run, sig: syscall.SIGKILL})
				}
			}
			m.stopAt = time.Time{} // sent; the exits end the pod
		}
		m.settle(now)
		return
	}
	if !m.setupDone && !m.setupPending && !m.setupAt.IsZero() && !now.Before(m.setupAt) {
		m.setupPending, m.setupAt = true, time.Time{}
		m.out.setup = true
	}
	for i, c := range m.containers {
		if !c.nextStart.IsZero() && !now.Before(c.nextStart) {
			m.start(i)
		}
		if c.running && !c.killAt.IsZero() && !now.Before(c.killAt) {
			m.out.signals = append(m.out.signals, signalAction{index: i, run: c.run, sig: syscall.SIGKILL})
			c.killAt = now.Add(time.Hour) // sent; the exit resets it
		}
		for _, k := range m.activeProbes(c) {
			p := c.probes[k]
			if p.inFlight || now.Before(p.next) {
				continue
			}
			p.inFlight = true
			p.next = now.Add(time.Duration(p.spec.PeriodSeconds) * time.Second)
			m.out.probes = append(m.out.probes, probeAction{index: i, run: c.run, kind: k, spec: p.spec})
		}
	}
	m.settle(now)
}

// NextWake is when Tick is next due: the earliest restart, setup retry, probe run, SIGKILL
// or status retry (zero: nothing is scheduled).
func (m *podMachine) NextWake() time.Time {
	var next time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if m.stopping != running {
		if m.anyRunning() {
			earlier(m.stopAt)
		}
		return next
	}
	if !m.statusPending {
		earlier(m.statusRetryAt)
	}
	earlier(m.setupAt)
	for _, c := range m.containers {
		earlier(c.nextStart)
		if c.running {
			earlier(c.killAt)
		}
		for _, k := range m.activeProbes(c) {
			if p := c.probes[k]; !p.inFlight {
				earlier(p.next)
			}
		}
	}
	return next
}

func (m *podMachine) anyStarting() bool {
	for _, c := range m.containers {
		if c.starting {
			return true
		}
	}
	return false
}

func (m *podMachine) anyRunning() bool {
	for _, c := range m.containers {
		if c.running || c.starting {
			return true
		}
	}
	return false
}

// StatusWritten reports the outcome of a status write; a failed one is tried again after
// StatusRetry.
func (m *podMachine) StatusWritten(st *corev1.PodStatus, ok bool, now time.Time) {
	m.statusPending = false
	if ok {
		m.written, m.statusRetryAt = st, time.Time{}
	} else {
		m.statusRetryAt = now.Add(m.cfg.StatusRetry)
	}
	m.settle(now)
}

// settle ends every input: a stopping pod whose containers have all exited is finished,
// and a changed status is queued for writing (not while stopping: the object is being
// deleted, or the agent is going away).
func (m *podMachine) settle(now time.Time) {
	if m.done {
		return
	}
	if m.stopping != running {
		if !m.anyRunning() {
			m.done = true
			m.out.deletePod = m.stopping == deleting
			m.out.removeDir = m.stopping == removed
		}
		return
	}
	if m.statusPending || (!m.statusRetryAt.IsZero() && now.Before(m.statusRetryAt)) {
		return
	}
	// A setup or start that is out is reported back at once: the status waits for it, so
	// that a pod whose containers start right away is written once, Running, rather than
	// Pending first.
	if m.setupPending || m.anyStarting() {
		return
	}
	st := m.status(now)
	if m.written != nil && reflect.DeepEqual(*m.written, st) {
		return
	}
	m.statusPending = true
	m.out.status = &st
}

func (m *podMachine) event(eventType, reason, format string, args ...any) {
	m.out.events = append(m.out.events, eventAction{eventType: eventType, reason: reason, message: fmt.Sprintf(format, args...)})
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

// status computes the pod's status. Until every init container has completed the pod is
// Pending (Failed if one failed for good) and its containers wait with reason
// PodInitializing. A running container is started once its startup probe (if any) passed,
// and ready once also its readiness probe (if any) passes; the pod is ready when all its
// containers are.
func (m *podMachine) status(now time.Time) corev1.PodStatus {
	st := corev1.PodStatus{
		HostIP: hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}},
		PodIP: m.ip, PodIPs: []corev1.PodIP{{IP: m.ip}},
		StartTime: &m.startTime, QOSClass: m.pod.Status.QOSClass,
	}
	initialized, initFailed := m.initialized(), false
	for _, c := range m.containers[:m.nInit] {
		st.InitContainerStatuses = append(st.InitContainerStatuses, c.status(initialized))
		initFailed = initFailed || (c.finished && !c.completed())
	}
	allReady, allFinished, anyStarted, anyFailed := true, true, false, false
	for _, c := range m.containers[m.nInit:] {
		st.ContainerStatuses = append(st.ContainerStatuses, c.status(initialized))
		anyStarted = anyStarted || c.running || c.last != nil
		anyFailed = anyFailed || (c.finished && c.last != nil && c.last.ExitCode != 0)
		allReady = allReady && c.running && c.ready()
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
		m.condition(corev1.PodScheduled, corev1.ConditionTrue, "", now),
		m.condition(corev1.PodInitialized, init, initReason, now),
		m.condition(corev1.ContainersReady, ready, reason, now),
		m.condition(corev1.PodReady, ready, reason, now),
	}
	return st
}

// status is the container's status; initialized says whether the pod's init containers
// are all done (before, a container that never ran waits with reason PodInitializing).
func (c *containerState) status(initialized bool) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: c.spec.Image, RestartCount: c.restarts}
	if c.last != nil && !c.finished {
		cs.LastTerminationState.Terminated = c.last
	}
	switch {
	case c.running:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: c.startedAt}
		// An init container is ready only once it has completed, as the kubelet reports it.
		cs.Ready, cs.Started = c.ready() && !c.init, new(c.started())
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
func (m *podMachine) condition(t corev1.PodConditionType, s corev1.ConditionStatus, reason string, now time.Time) corev1.PodCondition {
	if old, ok := m.conditions[t]; ok && old.Status == s && old.Reason == reason {
		return old
	}
	c := corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.NewTime(now)}
	m.conditions[t] = c
	return c
}
