package nftables

import (
	"errors"

	"github.com/kplane/kplane/internal/metricreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the nftables data path: kube-proxy's nftables-specific ones under their names
// and labels, and kplane's own under kubeproxy_kplane_nftables_. The shared proxy owns the
// mode-independent ones (sync_proxy_rules_duration_seconds, its full and partial variants…).
type metrics struct {
	syncFailures      prometheus.Counter
	cleanupFailures   prometheus.Counter
	noLocalEndpoints  *prometheus.GaugeVec // by traffic_policy
	conntrackDuration prometheus.Observer
	conntrackDeleted  prometheus.Counter
	noEndpoints       prometheus.Gauge
	skipped           *prometheus.GaugeVec // by reason
	skippedEndpoints  prometheus.Gauge
}

const family = "IPv4"

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns = "kubeproxy"
	byFamily := []string{"ip_family"}
	syncFailures := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sync_proxy_rules_nftables_sync_failures_total",
		Help: "nftables transactions of a sync that failed."}, byFamily)
	cleanupFailures := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sync_proxy_rules_nftables_cleanup_failures_total",
		Help: "nftables transactions deleting stale chains (or the table) that failed."}, byFamily)
	noLocal := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "sync_proxy_rules_no_local_endpoints_total",
		Help: "Service ports with a Local traffic policy and no endpoint on this node."}, []string{"traffic_policy", "ip_family"})
	ctDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "conntrack_reconciler_sync_duration_seconds",
		Help: "Time of removing stale UDP conntrack entries, in seconds.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, byFamily)
	ctDeleted := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "conntrack_reconciler_deleted_entries_total",
		Help: "Stale UDP conntrack entries deleted."}, byFamily)
	noEndpoints := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "kplane", Name: "nftables_no_endpoints_service_ports",
		Help: "Service ports without any usable endpoint; their traffic is rejected."})
	skipped := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: "kplane", Name: "nftables_skipped_service_ports",
		Help: "Service ports the nftables proxier does not program, by reason (ipv6, protocol, port, no-cluster-ip)."}, []string{"reason"})
	skippedEndpoints := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "kplane", Name: "nftables_skipped_endpoints",
		Help: "Endpoints left out because they are not IPv4 or have no valid port."})

	if reg != nil {
		var errs []error
		syncFailures = metricreg.Register(reg, syncFailures, &errs)
		cleanupFailures = metricreg.Register(reg, cleanupFailures, &errs)
		noLocal = metricreg.Register(reg, noLocal, &errs)
		ctDuration = metricreg.Register(reg, ctDuration, &errs)
		ctDeleted = metricreg.Register(reg, ctDeleted, &errs)
		noEndpoints = metricreg.Register(reg, noEndpoints, &errs)
		skipped = metricreg.Register(reg, skipped, &errs)
		skippedEndpoints = metricreg.Register(reg, skippedEndpoints, &errs)
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	return &metrics{
		syncFailures:      syncFailures.WithLabelValues(family),
		cleanupFailures:   cleanupFailures.WithLabelValues(family),
		noLocalEndpoints:  noLocal.MustCurryWith(prometheus.Labels{"ip_family": family}),
		conntrackDuration: ctDuration.WithLabelValues(family),
		conntrackDeleted:  ctDeleted.WithLabelValues(family),
		noEndpoints:       noEndpoints,
		skipped:           skipped,
		skippedEndpoints:  skippedEndpoints,
	}, nil
}
