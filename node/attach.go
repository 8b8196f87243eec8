package node

import (
	"context"
	"errors"
	"io"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// attach connects a session to the run's own stdin and output, as `kubectl attach` does: the
// output written from now on goes to out (stdout, or the terminal) and errOut (stderr), the
// session's stdin (if any, and if the container has stdin) to the container's stdin, and the
// terminal sizes the client sends to a tty container's terminal. With stdinOnce, the
// container's stdin is closed when the first session that wrote it ends. It returns when the
// run's output is over (the container's process exited and its last output was written),
// when the client can no longer be written to, or when ctx ends.
func (r *containerRun) attach(ctx context.Context, in io.Reader, out, errOut io.Writer, resize <-chan remotecommand.TerminalSize) error {
	s := r.sessions
	c, err := s.out.attach(out, errOut)
	if errors.Is(err, errRunEnded) {
		return containerNotFound(r.name)
	}
	defer s.out.detach(c)
	if in != nil {
		stdin := s.takeStdin()
		if stdin != nil {
			defer s.stdinDetached()
		}
		// Not waited for: a client that sends nothing blocks the read until its connection
		// closes, which the session's end brings. Without a stdin to write to, what the client
		// sends is read and dropped, so that it does not stall the connection.
		go func() {
			if stdin == nil {
				_, _ = io.Copy(io.Discard, in)
				return
			}
			_, _ = io.Copy(stdin, in)
			s.stdinDetached()
		}()
	}
	if s.terminal != nil && resize != nil {
		done := make(chan struct{})
		defer close(done)
		go resizeTerminal(s.terminal, resize, done)
	}
	return c.pump(ctx)
}
