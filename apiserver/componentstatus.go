package apiserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/apiserver/registry"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ComponentStatuses (core/v1, deprecated since Kubernetes v1.19 but still served) report the
// health of etcd, the scheduler and the controller manager, probed on each read where
// kube-apiserver probes them: the controller manager's /healthz on 127.0.0.1:10257 (kplane's
// serves plain HTTP there) and the scheduler's on 127.0.0.1:10259 (HTTPS). kplane's scheduler
// serves no health endpoint, so it shows Unhealthy, as it would to kube-apiserver.

const componentStatusWarning = "v1 ComponentStatus is deprecated in v1.19+"

// componentProbeTimeout bounds each probe; kube-apiserver allows 20 s, too long for kubectl's
// default request timeout to be worth matching.
const componentProbeTimeout = 5 * time.Second

var componentStatusesResource = &resource{
	strategy:   registry.ComponentStatuses,
	info:       registry.ComponentStatuses.Describe(),
	selectable: fields.Set{"metadata.name": ""},
}

// componentProbe checks one component: its message when healthy, or the failure.
type componentProbe func(ctx context.Context) (string, error)

func (s *Server) componentProbes() map[string]componentProbe {
	return map[string]componentProbe{
		"etcd-0": func(ctx context.Context) (string, error) {
			if _, err := s.cfg.Etcd.Client.Get(ctx, "health"); err != nil {
				return "", err
			}
			return "ok", nil
		},
		"controller-manager": httpProbe("http://127.0.0.1:10257/healthz"),
		"scheduler":          httpProbe("https://127.0.0.1:10259/healthz"),
	}
}

// probeClient checks the components' health ports. Their serving certificates are
// self-signed, and kube-apiserver does not verify them either; probes are rare, so
// connections are not kept.
var probeClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
	DisableKeepAlives: true,
}}

// httpProbe is healthy when url answers 200; the body is the message.
func httpProbe(url string) componentProbe {
	return func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return string(body), nil
	}
}

func componentStatus(ctx context.Context, name string, probe componentProbe) *corev1.ComponentStatus {
	ctx, cancel := context.WithTimeout(ctx, componentProbeTimeout)
	defer cancel()
	cond := corev1.ComponentCondition{Type: corev1.ComponentHealthy, Status: corev1.ConditionTrue}
	msg, err := probe(ctx)
	cond.Message = msg
	if err != nil {
		cond.Status, cond.Message = corev1.ConditionFalse, err.Error()
	}
	cs := &corev1.ComponentStatus{Conditions: []corev1.ComponentCondition{cond}}
	cs.Name = name
	cs.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ComponentStatus"))
	return cs
}

// serveComponentStatuses answers get and list; parts is the path after /api/v1.
func (s *Server) serveComponentStatuses(w http.ResponseWriter, r *http.Request, parts []string, watch bool) {
	gr := schema.GroupResource{Resource: "componentstatuses"}
	if r.Method != http.MethodGet || watch || len(parts) > 2 {
		verb := strings.ToLower(r.Method)
		if watch {
			verb = "watch"
		}
		writeError(w, apierrors.NewMethodNotSupported(gr, verb))
		return
	}
	addWarning(w, componentStatusWarning)
	out, err := negotiate(r)
	if err != nil {
		writeError(w, err)
		return
	}
	probes := s.componentProbes()
	if len(parts) == 2 {
		probe, ok := probes[parts[1]]
		if !ok {
			writeError(w, apierrors.NewNotFound(schema.GroupResource{Resource: "componentstatus"}, parts[1]))
			return
		}
		s.writeRead(w, r, out, componentStatusesResource, componentStatus(r.Context(), parts[1], probe), nil)
		return
	}
	pred, err := predicate(componentStatusesResource, r)
	if err != nil {
		writeError(w, err)
		return
	}
	statuses := make([]*corev1.ComponentStatus, 0, len(probes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, probe := range probes {
		wg.Go(func() {
			cs := componentStatus(r.Context(), name, probe)
			mu.Lock()
			defer mu.Unlock()
			statuses = append(statuses, cs)
		})
	}
	wg.Wait()
	slices.SortFunc(statuses, func(a, b *corev1.ComponentStatus) int { return strings.Compare(a.Name, b.Name) })
	list := &corev1.ComponentStatusList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ComponentStatusList"))
	for _, cs := range statuses {
		if pred.Matches(cs) {
			list.Items = append(list.Items, *cs)
		}
	}
	s.writeRead(w, r, out, componentStatusesResource, nil, runtime.Object(list))
}
