package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kplane/kplane/node/cgroups"
	"github.com/kplane/kplane/node/mountns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// containerRun is one run of a container: its process, the environment and directory that
// probes and exec use, and the copier of its output into the log file.
type containerRun struct {
	name string
	run  int
	spec corev1.Container
	env  []string
	dir  string
	cmd  *exec.Cmd
	proc *mountns.Process
	// namespaced: the run has a mount namespace of its own (it has volume mounts), entered
	// by exec and probes; root is its root in there ("" for the host's).
	namespaced bool
	root       string
	logs       *logCopier
	// sessions are the run's stdin, output and exec'd processes as exec and attach use
	// them (sessions.go).
	sessions *runSessions
	// cg is the run's cgroup (cgroup.go), removed when the run ends.
	cg *cgroups.Container
}

// startContainer starts a run of spec: command+args ("kplane" as the first word is this
// binary) with $(VAR) expanded, the environment of containerEnv (env, envFrom,
// POD_IP/POD_NAME/POD_NAMESPACE, the agent's PATH), the container's directory as working
// directory (spec.workingDir inside it), stdout and stderr copied into LogFile with a time
// per line, in its own process group with SIGKILL as parent-death signal (stdin: a pipe the
// agent keeps for attach; tty: a pseudo-terminal for all three, see newRunSessions). An
// error that is a *configError means nothing could be tried (a missing ConfigMap, an
// unsupported field).
func (a *Agent) startContainer(ctx context.Context, w *podWorker, pod *corev1.Pod, spec corev1.Container, s startAction) (*containerRun, error) {
	if s.index < len(pod.Spec.InitContainers) && spec.RestartPolicy != nil && *spec.RestartPolicy == corev1.ContainerRestartPolicyAlways {
		// A sidecar would never complete and hold the pod in Pending without a word; say so.
		return nil, &configError{errors.New("sidecar containers (an init container with restartPolicy Always) are not supported by the kplane node agent")}
	}
	cdir := ContainerDir(a.o.DataDir, pod.UID, spec.Name)
	env, argv, err := a.containerEnv(ctx, pod, w.ip, spec, cdir)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, errNoCommand
	}
	if argv[0] == "kplane" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		argv[0] = exe
	}
	dir := cdir
	if spec.WorkingDir != "" {
		dir = filepath.Join(cdir, spec.WorkingDir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	mounts, err := w.mounts(spec, env)
	if err != nil {
		return nil, err
	}
	// The run's cgroup, with the container's limits, exists before its process does.
	cg, err := a.cgroups.Create(pod, &spec)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			_ = cg.Remove()
		}
	}()
	// Each run gets a fresh LogFile; the last run's output is kept for `kubectl logs --previous`.
	logPath := filepath.Join(cdir, LogFile)
	prevPath := filepath.Join(cdir, PreviousLogFile)
	if err := os.Rename(logPath, prevPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	logs, stdout, stderr, err := newLogCopier(logPath, a.clock)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.Env = dir, stdout, stderr, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	sessions, err := newRunSessions(spec, cmd, logs)
	var proc *mountns.Process
	var root string
	if err == nil {
		// The process is born in its cgroup: under v2 through clone3, under v1 forked from
		// a thread that is in the cgroup for that moment.
		release := cg.StartInside(cmd.SysProcAttr)
		proc, root, err = mountns.Start(cmd, mounts, a.scratchDir(), cgroupHooks(cg))
		release()
		sessions.started()
	}
	if err == nil {
		err = cg.Join(cmd.Process.Pid) // records the process; it is inside already
	}
	// The child has its own copies of the pipes' write ends; ours must close for the copier
	// to see the end of the output.
	stdout.Close()
	stderr.Close()
	if err != nil {
		if sessions != nil {
			sessions.abandon()
		}
		logs.abandon()
		// Nothing ran: give back the last run's log, so --previous still shows it.
		_ = os.Rename(prevPath, logPath)
		if len(mounts) > 0 {
			// The mounts could not be made (the machine allows no mount namespace, a mount
			// path is a file): say so and keep the pod waiting, never run it without its files.
			return nil, &configError{err}
		}
		return nil, err
	}
	logs.start()
	started = true
	return &containerRun{name: spec.Name, run: s.run, spec: spec, env: env, dir: dir, cmd: cmd, proc: proc,
		namespaced: len(mounts) > 0, root: root, logs: logs, cg: cg, sessions: sessions}, nil
}

// mounts lists where the container sees the pod's volumes: each volumeMount's volume (or
// its subPath, created in the volume when missing; subPathExpr expanded against env) at its
// mountPath.
func (w *podWorker) mounts(spec corev1.Container, env []string) ([]mountns.Mount, error) {
	w.mu.Lock()
	vols := w.volumes
	w.mu.Unlock()
	var out []mountns.Mount
	for _, vm := range spec.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, &configError{fmt.Errorf("volume %q is not set up", vm.Name)}
		}
		src := v.path
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = expand(vm.SubPathExpr, envLookup(env))
		}
		if sub != "" {
			var err error
			if src, err = subPath(v.path, sub); err != nil {
				return nil, &configError{fmt.Errorf("volume %q subPath %q: %w", vm.Name, sub, err)}
			}
		}
		out = append(out, mountns.Mount{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly || v.readOnly})
	}
	return out, nil
}

// subPath is the path of sub inside the volume at root, created as a directory if it does
// not exist; it may not leave the volume, through ".." or symbolic links.
func subPath(root, sub string) (string, error) {
	if filepath.IsAbs(sub) || strings.HasPrefix(filepath.Clean(sub), "..") {
		return "", errors.New("must be a relative path inside the volume")
	}
	p := filepath.Join(root, sub)
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return "", err
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	if real != realRoot && !strings.HasPrefix(real, realRoot+"/") {
		return "", errors.New("leaves the volume")
	}
	return real, nil
}

// envLookup looks names up in a KEY=VALUE environment.
func envLookup(env []string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				return v, true
			}
		}
		return "", false
	}
}

// wait waits for the run's process to exit, kills what it left behind in its process group
// and its cgroup, removes the cgroup, lets the copier write the last output, and returns the
// exit code (128+n for a signal) and a reason overriding Completed/Error ("" for none;
// OOMKilled when the memory limit was hit).
func (r *containerRun) wait() (int32, string) {
	_ = r.proc.Wait()
	killGroup(r.cmd.Process.Pid, syscall.SIGKILL)
	r.sessions.exited() // the processes exec'd into the run go with it
	reason := ""
	if r.cg.OOMKilled() {
		reason = "OOMKilled"
	}
	if err := r.cg.Remove(); err != nil {
		slog.Error("removing container cgroup", "container", r.name, "err", err)
	}
	r.logs.finish()
	r.sessions.outputDone()
	return exitCodeOf(r.cmd.ProcessState), reason
}

// signal sends sig to the run's whole process group.
func (r *containerRun) signal(sig syscall.Signal) {
	killGroup(r.cmd.Process.Pid, sig)
}

// logCopier writes a container's stdout and stderr into its log file, one record per line
// with the time it was read, so that logs can be shown with --timestamps and --since.
type logCopier struct {
	f      *os.File
	clock  clock.PassiveClock
	mu     sync.Mutex // one record at a time into f
	copies sync.WaitGroup
	// readers are the pipes' read ends, closed by finish.
	readers [2]*os.File
	// attached, when set, gets what is read as it is read (attach sessions, sessions.go).
	attached *fanout
}

// maxLogLine is the most read from a container's output at once; a longer line is split
// into partial (P) records, as the CRI log format does.
const maxLogLine = 16 << 10

// drainGrace is how long the output of a finished run may take to reach the log file: a
// process it left running outside its group may hold the pipe open.
const drainGrace = 2 * time.Second

// newLogCopier creates the log file at path and the pipes whose write ends become the
// process's stdout and stderr.
func newLogCopier(path string, clk clock.PassiveClock) (*logCopier, *os.File, *os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, nil, err
	}
	l := &logCopier{f: f, clock: clk}
	var writers [2]*os.File
	for i := range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			for j := range i {
				l.readers[j].Close()
				writers[j].Close()
			}
			f.Close()
			return nil, nil, nil, err
		}
		l.readers[i], writers[i] = r, w
	}
	return l, writers[0], writers[1], nil
}

// start begins copying both streams.
func (l *logCopier) start() {
	for i, stream := range []string{"stdout", "stderr"} {
		r := l.readers[i]
		l.copies.Go(func() { l.copy(r, stream) })
	}
}

// abandon releases a copier whose process never started.
func (l *logCopier) abandon() {
	for _, r := range l.readers {
		r.Close()
	}
	l.f.Close()
}

// finish waits (within drainGrace) for the copies to reach the end of the output, then
// closes the pipes and the file.
func (l *logCopier) finish() {
	done := make(chan struct{})
	go func() {
		l.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(drainGrace):
		for _, r := range l.readers {
			_ = r.SetReadDeadline(time.Now()) // unblocks the reads
		}
		<-done
	}
	for _, r := range l.readers {
		r.Close()
	}
	l.f.Close()
}

func (l *logCopier) copy(r io.Reader, stream string) {
	buf := make([]byte, maxLogLine)
	r = l.attached.tee(r, stream)
	for {
		n, err := r.Read(buf)
		// Complete lines are full records; what follows the last newline is written at
		// once as a partial record (a prompt, a progress bar), not held back until a
		// newline that may never come.
		for data := buf[:n]; len(data) > 0; {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				l.record(stream, 'P', data)
				break
			}
			l.record(stream, 'F', data[:i])
			data = data[i+1:]
		}
		if err != nil {
			return
		}
	}
}

// record appends one line of the CRI log format: time, stream, F (full) or P (partial),
// the text.
func (l *logCopier) record(stream string, tag byte, text []byte) {
	buf := make([]byte, 0, len(text)+48)
	buf = l.clock.Now().UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, ' ')
	buf = append(buf, stream...)
	buf = append(buf, ' ', tag, ' ')
	buf = append(buf, text...)
	buf = append(buf, '\n')
	l.mu.Lock()
	_, _ = l.f.Write(buf)
	l.mu.Unlock()
}
