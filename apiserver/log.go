package apiserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kplane/kplane/apiserver/registry"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	nodesGVR        = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	podLogGR        = schema.GroupResource{Resource: "pods/log"}
	podLogsGK       = schema.GroupKind{Kind: "PodLogOptions"}
	defaultNodePort = 10250
)

// nodeClient proxies to node agents. No overall timeout: a followed log streams for as long
// as the client keeps reading; the request's context ends it.
var nodeClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{}).DialContext, MaxIdleConnsPerHost: 4},
	// A node has no business redirecting the apiserver elsewhere.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// isCorePods reports whether info is the core pods resource, the one with pods/log, exec,
// attach and portforward.
func isCorePods(info *registry.Info) bool {
	return info.GroupVersion.Group == "" && info.Resource == "pods"
}

// serveLog serves pods/log: it checks the pod, picks its container, and streams the log from
// the node agent running it (GET /containerLogs/<ns>/<pod>/<container> on the port the Node
// reports in status.daemonEndpoints), flushing every write so `kubectl logs -f` follows.
func (s *Server) serveLog(w http.ResponseWriter, r *http.Request, req request) {
	if r.Method != http.MethodGet {
		writeError(w, apierrors.NewMethodNotSupported(podLogGR, strings.ToLower(r.Method)))
		return
	}
	q := r.URL.Query()
	params, err := logParams(q, req.name)
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
	container, err := subresourceContainer(pod, q.Get("container"))
	if err != nil {
		writeError(w, err)
		return
	}
	if pod.Spec.NodeName == "" {
		// Not scheduled yet: no container has run, so the log is empty (as Kubernetes answers).
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		return
	}
	agent, err := s.nodeAgent(r.Context(), pod.Spec.NodeName)
	if err != nil {
		writeError(w, err)
		return
	}
	loc := url.URL{Scheme: "http", Host: agent,
		Path: "/containerLogs/" + url.PathEscape(pod.Namespace) + "/" + url.PathEscape(pod.Name) + "/" + url.PathEscape(container), RawQuery: params.Encode()}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodGet, loc.String(), nil)
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	resp, err := nodeClient.Do(out)
	if err != nil {
		writeError(w, apierrors.NewServiceUnavailable(fmt.Sprintf("cannot reach node %s for the logs of pod %s: %v", pod.Spec.NodeName, pod.Name, err)))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The node answers errors as text; clients expect a Status with the same code.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		msg := strings.TrimSpace(string(body))
		if msg == "" {
			msg = resp.Status
		}
		// The generic error picks the reason for the code; the node's own words are clearer
		// than its stock message.
		e := apierrors.NewGenericServerResponse(resp.StatusCode, "get", podLogGR, pod.Name, msg, 0, false)
		e.ErrStatus.Message, e.ErrStatus.Details = msg, nil
		writeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush() // headers now, so a client following an idle log sees the stream open
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF, or the client (and so the request's context) went away
		}
	}
}

// logParams checks the PodLogOptions query parameters and returns those the node takes.
func logParams(q url.Values, name string) (url.Values, error) {
	out := url.Values{}
	var errs field.ErrorList
	for _, p := range []string{"follow", "previous", "timestamps", "insecureSkipTLSVerifyBackend"} {
		switch v := q.Get(p); v {
		case "":
		case "true", "1", "false", "0":
			if (v == "true" || v == "1") && p != "insecureSkipTLSVerifyBackend" {
				out.Set(p, "true")
			}
		default:
			errs = append(errs, field.Invalid(field.NewPath(p), v, "must be true or false"))
		}
	}
	for _, bound := range []struct {
		p     string
		least int64
	}{{"limitBytes", 1}, {"sinceSeconds", 1}, {"tailLines", 0}} { // a fixed order, for stable errors
		p, least := bound.p, bound.least
		v := q.Get(p)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid %s %q: not an integer", p, v))
		case n < least:
			errs = append(errs, field.Invalid(field.NewPath(p), n, fmt.Sprintf("must be greater than or equal to %d", least)))
		default:
			out.Set(p, v)
		}
	}
	if v := q.Get("sinceTime"); v != "" {
		if q.Get("sinceSeconds") != "" {
			errs = append(errs, field.Forbidden(field.NewPath("sinceTime"), "at most one of `sinceTime` or `sinceSeconds` may be specified"))
		}
		out.Set("sinceTime", v)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(podLogsGK, name, errs)
	}
	return out, nil
}

// subresourceContainer picks the container a subresource (log, exec, attach) is asked for: the
// one named, or the pod's only container when none is named.
func subresourceContainer(pod *corev1.Pod, name string) (string, error) {
	var names []string
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == name {
				return name, nil
			}
			names = append(names, c.Name)
		}
	}
	switch {
	case name != "":
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
	case len(pod.Spec.Containers) == 1:
		return pod.Spec.Containers[0].Name, nil
	case len(pod.Spec.Containers) == 0:
		return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s", pod.Name))
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", pod.Name, names))
}

// nodeAgent is the host:port of the agent of the node name (nodeEndpoint).
func (s *Server) nodeAgent(ctx context.Context, name string) (string, error) {
	obj, err := s.resources[nodesGVR].store.Get(ctx, "", name)
	if err != nil {
		return "", err
	}
	host, port := nodeEndpoint(obj.(*corev1.Node))
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// nodeEndpoint is where a node agent serves: its InternalIP (else its first address, else its
// name) and the port it reports, the kubelet's default if it reports none.
func nodeEndpoint(n *corev1.Node) (string, int) {
	host := n.Name
	for i, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			host = a.Address
			break
		}
		if i == 0 {
			host = a.Address
		}
	}
	port := int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	if port == 0 {
		port = defaultNodePort
	}
	return host, port
}
