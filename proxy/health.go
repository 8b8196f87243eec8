package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// NodeIPFamily is the family of node's first InternalIP, else of its first ExternalIP, else IPv4.
func NodeIPFamily(node *corev1.Node) corev1.IPFamily {
	for _, kind := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type != kind {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				return familyOf(ip)
			}
		}
	}
	return corev1.IPv4Protocol
}

// HealthzHandler serves /healthz: 200 when healthy and the node is eligible for load-balanced
// traffic, else 503; the body is Health as JSON.
func (p *Proxier) HealthzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := p.Health()
		eligible := p.NodeEligible()
		h.NodeEligible = &eligible
		p.writeHealth(w, h, h.Healthy && eligible, p.m.healthz)
	})
}

// LivezHandler serves /livez: as /healthz without the node's state, for liveness probes.
func (p *Proxier) LivezHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := p.Health()
		p.writeHealth(w, h, h.Healthy, p.m.livez)
	})
}

func (p *Proxier) writeHealth(w http.ResponseWriter, h Health, ok bool, counter *prometheus.CounterVec) {
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	counter.WithLabelValues(fmt.Sprint(code)).Inc()
	body, _ := json.Marshal(h)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
