package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are kube-proxy's, under the same names (namespace "kubeproxy"), plus kplane's own
// under "kubeproxy_kplane_".
type metrics struct {
	syncDuration, syncFullDuration, syncPartialDuration prometheus.Observer
	networkProgramming                                  prometheus.Observer
	lastSynced, lastQueued                              prometheus.Gauge
	endpointChanges, serviceChanges                     prometheus.Counter
	endpointChangesPending, serviceChangesPending       prometheus.Gauge
	healthz, livez                                      *prometheus.CounterVec
	problems                                            *prometheus.CounterVec
	syncFailures                                        prometheus.Counter
}

// syncBuckets: 1 ms to about 16 s, doubling.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// programmingBuckets: 0.25 s and 0.5 s, then every second to 59 s, every 5 s to 115 s, every
// 30 s to 5 min.
func programmingBuckets() []float64 {
	b := []float64{0.25, 0.5}
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	return append(b, prometheus.LinearBuckets(120, 30, 7)...)
}

func newMetrics(reg prometheus.Registerer, family string) (*metrics, error) {
	const ns = "kubeproxy"
	byFamily := []string{"ip_family"}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets}, byFamily)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, byFamily)
	}
	syncDuration := histogram("sync_proxy_rules_duration_seconds", "Time a sync of the data path took, in seconds.", syncBuckets)
	syncFull := histogram("sync_full_proxy_rules_duration_seconds", "Time a full sync of the data path took, in seconds.", syncBuckets)
	syncPartial := histogram("sync_partial_proxy_rules_duration_seconds", "Time a partial sync of the data path took, in seconds.", syncBuckets)
	programming := histogram("network_programming_duration_seconds",
		"Time from an endpoints change (its EndpointSlice's last-change-trigger-time) to the sync that programmed it, in seconds.", programmingBuckets())
	lastSynced := gauge("sync_proxy_rules_last_timestamp_seconds", "When the data path was last synced successfully (Unix seconds).")
	lastQueued := gauge("sync_proxy_rules_last_queued_timestamp_seconds", "When a sync of the data path was last queued (Unix seconds).")
	m := &metrics{
		syncDuration:        syncDuration.WithLabelValues(family),
		syncFullDuration:    syncFull.WithLabelValues(family),
		syncPartialDuration: syncPartial.WithLabelValues(family),
		networkProgramming:  programming.WithLabelValues(family),
		lastSynced:          lastSynced.WithLabelValues(family),
		lastQueued:          lastQueued.WithLabelValues(family),
		endpointChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sync_proxy_rules_endpoint_changes_total",
			Help: "EndpointSlice changes seen."}),
		serviceChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sync_proxy_rules_service_changes_total",
			Help: "Service changes seen."}),
		endpointChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "sync_proxy_rules_endpoint_changes_pending",
			Help: "Services whose endpoint changes wait for the next sync."}),
		serviceChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "sync_proxy_rules_service_changes_pending",
			Help: "Services whose changes wait for the next sync."}),
		healthz: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "proxy_healthz_total",
			Help: "Answers of /healthz by HTTP status."}, []string{"code"}),
		livez: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "proxy_livez_total",
			Help: "Answers of /livez by HTTP status."}, []string{"code"}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "kplane", Name: "problems_total",
			Help: "Services, EndpointSlices and service ports the proxy cannot serve (in whole or in part) as asked, by reason; " +
				"each counted once per change."}, []string{"reason"}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "kplane", Name: "sync_proxy_rules_failures_total",
			Help: "Syncs of the data path that failed (the next one is full)."}),
	}
	for _, c := range []prometheus.Collector{syncDuration, syncFull, syncPartial, programming, lastSynced, lastQueued,
		m.endpointChanges, m.serviceChanges, m.endpointChangesPending, m.serviceChangesPending, m.healthz, m.livez,
		m.problems, m.syncFailures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
