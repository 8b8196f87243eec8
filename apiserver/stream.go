package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The streaming subresources of pods: exec, attach and portforward. Each is admitted
// (operation CONNECT, connectadmission.go) and checked here as kube-apiserver checks it (the
// pod exists; for exec and attach the container is the pod's; the pod is bound to a node)
// and then passed through, upgrade and all, to the node agent
// running the pod at the kubelet's paths (/exec, /attach, /portForward). The agent speaks
// both protocols kubectl uses (WebSocket first, SPDY when that fails), as a v1.36 kubelet
// does, so the apiserver never looks inside the stream: once the agent has answered the
// upgrade with 101 Switching Protocols, the two connections are joined byte for byte. Any
// other answer (the container is not running, ...) reaches the client as the agent wrote it,
// as kube-apiserver relays the kubelet's.

// isStreamSubresource reports whether name is one of the streaming subresources of pods.
func isStreamSubresource(name string) bool {
	return name == "exec" || name == "attach" || name == "portforward"
}

// streamUpgradeTimeout bounds dialing the node and its answer to the upgrade.
const streamUpgradeTimeout = 30 * time.Second

// serveStream serves pods/exec, pods/attach and pods/portforward. As in kube-apiserver, the
// options are read from the query and admitted (operation CONNECT) before the pod is looked
// at, and what admission left of them is what reaches the node.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, req request) {
	gr := schema.GroupResource{Resource: "pods/" + req.subresource}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeError(w, apierrors.NewMethodNotSupported(gr, strings.ToLower(r.Method)))
		return
	}
	q := r.URL.Query()
	if _, dry := q["dryRun"]; dry {
		writeError(w, apierrors.NewBadRequest("dryRun is not supported"))
		return
	}
	opts, err := parseStreamOptions(req.subresource, q)
	if err == nil {
		opts, err = s.admitConnect(r.Context(), req, opts)
	}
	var params url.Values
	if err == nil {
		params, err = opts.params(req.subresource)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	obj, err := req.res.store.Get(r.Context(), req.namespace, req.name)
	if err != nil {
		writeError(w, err)
		return
	}
	pod := obj.(*corev1.Pod)
	path := "/portForward/" + url.PathEscape(pod.Namespace) + "/" + url.PathEscape(pod.Name)
	if req.subresource != "portforward" {
		container, err := subresourceContainer(pod, opts.Container)
		if err != nil {
			writeError(w, err)
			return
		}
		path = "/" + req.subresource + "/" + url.PathEscape(pod.Namespace) + "/" + url.PathEscape(pod.Name) + "/" + url.PathEscape(container)
	}
	if pod.Spec.NodeName == "" {
		writeError(w, apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", pod.Name)))
		return
	}
	agent, err := s.nodeAgent(r.Context(), pod.Spec.NodeName)
	if err != nil {
		writeError(w, err)
		return
	}
	loc := &url.URL{Scheme: "http", Host: agent, Path: path, RawQuery: params.Encode()}
	s.proxyUpgrade(w, r, loc)
}

// streamOptions hold the fields of PodExecOptions, PodAttachOptions and PodPortForwardOptions,
// under their JSON names, so that any of the three that admission returns reads back here.
type streamOptions struct {
	Stdin     bool     `json:"stdin,omitempty"`
	Stdout    bool     `json:"stdout,omitempty"`
	Stderr    bool     `json:"stderr,omitempty"`
	TTY       bool     `json:"tty,omitempty"`
	Container string   `json:"container,omitempty"`
	Command   []string `json:"command,omitempty"`
	Ports     []int32  `json:"ports,omitempty"`
}

// parseStreamOptions reads the options of subresource from q, as Kubernetes' parameter codec
// does: booleans by queryBool, ports as numbers, one per value or comma-separated.
func parseStreamOptions(subresource string, q url.Values) (streamOptions, error) {
	if subresource == "portforward" {
		var opts streamOptions
		for _, v := range q["ports"] {
			for p := range strings.SplitSeq(v, ",") {
				n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
				if err != nil {
					return opts, apierrors.NewBadRequest(fmt.Sprintf("invalid port %q: %v", p, err))
				}
				opts.Ports = append(opts.Ports, int32(n))
			}
		}
		return opts, nil
	}
	opts := streamOptions{Stdin: queryBool(q["stdin"]), Stdout: queryBool(q["stdout"]), Stderr: queryBool(q["stderr"]),
		TTY: queryBool(q["tty"]), Container: q.Get("container")}
	if subresource == "exec" {
		opts.Command = q["command"]
	}
	return opts, nil
}

// object is the options as the API object admission sees: v1 PodExecOptions,
// PodAttachOptions or PodPortForwardOptions.
func (o streamOptions) object(subresource string) runtime.Object {
	meta := func(kind string) metav1.TypeMeta { return metav1.TypeMeta{APIVersion: "v1", Kind: kind} }
	switch subresource {
	case "exec":
		return &corev1.PodExecOptions{TypeMeta: meta("PodExecOptions"), Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
			TTY: o.TTY, Container: o.Container, Command: o.Command}
	case "attach":
		return &corev1.PodAttachOptions{TypeMeta: meta("PodAttachOptions"), Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
			TTY: o.TTY, Container: o.Container}
	}
	return &corev1.PodPortForwardOptions{TypeMeta: meta("PodPortForwardOptions"), Ports: o.Ports}
}

// params are the options as the node's query parameters (the kubelet's names).
func (o streamOptions) params(subresource string) (url.Values, error) {
	out := url.Values{}
	if subresource == "portforward" {
		var ports []string
		for _, n := range o.Ports {
			if n < 1 || n > 65535 {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid port %d: must be between 1 and 65535", n))
			}
			ports = append(ports, strconv.Itoa(int(n)))
		}
		if len(ports) > 0 {
			out.Set("port", strings.Join(ports, ","))
		}
		return out, nil
	}
	for _, p := range []struct {
		set   bool
		param string
	}{{o.Stdin, "input"}, {o.Stdout, "output"}, {o.Stderr, "error"}, {o.TTY, "tty"}} {
		if p.set {
			out.Set(p.param, "1")
		}
	}
	if subresource == "exec" {
		out["command"] = o.Command
	}
	return out, nil
}

// queryBool reads a boolean option as Kubernetes' parameter codec does: absent, "0" and
// "false" are false, anything else true.
func queryBool(values []string) bool {
	return len(values) > 0 && values[0] != "0" && !strings.EqualFold(values[0], "false")
}

// proxyUpgrade passes r, an upgrade request, to loc on a node agent and, once the agent has
// switched protocols, joins the client's connection to the agent's until either side closes it.
func (s *Server) proxyUpgrade(w http.ResponseWriter, r *http.Request, loc *url.URL) {
	if !isUpgradeRequest(r) {
		writeError(w, apierrors.NewBadRequest("Upgrade request required"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), streamUpgradeTimeout)
	defer cancel()
	backend, err := (&net.Dialer{}).DialContext(ctx, "tcp", loc.Host)
	if err != nil {
		writeError(w, apierrors.NewInternalError(fmt.Errorf("error dialing backend: %v", err)))
		return
	}
	out := &http.Request{Method: r.Method, URL: loc, Host: loc.Host, Header: r.Header.Clone(),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	// The user's credentials are the apiserver's business, not the node's.
	out.Header.Del("Authorization")
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		out.Header.Add("X-Forwarded-For", host)
	}
	deadline, _ := ctx.Deadline()
	_ = backend.SetDeadline(deadline)
	fromBackend := bufio.NewReader(backend)
	var resp *http.Response
	if err = out.Write(backend); err == nil {
		resp, err = http.ReadResponse(fromBackend, out)
	}
	if err != nil {
		backend.Close()
		writeError(w, apierrors.NewInternalError(fmt.Errorf("error proxying to the node: %v", err)))
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		// The node's refusal, body and all, still under the deadline: a node that stalls in
		// the middle of it must not hold the request.
		defer backend.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, io.LimitReader(resp.Body, 64<<10))
		return
	}
	_ = backend.SetDeadline(time.Time{}) // a session lasts as long as its two ends want
	client, fromClient, err := http.NewResponseController(w).Hijack()
	if err != nil {
		backend.Close()
		writeError(w, apierrors.NewInternalError(fmt.Errorf("unable to upgrade: %v", err)))
		return
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/1.1 %s\r\n", resp.Status)
	_ = resp.Header.Write(&head)
	head.WriteString("\r\n")
	if _, err := client.Write(head.Bytes()); err != nil {
		client.Close()
		backend.Close()
		return
	}
	s.streams.join(client, fromClient.Reader, backend, fromBackend)
}

// isUpgradeRequest reports whether r asks to switch protocols.
func isUpgradeRequest(r *http.Request) bool {
	for _, v := range r.Header.Values("Connection") {
		for token := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(token), "upgrade") {
				return true
			}
		}
	}
	return false
}

// streamConns are the joined connections of the streaming sessions in progress; the server
// closes them when it stops (http.Server does not know hijacked connections).
type streamConns struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// join copies between a and b (after what their readers hold already) until either side ends,
// then closes both.
func (s *streamConns) join(a net.Conn, fromA *bufio.Reader, b net.Conn, fromB *bufio.Reader) {
	if !s.add(a, b) {
		return
	}
	defer s.remove(a, b)
	done := make(chan struct{}, 2)
	pass := func(dst net.Conn, src *bufio.Reader, conn net.Conn) {
		defer func() { done <- struct{}{} }()
		if n := src.Buffered(); n > 0 {
			buffered, _ := src.Peek(n)
			if _, err := dst.Write(buffered); err != nil {
				return
			}
		}
		_, _ = io.Copy(dst, conn) // conn itself from here: splice(2) between TCP sockets
	}
	go pass(b, fromA, a)
	go pass(a, fromB, b)
	<-done
	a.Close()
	b.Close()
	<-done
}

func (s *streamConns) add(conns ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	for _, c := range conns {
		s.conns[c] = struct{}{}
	}
	return true
}

func (s *streamConns) remove(conns ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range conns {
		delete(s.conns, c)
	}
}

// closeAll closes every connection and every one joined from now on.
func (s *streamConns) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
}
