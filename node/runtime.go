package node

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

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
	logs *logCopier
	// sessions are the run's stdin, output and exec'd processes as exec and attach use them
	// (sessions.go).
	sessions *runSessions
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
	if err == nil {
		err = cmd.Start()
		sessions.started()
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
		return nil, err
	}
	logs.start()
	return &containerRun{name: spec.Name, run: s.run, spec: spec, env: env, dir: dir, cmd: cmd, logs: logs, sessions: sessions}, nil
}

// wait waits for the run's process to exit, kills what it left behind in its process group,
// lets the copier write the last output, and returns the exit code (128+n for a signal)
// and a reason overriding Completed/Error ("" for none).
func (r *containerRun) wait() (int32, string) {
	_ = r.cmd.Wait()
	killGroup(r.cmd.Process.Pid, syscall.SIGKILL)
	r.sessions.exited()
	r.logs.finish()
	r.sessions.outputDone()
	return exitCodeOf(r.cmd.ProcessState), ""
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

// maxLogLine is the longest piece of a line written as one record; longer lines are split
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
	br := bufio.NewReaderSize(l.attached.tee(r, stream), maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			l.record(stream, 'F', line[:len(line)-1])
		case errors.Is(err, bufio.ErrBufferFull):
			l.record(stream, 'P', line)
		default:
			if len(line) > 0 { // the last line, without its newline
				l.record(stream, 'F', line)
			}
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
