package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/kplane/kplane/node/mountns"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// exec runs argv as a process of the run, as `kubectl exec` does, with the session's streams
// as its stdio (nil: not asked for): through pipes, or a pseudo-terminal with tty (its
// output on out, its size from resize). It returns when the process has exited and its output
// is written: nil for exit code 0, a utilexec.ExitError for any other (128+n for signal n), and
// the shell's 127 (not found) or 126 (not executable) with the reason on the session's stderr
// when the program cannot be started. What the process leaves running in its process group is
// killed when it exits, as probes' processes are; all of it when the container's process
// exits or ctx ends (the agent stops).
func (r *containerRun) exec(ctx context.Context, argv []string, in io.Reader, out, errOut io.Writer, tty bool, resize <-chan remotecommand.TerminalSize) error {
	if len(argv) == 0 {
		return errors.New("no command given")
	}
	argv = slices.Clone(argv)
	if argv[0] == "kplane" { // the same rule as for the container's command
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		argv[0] = exe
	}
	cmd := &exec.Cmd{Args: argv}
	st, err := newExecStdio(cmd, in, out, errOut, tty)
	if err != nil {
		return err
	}
	if tty {
		cmd.Env = termEnv(r.env)
	}
	defer st.close()
	if st.terminal != nil && resize != nil {
		resize = applyFirstTerminalSize(ctx, st.terminal, resize)
		if err := ctx.Err(); err != nil {
			return err // the session ended while waiting: nothing to start it for
		}
	}
	var proc *mountns.Process
	err = r.sessions.startExec(func() (int, error) {
		var err error
		if proc, err = r.startProcess(cmd); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	st.started()
	if err != nil {
		return r.execNotStarted(err, st.diagnostics())
	}
	pgid := cmd.Process.Pid
	stopKill := context.AfterFunc(ctx, func() { killGroup(pgid, syscall.SIGKILL) })
	st.copy(in, resize)
	_ = proc.Wait() // the exit status is in cmd.ProcessState
	stopKill()
	r.sessions.execEnded(pgid)
	killGroup(pgid, syscall.SIGKILL)
	st.drain()
	code := exitCodeOf(cmd.ProcessState)
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command %q exited with code %d", argv, code), Code: int(code)}
	}
	return nil
}

// execNotStarted turns a failed start into what a shell reports: 127 when the program does
// not exist, 126 when it cannot be executed, the reason written to the session (the kubelet's
// error for a container no longer running; others as they are).
func (r *containerRun) execNotStarted(err error, diag io.Writer) error {
	code := 0
	switch {
	case errors.Is(err, errRunEnded):
		return containerNotFound(r.name)
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		code = 127
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC):
		code = 126
	default:
		return err
	}
	if diag != nil {
		_, _ = fmt.Fprintln(diag, err)
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// exitCodeOf is a finished process's exit code, 128+n when signal n ended it (as shells and
// container runtimes report it).
func exitCodeOf(ps *os.ProcessState) int32 {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(ps.ExitCode())
}

// execStdio connects an exec'd process to its session: pipes, or a pseudo-terminal.
type execStdio struct {
	out, errOut io.Writer
	// childEnds are the process's ends, closed once it started.
	childEnds []*os.File
	// stdin is where the session's stdin goes (a pipe, or the terminal's master); nil: none.
	stdin *os.File
	// terminal is the terminal's master (nil without a tty).
	terminal *os.File
	outputs  []outputCopy
	copies   sync.WaitGroup
	done     chan struct{} // closed by drain: the process is gone
}

// outputCopy copies one of the process's outputs (a pipe's read end, or the terminal's
// master) to the session.
type outputCopy struct {
	from *os.File
	to   io.Writer
}

func newExecStdio(cmd *exec.Cmd, in io.Reader, out, errOut io.Writer, tty bool) (*execStdio, error) {
	st := &execStdio{out: out, errOut: errOut, done: make(chan struct{})}
	if tty {
		master, t, err := openPTY()
		if err != nil {
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = t, t, t
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		st.childEnds, st.terminal = []*os.File{t}, master
		if in != nil {
			st.stdin = master
		}
		// Unread, the terminal's output would stop the process once its buffer is full.
		st.outputs = []outputCopy{{from: master, to: orDiscard(out)}}
		return st, nil
	}
	if in != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdin, st.stdin = r, w
		st.childEnds = append(st.childEnds, r)
	}
	for _, o := range []struct {
		to  io.Writer
		set *io.Writer
	}{{out, &cmd.Stdout}, {errOut, &cmd.Stderr}} {
		if o.to == nil {
			continue // the process gets /dev/null
		}
		r, w, err := os.Pipe()
		if err != nil {
			st.started()
			st.close()
			return nil, err
		}
		*o.set = w
		st.childEnds = append(st.childEnds, w)
		st.outputs = append(st.outputs, outputCopy{from: r, to: o.to})
	}
	return st, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// diagnostics is where the reason a process could not start goes: its stderr, or the terminal.
func (st *execStdio) diagnostics() io.Writer {
	if st.terminal != nil || st.errOut == nil {
		return st.out
	}
	return st.errOut
}

// started closes the process's ends: from now on only it holds them.
func (st *execStdio) started() {
	for _, f := range st.childEnds {
		f.Close()
	}
	st.childEnds = nil
}

// copy starts copying the session's stdin to the process and its outputs to the session, and
// applies the terminal sizes the client sends.
func (st *execStdio) copy(in io.Reader, resize <-chan remotecommand.TerminalSize) {
	for _, o := range st.outputs {
		st.copies.Go(func() { _, _ = io.Copy(o.to, o.from) })
	}
	if st.stdin != nil {
		// Not waited for: a client that sends nothing blocks the read until its connection
		// closes, which the session's end brings.
		go func() {
			_, _ = io.Copy(st.stdin, in)
			if st.terminal == nil {
				st.stdin.Close() // the process sees the end of its input
			}
		}()
	}
	if st.terminal != nil && resize != nil {
		go resizeTerminal(st.terminal, resize, st.done)
	}
}

// drain waits for the process's output to reach the session: until the pipes or the terminal
// report their end, which comes once every process holding them is gone; after drainGrace
// (something outside the process group may hold them) what was not read is dropped.
func (st *execStdio) drain() {
	close(st.done)
	done := make(chan struct{})
	go func() {
		st.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(drainGrace):
		for _, o := range st.outputs {
			_ = o.from.SetReadDeadline(time.Now())
		}
		<-done
	}
}

// close releases the pipes and the terminal.
func (st *execStdio) close() {
	for _, o := range st.outputs {
		o.from.Close()
	}
	if st.stdin != nil {
		st.stdin.Close()
	}
}
