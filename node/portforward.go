package node

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// servePortForward serves a port-forward session to the pod: each forwarded connection is a
// connection to the pod's IP at the port the client names. Pods share the host's network
// namespace, each on its own loopback address, so the pod IP is the one address that reaches
// this pod and no other (127.0.0.1 might be another pod's, or the host's, port); a program
// that listens on 127.0.0.1 only is not reachable, as it would not be from other pods.
//
// A connection that fails (nothing listens on the port) is reported on that connection's
// error stream; the session goes on, as with the kubelet (kubectl itself ends its session
// when it reads such an error).
func (a *Agent) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	worker, pod := a.findPod(ns, name)
	if worker == nil {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	ip := worker.podIP()
	if ip == "" {
		http.Error(w, "pod not found ("+strconv.Quote(name+"_"+ns)+"): it has no IP yet", http.StatusInternalServerError)
		return
	}
	fw := &podPorts{ip: ip, conns: map[net.Conn]struct{}{}}
	defer fw.closeAll()
	switch {
	case wsstream.IsWebSocketRequestWithTunnelingProtocol(r):
		serveTunnel(w, r, func(tw http.ResponseWriter, tr *http.Request) {
			portforward.ServePortForward(tw, tr, fw, name, string(pod.UID), nil,
				streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
		})
	case wsstream.IsWebSocketRequest(r): // the older port-forward protocol over WebSocket
		opts, err := portforward.NewV4Options(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		portforward.ServePortForward(w, r, fw, name, string(pod.UID), opts,
			streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
	default:
		portforward.ServePortForward(w, r, fw, name, string(pod.UID), nil,
			streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
	}
}

// podIP is the IP the worker gave its pod ("" before it has one). The worker writes it before
// it makes runs, under mu, so reading it after seeing runs under mu is safe.
func (w *podWorker) podIP() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runs == nil {
		return ""
	}
	return w.ip
}

// podPorts is a pod's IP as cri-streaming's PortForwarder, for one session: the connections
// to the pod that are still open when the session ends are closed with it.
type podPorts struct {
	ip     string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// closeAll closes the session's connections to the pod, and any it opens from now on.
func (p *podPorts) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *podPorts) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *podPorts) forget(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// dialTimeout bounds the connection to the pod's port.
const dialTimeout = 10 * time.Second

// halfCloseGrace is how long a forwarded connection stays open once one side has ended its
// half, for the other side to finish, as socat's -t and containerd's port-forward allow.
const halfCloseGrace = time.Second

// PortForward copies between stream and a new connection to the pod's port. When one side
// ends its half, the end is passed on (a half-close) and the other side has halfCloseGrace to
// finish; then both are closed. Not waiting for ever matters: kubectl ends its half and stops
// reading when its local connection fails, without a reset the agent could see, and a pod that
// keeps writing (a download the client gave up) would otherwise be forwarded for as long as
// the session lasts.
func (p *podPorts) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.ip, strconv.Itoa(int(port))))
	if err != nil {
		return err
	}
	defer conn.Close()
	if !p.track(conn) {
		return errors.New("the session has ended")
	}
	defer p.forget(conn)
	ended := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, stream)
		_ = conn.(*net.TCPConn).CloseWrite()
		ended <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(stream, conn)
		_ = stream.Close() // our half of the stream; the client reads its end
		ended <- struct{}{}
	}()
	<-ended
	select {
	case <-ended:
	case <-time.After(halfCloseGrace):
		// Closing conn (on return) ends a copy from the pod; a reset ends a read of the
		// client's half. A copy blocked on a client that does not read ends with the session.
		if r, ok := stream.(interface{ Reset() error }); ok {
			_ = r.Reset()
		}
	}
	return nil
}

// serveTunnel accepts SPDY tunnelled through WebSocket (kubectl's first choice for
// port-forward: SPDY frames in binary messages, no HTTP inside) and runs serve, an SPDY
// server, on the tunnel as if it were an HTTP connection upgraded to SPDY/3.1: serve gets a
// request asking for that upgrade and a writer whose hijacked connection is the tunnel
// (the 101 answer it writes goes nowhere: the WebSocket handshake was the answer).
func serveTunnel(w http.ResponseWriter, r *http.Request, serve http.HandlerFunc) {
	var protocols []string
	for _, p := range websocket.Subprotocols(r) {
		if p == portforward.WebsocketsSPDYTunnelingPortForwardV1 {
			protocols = append(protocols, p)
		}
	}
	if len(protocols) == 0 {
		http.Error(w, "unable to upgrade: no supported tunneling protocol requested", http.StatusBadRequest)
		return
	}
	up := websocket.Upgrader{
		Subprotocols: protocols,
		// The client is kubectl through the apiserver, not a browser page.
		CheckOrigin:    func(*http.Request) bool { return true },
		ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10,
	}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	tunnel := &wsConn{ws: ws}
	defer tunnel.Close()
	req := r.Clone(r.Context())
	for _, h := range []string{"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Protocol", "Sec-Websocket-Extensions"} {
		req.Header.Del(h)
	}
	req.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	req.Header.Set(httpstream.HeaderUpgrade, spdy.HeaderSpdy31)
	req.Header.Set(httpstream.HeaderProtocolVersion, portforward.ProtocolV1Name)
	serve(&tunnelWriter{conn: tunnel, header: http.Header{}}, req)
}

// tunnelWriter is the http.ResponseWriter an SPDY server sees for a tunnel.
type tunnelWriter struct {
	conn   *wsConn
	header http.Header
}

func (t *tunnelWriter) Header() http.Header { return t.header }

// Write and WriteHeader drop what the server answers before it upgrades (the 101, or an
// error there is no HTTP response left to carry); an error ends the session with the tunnel.
func (t *tunnelWriter) Write(p []byte) (int, error) { return len(p), nil }
func (t *tunnelWriter) WriteHeader(int)             {}

func (t *tunnelWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	frames := newSPDYFrames(t.conn, t.conn.writeMessage) // a frame per message
	return frames, bufio.NewReadWriter(bufio.NewReader(t.conn), bufio.NewWriter(frames)), nil
}

// wsConn is a WebSocket connection as a byte stream: what is written goes as one binary
// message, what is read is the binary messages' bytes in order (as client-go's tunnelling
// connection frames them).
type wsConn struct {
	ws      *websocket.Conn
	reading io.Reader // the message being read
	writeMu sync.Mutex
	once    sync.Once
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.reading == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				return 0, errors.New("tunnel: a message that is not binary")
			}
			c.reading = r
		}
		n, err := c.reading.Read(p)
		if errors.Is(err, io.EOF) {
			c.reading = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	if err := c.writeMessage(p, nil); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeMessage sends head and rest as one binary message.
func (c *wsConn) writeMessage(head, rest []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	w, err := c.ws.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return err
	}
	_, err1 := w.Write(head)
	_, err2 := w.Write(rest)
	return errors.Join(err1, err2, w.Close())
}

// Close says goodbye (a normal closure) and closes the connection.
func (c *wsConn) Close() error {
	var err error
	c.once.Do(func() {
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
		_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		err = c.ws.Close()
	})
	return err
}

func (c *wsConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error {
	return errors.Join(c.ws.SetReadDeadline(t), c.ws.SetWriteDeadline(t))
}
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
