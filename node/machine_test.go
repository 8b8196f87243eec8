package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pod state machine is tested without processes, servers or timers: each scenario feeds
// inputs at chosen times and compares the actions and the status that come out.

var machineTestConfig = machineConfig{
	BackoffBase: 10 * time.Second, BackoffMax: 40 * time.Second,
	SetupRetryBase: 500 * time.Millisecond, SetupRetryMax: 2 * time.Second, StatusRetry: time.Second,
}

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

// step is one input at t0+at and what must come out of it. want lists the actions in a
// compact form (see describe); phase and states, when set, are the status after the step
// ("running", "waiting:Reason", "terminated:Reason:code", "ready" suffixed with "+").
type step struct {
	at     time.Duration
	input  string
	do     func(m *podMachine, now time.Time)
	want   []string
	phase  corev1.PodPhase
	states []string
	wake   time.Duration // when set, NextWake must be t0+wake (-1: nothing scheduled)
	// unacked: the status asked for is not reported written (the next step reports it).
	unacked bool
}

// describe lists actions as strings: "setup", "start 0/1" (index/run), "signal 0/1 TERM",
// "probe 0/1 readiness", "event Reason", "status", "delete", "removeDir".
func describe(a actions) []string {
	var out []string
	if a.setup {
		out = append(out, "setup")
	}
	for _, s := range a.starts {
		out = append(out, fmt.Sprintf("start %d/%d", s.index, s.run))
	}
	for _, s := range a.signals {
		name := map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL"}[s.sig]
		out = append(out, fmt.Sprintf("signal %d/%d %s", s.index, s.run, name))
	}
	for _, p := range a.probes {
		out = append(out, fmt.Sprintf("probe %d/%d %s", p.index, p.run, p.kind))
	}
	for _, e := range a.events {
		out = append(out, "event "+e.reason)
	}
	if a.status != nil {
		out = append(out, "status")
	}
	if a.deletePod {
		out = append(out, "delete")
	}
	if a.removeDir {
		out = append(out, "removeDir")
	}
	return out
}

func containerStates(st *corev1.PodStatus) []string {
	var out []string
	for _, cs := range slices.Concat(st.InitContainerStatuses, st.ContainerStatuses) {
		var s string
		switch {
		case cs.State.Running != nil:
			s = "running"
		case cs.State.Terminated != nil:
			s = fmt.Sprintf("terminated:%s:%d", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		case cs.State.Waiting != nil:
			s = "waiting:" + cs.State.Waiting.Reason
		}
		if cs.Ready {
			s += "+"
		}
		out = append(out, s)
	}
	return out
}

// Inputs, by name, for the tables.
func setupOK(m *podMachine, now time.Time) { m.SetupDone(nil, "FailedMount", now) }
func started(i, run int) func(*podMachine, time.Time) {
	return func(m *podMachine, now time.Time) { m.Started(i, run, now) }
}
func exited(i, run int, code int32) func(*podMachine, time.Time) {
	return func(m *podMachine, now time.Time) { m.Exited(i, run, code, "", now) }
}
func tick(m *podMachine, now time.Time) { m.Tick(now) }
func probed(i, run int, kind probeKind, ok bool) func(*podMachine, time.Time) {
	return func(m *podMachine, now time.Time) { m.ProbeDone(i, run, kind, ok, "connection refused", now) }
}

func testPod(policy corev1.RestartPolicy, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"},
		Spec: corev1.PodSpec{RestartPolicy: policy, TerminationGracePeriodSeconds: new(int64(5))}}
	for _, name := range containers {
		c := corev1.Container{Name: strings.TrimPrefix(name, "init:")}
		if strings.HasPrefix(name, "init:") {
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
	}
	return p
}

func TestPodMachine(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	readiness := testPod(corev1.RestartPolicyAlways, "web")
	readiness.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 10, InitialDelaySeconds: 1, FailureThreshold: 3}
	liveness := testPod(corev1.RestartPolicyAlways, "web")
	liveness.Spec.Containers[0].LivenessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 2}
	delayedLiveness := testPod(corev1.RestartPolicyAlways, "web")
	delayedLiveness.Spec.Containers[0].LivenessProbe = &corev1.Probe{PeriodSeconds: 1, InitialDelaySeconds: 5}
	startup := testPod(corev1.RestartPolicyAlways, "web")
	startup.Spec.Containers[0].StartupProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 2}
	startup.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1}
	deleted := func(grace int64) func(*podMachine, time.Time) {
		return func(m *podMachine, now time.Time) {
			p := m.Pod().DeepCopy()
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: now}, &grace
			m.Update(p, now)
		}
	}

	cases := []struct {
		name  string
		pod   *corev1.Pod
		steps []step
	}{{
		name: "runs, crashes and restarts with a doubling backoff",
		pod:  testPod(corev1.RestartPolicyAlways, "web"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}, phase: corev1.PodRunning, states: []string{"running+"}, wake: -1},
			{at: 3 * s, input: "exit 1", do: exited(0, 1, 1), want: []string{"event BackOff", "status"}, states: []string{"waiting:CrashLoopBackOff"}, wake: 13 * s},
			{at: 13 * s, input: "tick", do: tick, want: []string{"start 0/2"}},
			{at: 13 * s, input: "started", do: started(0, 2), want: []string{"event Started", "status"}, states: []string{"running+"}},
			{at: 14 * s, input: "exit 2", do: exited(0, 2, 2), want: []string{"event BackOff", "status"}, wake: 34 * s},
			{at: 15 * s, input: "a late exit of run 1", do: exited(0, 1, 9), want: nil},
		},
	}, {
		name: "never: a failed container fails the pod",
		pod:  testPod(corev1.RestartPolicyNever, "job"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}},
			{at: s, input: "exit 3", do: exited(0, 1, 3), want: []string{"status"}, phase: corev1.PodFailed, states: []string{"terminated:Error:3"}, wake: -1},
		},
	}, {
		name: "on failure: success completes the pod",
		pod:  testPod(corev1.RestartPolicyOnFailure, "job"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}},
			{at: s, input: "exit 0", do: exited(0, 1, 0), want: []string{"status"}, phase: corev1.PodSucceeded, states: []string{"terminated:Completed:0"}},
		},
	}, {
		name: "init containers run in order before the containers; a failure is retried",
		pod:  testPod(corev1.RestartPolicyAlways, "init:a", "init:b", "web"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "a started", do: started(0, 1), want: []string{"event Started", "status"}, states: []string{"running", "waiting:PodInitializing", "waiting:PodInitializing"}},
			{at: s, input: "a fails", do: exited(0, 1, 1), want: []string{"event BackOff", "status"}, phase: corev1.PodPending, wake: 11 * s},
			{at: 11 * s, input: "tick", do: tick, want: []string{"start 0/2"}},
			{at: 11 * s, input: "a started", do: started(0, 2), want: []string{"event Started", "status"}},
			{at: 12 * s, input: "a completes", do: exited(0, 2, 0), want: []string{"start 1/1"}},
			{at: 12 * s, input: "b started", do: started(1, 1), want: []string{"event Started", "status"}},
			{at: 13 * s, input: "b completes", do: exited(1, 1, 0), want: []string{"start 2/1"}},
			{at: 13 * s, input: "web started", do: started(2, 1), want: []string{"event Started", "status"}, phase: corev1.PodRunning,
				states: []string{"terminated:Completed:0+", "terminated:Completed:0+", "running+"}},
		},
	}, {
		name: "never: a failed init container fails the pod",
		pod:  testPod(corev1.RestartPolicyNever, "init:a", "web"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}},
			{at: s, input: "a fails", do: exited(0, 1, 2), want: []string{"status"}, phase: corev1.PodFailed, states: []string{"terminated:Error:2", "waiting:PodInitializing"}},
		},
	}, {
		name: "a config error waits without a restart; a start error counts as an exit",
		pod:  testPod(corev1.RestartPolicyAlways, "web"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "config error", do: func(m *podMachine, now time.Time) {
				m.StartFailed(0, 1, errors.New("configmap \"x\" not found"), true, now)
			},
				want: []string{"event Failed", "status"}, states: []string{"waiting:CreateContainerConfigError"}, wake: 10 * s},
			{at: 10 * s, input: "tick", do: tick, want: []string{"start 0/2"}},
			{at: 10 * s, input: "start error", do: func(m *podMachine, now time.Time) { m.StartFailed(0, 2, errors.New("no such file"), false, now) },
				want: []string{"event Failed", "event BackOff", "status"}, phase: corev1.PodRunning, states: []string{"waiting:RunContainerError"}, wake: 20 * s},
		},
	}, {
		name: "a failed setup is retried with a doubling delay, then the containers start",
		pod:  testPod(corev1.RestartPolicyAlways, "web"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup fails", do: func(m *podMachine, now time.Time) {
				m.SetupDone(errors.New(`configmap "x" not found`), "FailedMount", now)
			},
				want: []string{"event FailedMount", "status"}, phase: corev1.PodPending, states: []string{"waiting:ContainerCreating"}, wake: 500 * ms},
			{at: 500 * ms, input: "tick", do: tick, want: []string{"setup"}},
			{at: 500 * ms, input: "setup fails", do: func(m *podMachine, now time.Time) { m.SetupDone(errors.New("again"), "FailedMount", now) },
				want: []string{"event FailedMount"}, wake: 1500 * ms},
			{at: 1500 * ms, input: "tick", do: tick, want: []string{"setup"}},
			{at: 1500 * ms, input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
		},
	}, {
		name: "readiness: quick retries until it first passes, then its period",
		pod:  readiness,
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}, states: []string{"running"}, wake: s},
			{at: s, input: "tick", do: tick, want: []string{"probe 0/1 readiness"}, wake: -1},
			{at: s, input: "fails, no event while starting", do: probed(0, 1, readinessProbe, false), want: nil, wake: s + 25*ms},
			{at: s + 25*ms, input: "tick", do: tick, want: []string{"probe 0/1 readiness"}},
			{at: s + 25*ms, input: "fails", do: probed(0, 1, readinessProbe, false), want: nil, wake: s + 75*ms},
			{at: s + 75*ms, input: "tick", do: tick, want: []string{"probe 0/1 readiness"}},
			{at: s + 75*ms, input: "fails", do: probed(0, 1, readinessProbe, false), want: nil, wake: s + 175*ms},
			{at: s + 175*ms, input: "tick", do: tick, want: []string{"probe 0/1 readiness"}},
			{at: s + 175*ms, input: "fails: the doubling stops at 100 ms", do: probed(0, 1, readinessProbe, false), want: nil, wake: s + 275*ms},
			{at: s + 275*ms, input: "tick", do: tick, want: []string{"probe 0/1 readiness"}},
			{at: s + 275*ms, input: "passes", do: probed(0, 1, readinessProbe, true), want: []string{"status"}, states: []string{"running+"}, wake: 11*s + 275*ms},
			{at: 11*s + 275*ms, input: "tick", do: tick, want: []string{"probe 0/1 readiness"}},
			{at: 11*s + 275*ms, input: "fails once: still ready, an event", do: probed(0, 1, readinessProbe, false), want: []string{"event Unhealthy"}, wake: 21*s + 275*ms},
		},
	}, {
		name: "readiness: quick retries last one period, then failures are reported",
		pod:  readiness,
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}, wake: s},
			{at: s, input: "tick", do: tick, want: []string{"probe 0/1 readiness"}},
			{at: 11 * s, input: "fails after the window", do: probed(0, 1, readinessProbe, false), want: []string{"event Unhealthy"}, wake: 11 * s},
		},
	}, {
		name: "liveness: failures kill the container, SIGKILL after the grace, then a restart",
		pod:  liveness,
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			// The first run waits a period, as the kubelet's first tick does.
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}, states: []string{"running+"}, wake: s},
			{at: s, input: "tick", do: tick, want: []string{"probe 0/1 liveness"}},
			{at: s, input: "fails", do: probed(0, 1, livenessProbe, false), want: []string{"event Unhealthy"}, wake: 2 * s},
			{at: 2 * s, input: "tick", do: tick, want: []string{"probe 0/1 liveness"}},
			{at: 2 * s, input: "fails again", do: probed(0, 1, livenessProbe, false), want: []string{"event Unhealthy", "signal 0/1 TERM", "event Killing"}, wake: 7 * s},
			{at: 7 * s, input: "tick", do: tick, want: []string{"signal 0/1 KILL"}},
			{at: 7 * s, input: "exit", do: exited(0, 1, 137), want: []string{"event BackOff", "status"}, states: []string{"waiting:CrashLoopBackOff"}, wake: 17 * s},
		},
	}, {
		name: "liveness: a longer initialDelaySeconds than the period delays the first run",
		pod:  delayedLiveness,
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}, wake: 5 * s},
			{at: s, input: "tick", do: tick, want: nil, wake: 5 * s},
			{at: 5 * s, input: "tick", do: tick, want: []string{"probe 0/1 liveness"}},
		},
	}, {
		name: "startup gates readiness; it fails the container when it never passes",
		pod:  startup,
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}, states: []string{"running"}},
			{input: "tick", do: tick, want: []string{"probe 0/1 startup"}},
			{input: "passes", do: probed(0, 1, startupProbe, true), want: []string{"status"}, wake: 0},
			{input: "tick", do: tick, want: []string{"probe 0/1 readiness"}},
			{input: "ready", do: probed(0, 1, readinessProbe, true), want: []string{"status"}, states: []string{"running+"}},
		},
	}, {
		name: "deletion: SIGTERM, SIGKILL after the grace period, then the object is deleted",
		pod:  testPod(corev1.RestartPolicyAlways, "a", "b"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1", "start 1/1"}},
			{input: "a started, b still starting", do: started(0, 1), want: []string{"event Started"}},
			{input: "b started", do: started(1, 1), want: []string{"event Started", "status"}},
			{at: s, input: "deleted", do: deleted(5), want: []string{"signal 0/1 TERM", "signal 1/1 TERM", "event Killing", "event Killing"}, wake: 6 * s},
			{at: 2 * s, input: "a exits, not restarted", do: exited(0, 1, 0), want: nil, wake: 6 * s},
			{at: 3 * s, input: "shorter grace", do: deleted(1), want: nil, wake: 4 * s},
			{at: 4 * s, input: "tick", do: tick, want: []string{"signal 1/1 KILL"}, wake: -1},
			{at: 4 * s, input: "b exits", do: exited(1, 1, 137), want: []string{"delete"}},
		},
	}, {
		name: "removed from the API: killed at once, the directory removed",
		pod:  testPod(corev1.RestartPolicyAlways, "web"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}},
			{input: "removed", do: func(m *podMachine, now time.Time) { m.Removed(now) }, want: []string{"signal 0/1 KILL"}},
			{input: "exits", do: exited(0, 1, 137), want: []string{"removeDir"}},
		},
	}, {
		name: "agent shutdown: SIGTERM, the object kept",
		pod:  testPod(corev1.RestartPolicyAlways, "web"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}},
			{input: "shutdown", do: func(m *podMachine, now time.Time) { m.Shutdown(2*s, now) }, want: []string{"signal 0/1 TERM"}, wake: 2 * s},
			{at: s, input: "exits", do: exited(0, 1, 143), want: nil},
		},
	}, {
		name: "a failed status write is tried again later",
		pod:  testPod(corev1.RestartPolicyAlways, "web"),
		steps: []step{
			{input: "new", want: []string{"setup"}},
			{input: "setup ok", do: setupOK, want: []string{"start 0/1"}},
			{input: "started", do: started(0, 1), want: []string{"event Started", "status"}, unacked: true},
			{input: "write fails", do: func(m *podMachine, now time.Time) { m.StatusWritten(nil, false, now) }, want: nil, wake: s},
			{at: s, input: "tick", do: tick, want: []string{"status"}, phase: corev1.PodRunning},
		},
	}}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newPodMachine(tc.pod, "10.0.0.1", machineTestConfig, t0)
			for i, st := range tc.steps {
				now := t0.Add(st.at)
				if st.do != nil {
					st.do(m, now)
				}
				a := m.Ready()
				if got := describe(a); !sameElements(got, st.want) {
					t.Fatalf("step %d (%s): actions %q, want %q", i, st.input, got, st.want)
				}
				if a.status != nil {
					if st.phase != "" && a.status.Phase != st.phase {
						t.Errorf("step %d (%s): phase %s, want %s", i, st.input, a.status.Phase, st.phase)
					}
					if st.states != nil && !slices.Equal(containerStates(a.status), st.states) {
						t.Errorf("step %d (%s): containers %q, want %q", i, st.input, containerStates(a.status), st.states)
					}
					if !st.unacked {
						m.StatusWritten(a.status, true, now)
						if more := describe(m.Ready()); len(more) > 0 {
							t.Fatalf("step %d (%s): writing the status asked for %q", i, st.input, more)
						}
					}
				} else if st.phase != "" || st.states != nil {
					st2 := m.status(now)
					if st.phase != "" && st2.Phase != st.phase {
						t.Errorf("step %d (%s): phase %s, want %s", i, st.input, st2.Phase, st.phase)
					}
					if st.states != nil && !slices.Equal(containerStates(&st2), st.states) {
						t.Errorf("step %d (%s): containers %q, want %q", i, st.input, containerStates(&st2), st.states)
					}
				}
				switch next := m.NextWake(); {
				case st.wake == -1 && !next.IsZero():
					t.Errorf("step %d (%s): next wake at +%s, want none", i, st.input, next.Sub(t0))
				case st.wake > 0 && !next.Equal(t0.Add(st.wake)):
					t.Errorf("step %d (%s): next wake at +%s, want +%s", i, st.input, next.Sub(t0), st.wake)
				}
			}
		})
	}
}

// sameElements compares action lists regardless of the order of different kinds (the
// actions struct groups them by kind) but keeping the order within a kind.
func sameElements(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	kind := func(s string) string { return strings.Fields(s)[0] }
	for _, k := range []string{"setup", "start", "signal", "probe", "event", "status", "delete", "removeDir"} {
		var g, w []string
		for _, s := range got {
			if kind(s) == k {
				g = append(g, s)
			}
		}
		for _, s := range want {
			if kind(s) == k {
				w = append(w, s)
			}
		}
		if !slices.Equal(g, w) {
			return false
		}
	}
	return true
}

// TestPodMachineConditionTimes: a condition keeps its transition time while its status
// stays, and takes the time of the input that changes it.
func TestPodMachineConditionTimes(t *testing.T) {
	m := newPodMachine(testPod(corev1.RestartPolicyAlways, "web"), "10.0.0.1", machineTestConfig, t0)
	m.Ready()
	m.SetupDone(nil, "FailedMount", t0)
	m.Ready()
	m.Started(0, 1, t0.Add(2*time.Second))
	st := m.Ready().status
	for _, c := range st.Conditions {
		want := t0
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			want = t0.Add(2 * time.Second)
		}
		if !c.LastTransitionTime.Time.Equal(want) {
			t.Errorf("%s: transition at %s, want %s", c.Type, c.LastTransitionTime.Time, want)
		}
	}
}
