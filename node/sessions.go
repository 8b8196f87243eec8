package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// runSessions is what exec and attach sessions share with one run of a container: the
// container's stdin (a pipe the agent keeps open, or the terminal's master for a tty
// container), its output as the log copier reads it (handed to the attached clients), and the
// processes exec'd into it, which end with it (in a real container they would die with its
// PID namespace).
type runSessions struct {
	stdinOnce bool
	// terminal is the master of a tty container's pseudo-terminal (nil without a tty); the
	// log copier reads the output from it, and closes it when the run's output is done.
	terminal *os.File
	out      fanout
	// childEnds are the child's ends of its stdin pipe and terminal, closed once it started.
	childEnds []*os.File

	mu    sync.Mutex
	ended bool // the container's process exited: no exec or attach from now on
	// stdin is where attached clients write the container's stdin: the pipe's write end,
	// or the terminal's master; nil without stdin, or once closed (stdinOnce, or the run ended).
	stdin *os.File
	// groups are the process groups of the processes exec'd into the run.
	groups map[int]struct{}
}

// errRunEnded is what exec and attach get for a run whose process has exited.
var errRunEnded = errors.New("the container is not running")

// newRunSessions prepares cmd, the container's process before it starts, for attach: a stdin
// pipe when the container asks for stdin, a pseudo-terminal as its stdin, stdout, stderr and
// controlling terminal when it asks for a tty (the log copier then reads the terminal, as
// stdout); and logs hands what it reads to the attached clients.
func newRunSessions(spec corev1.Container, cmd *exec.Cmd, logs *logCopier) (*runSessions, error) {
	s := &runSessions{stdinOnce: spec.StdinOnce, groups: map[int]struct{}{}}
	logs.attached = &s.out
	if spec.TTY {
		master, tty, err := openPTY()
		if err != nil {
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		// A session of its own with the terminal as controlling terminal; a session leader
		// also leads its process group, so the container's group is signalled as before.
		cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = false, true, true, 0
		cmd.Env = append(cmd.Env, termEnv(cmd.Env)...)
		logs.readers[0].Close() // the stdout pipe is not the process's: the terminal is
		logs.readers[0] = master
		s.terminal, s.childEnds = master, []*os.File{tty}
		if spec.Stdin {
			s.stdin = master
		}
		return s, nil
	}
	if spec.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdin, s.stdin, s.childEnds = r, w, []*os.File{r}
	}
	return s, nil
}

// termEnv is what a process on a terminal adds to its environment env, as container runtimes
// do: TERM=xterm, unless env sets TERM.
func termEnv(env []string) []string {
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "TERM=") }) {
		return nil
	}
	return []string{"TERM=xterm"}
}

// started closes the child's ends of the pipes and terminal, which only the process holds now.
func (s *runSessions) started() {
	for _, f := range s.childEnds {
		f.Close()
	}
	s.childEnds = nil
}

// abandon releases what newRunSessions opened for a process that did not start.
func (s *runSessions) abandon() {
	s.started()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stdin != nil && s.stdin != s.terminal {
		s.stdin.Close()
	}
	s.stdin, s.ended = nil, true
}

// exited is called when the container's process has exited: the processes exec'd into it are
// killed, its stdin pipe is closed, and no session starts any more. The terminal stays open
// until the log copier has read the last output from it.
func (s *runSessions) exited() {
	s.mu.Lock()
	groups, stdin := s.groups, s.stdin
	s.ended, s.groups, s.stdin = true, nil, nil
	s.mu.Unlock()
	for pgid := range groups {
		killGroup(pgid, syscall.SIGKILL)
	}
	if stdin != nil && stdin != s.terminal {
		stdin.Close()
	}
}

// outputDone is called once the log copier has read the run's last output: attached clients
// get what is left and their sessions end.
func (s *runSessions) outputDone() { s.out.close() }

// isEnded reports whether the container's process has exited.
func (s *runSessions) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// startExec starts a process in the run with start (which returns its process group) unless
// the run has ended, and remembers the group so that exited kills it. Holding the lock across
// the start means a process is either refused or killed with the run, never missed.
func (s *runSessions) startExec(start func() (pgid int, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errRunEnded
	}
	pgid, err := start()
	if err != nil {
		return err
	}
	s.groups[pgid] = struct{}{}
	return nil
}

// execEnded forgets an exec'd process group that is gone.
func (s *runSessions) execEnded(pgid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.groups, pgid)
}

// takeStdin returns where an attach session writes the container's stdin (nil: the container
// has none, or it was closed).
func (s *runSessions) takeStdin() *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stdin
}

// stdinDetached is called when an attach session that wrote stdin ends: with stdinOnce the
// container's stdin is closed for the rest of the run (a terminal's master stays open for the
// output, but takes no more input).
func (s *runSessions) stdinDetached() {
	if !s.stdinOnce {
		return
	}
	s.mu.Lock()
	stdin := s.stdin
	s.stdin = nil
	s.mu.Unlock()
	if stdin != nil && stdin != s.terminal {
		stdin.Close()
	}
}

// fanout hands the container's output, as the log copier reads it (partial lines too, so a
// prompt shows), to the attached clients. A client that does not keep up slows the container's
// output down, as a terminal would; one that takes nothing for attachStallLimit is dropped, so
// that no client can hold the container (or the report of its exit) up for longer.
type fanout struct {
	mu      sync.Mutex
	clients map[*attachClient]struct{}
	closed  bool
}

// attachClient is one attach session's view of the output.
type attachClient struct {
	stdout, stderr io.Writer // stderr nil: the client did not ask for it
	chunks         chan outputChunk
	eof            chan struct{} // closed by fanout.close: no chunk comes any more
	gone           chan struct{} // closed by detach: chunks are not sent any more
}

type outputChunk struct {
	stderr bool
	data   []byte
}

// tee returns r, whose reads are also handed to the attached clients (f may be nil).
func (f *fanout) tee(r io.Reader, stream string) io.Reader {
	if f == nil {
		return r
	}
	return io.TeeReader(r, fanoutWriter{f: f, stderr: stream == "stderr"})
}

type fanoutWriter struct {
	f      *fanout
	stderr bool
}

// Write never fails: the log copier must go on whatever the clients do.
func (w fanoutWriter) Write(p []byte) (int, error) {
	w.f.mu.Lock()
	if len(w.f.clients) == 0 {
		w.f.mu.Unlock()
		return len(p), nil
	}
	clients := make([]*attachClient, 0, len(w.f.clients))
	for c := range w.f.clients {
		clients = append(clients, c)
	}
	w.f.mu.Unlock()
	chunk := outputChunk{stderr: w.stderr, data: bytes.Clone(p)}
	for _, c := range clients {
		select {
		case c.chunks <- chunk:
			continue
		case <-c.gone:
			continue
		default:
		}
		stalled := time.NewTimer(attachStallLimit)
		select {
		case c.chunks <- chunk:
		case <-c.gone:
		case <-stalled.C:
			w.f.detach(c)
		}
		stalled.Stop()
	}
	return len(p), nil
}

// attachStallLimit is how long an attached client may take no output while the container
// writes before it is dropped.
const attachStallLimit = 5 * time.Second

// attach adds a client that receives the output from now on; errRunEnded once it is over.
func (f *fanout) attach(stdout, stderr io.Writer) (*attachClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errRunEnded
	}
	if f.clients == nil {
		f.clients = map[*attachClient]struct{}{}
	}
	c := &attachClient{stdout: stdout, stderr: stderr, chunks: make(chan outputChunk, 64),
		eof: make(chan struct{}), gone: make(chan struct{})}
	f.clients[c] = struct{}{}
	return c, nil
}

// detach removes c; a write blocked on it gives up.
func (f *fanout) detach(c *attachClient) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.clients[c]; ok {
		delete(f.clients, c)
		close(c.gone)
	}
}

// close tells every client that the output is over (no write comes after: the copier is done).
func (f *fanout) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	for c := range f.clients {
		close(c.eof)
	}
}

// pump writes the output to the client until it is over (nil), the client cannot be written
// to or was dropped (nil too: there is no one to tell), or ctx ends.
func (c *attachClient) pump(ctx context.Context) error {
	for {
		select {
		case <-c.gone:
			return nil
		case chunk := <-c.chunks:
			if !c.write(chunk) {
				return nil
			}
		case <-c.eof:
			for {
				select {
				case chunk := <-c.chunks:
					if !c.write(chunk) {
						return nil
					}
				default:
					return nil
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *attachClient) write(chunk outputChunk) bool {
	w := c.stdout
	if chunk.stderr {
		w = c.stderr
	}
	if w == nil {
		return true
	}
	_, err := w.Write(chunk.data)
	return err == nil
}

// containerNotFound is the kubelet's answer to an exec into a container that is not running.
func containerNotFound(name string) error {
	return fmt.Errorf("container not found (%q)", name)
}

// attachNotFound is the kubelet's answer to an attach to a container that is not running.
func attachNotFound(container, pod, namespace string) error {
	return fmt.Errorf("container %s not found in pod %s_%s", container, pod, namespace)
}
