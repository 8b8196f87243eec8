package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// The streaming endpoints, at the kubelet's paths, that the apiserver's pods/exec,
// pods/attach and pods/portforward pass their upgraded connections through to:
//
//	/exec/<ns>/<pod>/<container>?command=...&input=1&output=1&error=1&tty=1
//	/attach/<ns>/<pod>/<container>?input=1&output=1&error=1&tty=1
//	/portForward/<ns>/<pod>
//
// Each speaks both protocols kubectl uses, as a v1.36 kubelet does (ExtendWebSocketsToKubelet):
// WebSocket (v5.channel.k8s.io for exec and attach; SPDY tunnelled through WebSocket,
// "SPDY/3.1+portforward.k8s.io", for port-forward) and SPDY/3.1, the one kubectl falls back
// to. SPDY, and WebSocket up to v4.channel.k8s.io, are served by the kubelet's own server
// side (k8s.io/cri-streaming: remotecommand.ServeExec, ServeAttach, portforward.
// ServePortForward); v5 WebSocket, which that server does not speak (kube-apiserver and the
// kubelet translate it to SPDY in front of it), is served here with k8s.io/streaming's
// wsstream, and the tunnel hands cri-streaming's port-forward server the SPDY connection that
// it carries (portforward.go).

// Timeouts of the streaming sessions: the kubelet's defaults.
const (
	streamIdleTimeout     = 4 * time.Hour // --streaming-connection-idle-timeout
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// handleStreaming registers the streaming endpoints on mux: their connections are closed when
// ctx ends, and sessions counts their handlers (http.Server's Shutdown does not wait for those
// that hijacked their connection).
func (a *Agent) handleStreaming(ctx context.Context, mux *http.ServeMux, sessions *sync.WaitGroup) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{container}", closedWith(ctx, sessions, a.serveExec))
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{container}", closedWith(ctx, sessions, a.serveAttach))
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", closedWith(ctx, sessions, a.servePortForward))
	}
}

// findRun returns the current run of a container of the pod ns/name, or writes the kubelet's
// error: 404 for a pod that is not on this node, 500 with notRunning's text for a container
// that is not running (never started, or exited).
func (a *Agent) findRun(w http.ResponseWriter, ns, name, container string, notRunning error) (*containerRun, bool) {
	worker, pod := a.findPod(ns, name)
	if worker == nil {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return nil, false
	}
	index := containerIndex(pod, container)
	var run *containerRun
	if index >= 0 {
		worker.mu.Lock()
		if index < len(worker.runs) {
			run = worker.runs[index]
		}
		worker.mu.Unlock()
	}
	if run == nil || run.sessions.isEnded() {
		http.Error(w, notRunning.Error(), http.StatusInternalServerError)
		return nil, false
	}
	return run, true
}

// containerIndex is the index of the container name in the worker's runs (init containers
// first), -1 if the pod has none of that name.
func containerIndex(pod *corev1.Pod, name string) int {
	for i := range len(pod.Spec.InitContainers) + len(pod.Spec.Containers) {
		if containerSpec(pod, i).Name == name {
			return i
		}
	}
	return -1
}

func (a *Agent) serveExec(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	command := r.URL.Query()["command"]
	if len(command) == 0 {
		http.Error(w, "no command given", http.StatusBadRequest)
		return
	}
	ns, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	run, ok := a.findRun(w, ns, name, container, containerNotFound(container))
	if !ok {
		return
	}
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		serveV5(w, r, opts, "error executing command in container", func(ctx context.Context, s sessionStreams) error {
			return run.exec(ctx, command, s.in, s.out, s.errOut, opts.TTY, s.resize)
		})
		return
	}
	remotecommand.ServeExec(w, r, execIn{run}, name, "", container, command, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (a *Agent) serveAttach(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ns, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	run, ok := a.findRun(w, ns, name, container, attachNotFound(container, name, ns))
	if !ok {
		return
	}
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		serveV5(w, r, opts, "error attaching to container", func(ctx context.Context, s sessionStreams) error {
			return run.attach(ctx, s.in, s.out, s.errOut, s.resize)
		})
		return
	}
	remotecommand.ServeAttach(w, r, attachTo{run}, name, "", container, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// execIn and attachTo are a run as cri-streaming's Executor and Attacher (the pod and
// container are the run's; the stream nils are real nils, not typed ones).
type execIn struct{ run *containerRun }

func (e execIn) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	return e.run.exec(ctx, cmd, in, writerOrNil(out), writerOrNil(errOut), tty, resize)
}

type attachTo struct{ run *containerRun }

func (a attachTo) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, errOut io.WriteCloser, _ bool, resize <-chan remotecommand.TerminalSize) error {
	return a.run.attach(ctx, in, writerOrNil(out), writerOrNil(errOut), resize)
}

func writerOrNil(w io.WriteCloser) io.Writer {
	if w == nil {
		return nil
	}
	return w
}

// sessionStreams are an exec or attach session's streams (nil: not asked for).
type sessionStreams struct {
	in          io.Reader
	out, errOut io.Writer
	resize      <-chan remotecommand.TerminalSize
}

// The channels of the v5.channel.k8s.io protocol, in order: each message's first byte.
const (
	channelStdin = iota
	channelStdout
	channelStderr
	channelError
	channelResize
)

// serveV5 serves an exec or attach session over WebSocket with the v5.channel.k8s.io
// protocol (what kubectl v1.30 and later ask for first): it opens the channels the request
// asks for, runs the session, and writes its outcome on the error channel as the kubelet's
// server does — Success, NonZeroExitCode with the exit code, or an InternalError starting
// with failure. The client's close of stdin (v5's CLOSE message) ends the session's stdin.
func serveV5(w http.ResponseWriter, r *http.Request, opts *remotecommand.Options, failure string, session func(context.Context, sessionStreams) error) {
	channel := func(wanted bool, t wsstream.ChannelType) wsstream.ChannelType {
		if wanted {
			return t
		}
		return wsstream.IgnoreChannel
	}
	channels := []wsstream.ChannelType{
		channelStdin:  channel(opts.Stdin, wsstream.ReadChannel),
		channelStdout: channel(opts.Stdout, wsstream.WriteChannel),
		channelStderr: channel(opts.Stderr, wsstream.WriteChannel),
		channelError:  wsstream.WriteChannel,
		channelResize: channel(opts.TTY, wsstream.ReadChannel),
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		remotecommand.StreamProtocolV5Name: {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(streamIdleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return // the WebSocket server has answered the client
	}
	defer conn.Close()
	// kube-apiserver's translator (and cri-streaming for v4) first send an empty message on
	// the first output channel, to say the session is open. client-go does not need it, and on
	// loopback it often arrives before kubectl has set up its streams, which kubectl then
	// reports as an error ("Unknown stream id 1, discarding message"): not sent here.
	var s sessionStreams
	if opts.Stdin {
		s.in = streams[channelStdin]
	}
	if opts.Stdout {
		s.out = streams[channelStdout]
	}
	if opts.Stderr {
		s.errOut = streams[channelStderr]
	}
	ctx := r.Context()
	if opts.TTY {
		resize := make(chan remotecommand.TerminalSize)
		go readTerminalSizes(ctx, streams[channelResize], resize)
		s.resize = resize
	}
	status := sessionStatus(session(ctx, s), failure)
	data, _ := json.Marshal(status)
	_, _ = streams[channelError].Write(data)
}

// sessionStatus is what the error channel carries for a session's outcome.
func sessionStatus(err error, failure string) *metav1.Status {
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return &metav1.Status{Status: metav1.StatusSuccess}
	case errors.As(err, &exit) && exit.Exited():
		return &metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", err),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{
				{Type: remotecommand.ExitCodeCauseType, Message: fmt.Sprint(exit.ExitStatus())},
			}},
		}
	}
	st := apierrors.NewInternalError(fmt.Errorf("%s: %w", failure, err)).ErrStatus
	return &st
}

// readTerminalSizes decodes the terminal sizes the client sends (JSON, one after another)
// until the resize channel or ctx ends, and closes sizes.
func readTerminalSizes(ctx context.Context, r io.Reader, sizes chan<- remotecommand.TerminalSize) {
	defer close(sizes)
	dec := json.NewDecoder(r)
	for {
		var size remotecommand.TerminalSize
		if err := dec.Decode(&size); err != nil {
			return
		}
		select {
		case sizes <- size:
		case <-ctx.Done():
			return
		}
	}
}

// closedWith closes the connection h hijacks when ctx ends (the agent stops), so that no
// streaming session outlives the agent. Not sooner: the protocols close their connections
// themselves once the client has read the end of the session. sessions counts the running h.
// An SPDY connection's writes go out a frame at a time (spdyFrames).
func closedWith(ctx context.Context, sessions *sync.WaitGroup, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sessions.Add(1)
		defer sessions.Done()
		isSPDY := strings.EqualFold(r.Header.Get(httpstream.HeaderUpgrade), spdy.HeaderSpdy31)
		h(hijackClosed{ResponseWriter: w, ctx: ctx, spdy: isSPDY}, r)
	}
}

type hijackClosed struct {
	http.ResponseWriter
	ctx  context.Context
	spdy bool
}

func (w hijackClosed) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	c := &closedConn{Conn: conn}
	c.stop = context.AfterFunc(w.ctx, func() { _ = conn.Close() })
	// Reads go through c, what the server had read ahead first.
	var in io.Reader = c
	if n := rw.Reader.Buffered(); n > 0 {
		ahead, _ := rw.Reader.Peek(n)
		in = io.MultiReader(bytes.NewReader(bytes.Clone(ahead)), c)
	}
	rw = bufio.NewReadWriter(bufio.NewReader(in), bufio.NewWriter(c))
	if w.spdy {
		return newSPDYFrames(c, writeBuffers(conn)), rw, nil
	}
	return c, rw, nil
}

func (w hijackClosed) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// closedConn is a hijacked connection that ctx closes unless it was closed before.
type closedConn struct {
	net.Conn
	stop func() bool
}

func (c *closedConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// Read reports a connection closed on this side as its end, not as an error: the WebSocket
// server's read loop logs every error but the end, and the protocols close the connection
// themselves once a session is over.
func (c *closedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, net.ErrClosed) {
		err = io.EOF
	}
	return n, err
}
