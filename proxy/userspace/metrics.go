package userspace

import (
	"errors"

	"github.com/kplane/kplane/internal/metricreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the userspace data path. Kubernetes has no metrics for its old userspace mode,
// so these carry kplane's own prefix:
//
//	kplane_userspace_proxy_connections_total{protocol,result}   new TCP connections and UDP sessions:
//	                                                            forwarded, no_endpoints, dial_failed
//	kplane_userspace_proxy_dial_failures_total{protocol}        failed attempts to reach an endpoint
//	kplane_userspace_proxy_active_connections{protocol}         TCP connections / UDP sessions open now
//	kplane_userspace_proxy_udp_dropped_datagrams_total{reason}  no_endpoints, send_failed
//	kplane_userspace_proxy_skipped_service_ports_total{reason}  unsupported_protocol
//	kplane_userspace_proxy_listen_failures_total{protocol}      failed binds (port in use, address not local, …)
//	kplane_userspace_proxy_listeners{protocol}                  sockets listening now
type metrics struct {
	connections   *prometheus.CounterVec
	dialFailures  *prometheus.CounterVec
	active        *prometheus.GaugeVec
	udpDropped    *prometheus.CounterVec
	skipped       *prometheus.CounterVec
	listenFailure *prometheus.CounterVec
	listeners     *prometheus.GaugeVec
}

const metricsPrefix = "kplane_userspace_proxy_"

// Label values.
const (
	resultForwarded   = "forwarded"
	resultNoEndpoints = "no_endpoints"
	resultDialFailed  = "dial_failed"

	dropNoEndpoints = "no_endpoints"
	dropSendFailed  = "send_failed"

	skipUnsupportedProtocol = "unsupported_protocol"
)

// newMetrics builds the metrics and registers them with reg (if not nil). Vectors of the same
// names already registered, by an earlier Proxier on the same registry, are reused.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricsPrefix + "connections_total",
			Help: "New TCP connections and UDP sessions through the userspace proxy, by outcome.",
		}, []string{"protocol", "result"}),
		dialFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricsPrefix + "dial_failures_total",
			Help: "Attempts to reach an endpoint that failed (the next endpoint is tried, within a bound).",
		}, []string{"protocol"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricsPrefix + "active_connections",
			Help: "TCP connections and UDP sessions being forwarded now.",
		}, []string{"protocol"}),
		udpDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricsPrefix + "udp_dropped_datagrams_total",
			Help: "UDP datagrams from clients that were not forwarded, by reason.",
		}, []string{"reason"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricsPrefix + "skipped_service_ports_total",
			Help: "Service ports the userspace proxy does not serve, counted when they appear, by reason.",
		}, []string{"reason"}),
		listenFailure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricsPrefix + "listen_failures_total",
			Help: "Failed attempts to listen on a service address (port in use, address not on this node, …).",
		}, []string{"protocol"}),
		listeners: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricsPrefix + "listeners",
			Help: "Sockets the userspace proxy listens on now.",
		}, []string{"protocol"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	m.connections = metricreg.Register(reg, m.connections, &errs)
	m.dialFailures = metricreg.Register(reg, m.dialFailures, &errs)
	m.active = metricreg.Register(reg, m.active, &errs)
	m.udpDropped = metricreg.Register(reg, m.udpDropped, &errs)
	m.skipped = metricreg.Register(reg, m.skipped, &errs)
	m.listenFailure = metricreg.Register(reg, m.listenFailure, &errs)
	m.listeners = metricreg.Register(reg, m.listeners, &errs)
	return m, errors.Join(errs...)
}
