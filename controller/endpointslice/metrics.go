package endpointslice

import (
	"errors"
	"sync"

	"github.com/kplane/kplane/internal/metricreg"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// metrics are the controller's Prometheus metrics, under Kubernetes' names
// (endpoint_slice_controller_*), so that existing dashboards work.
type metrics struct {
	added, removed *prometheus.HistogramVec
	changes        *prometheus.CounterVec // by operation: create, update, delete
	syncs          *prometheus.CounterVec // by result: success, stale, error
	endpointsDesired,
	numSlices,
	desiredSlices *prometheus.GaugeVec

	mu        sync.Mutex
	byService map[types.NamespacedName]planStats
	totals    planStats // the sum of byService
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const sub = "endpoint_slice_controller"
	perSync := prometheus.ExponentialBuckets(2, 2, 15)
	m := &metrics{
		added: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: "endpoints_added_per_sync",
			Help: "Number of endpoints added on each Service sync", Buckets: perSync}, nil),
		removed: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: sub, Name: "endpoints_removed_per_sync",
			Help: "Number of endpoints removed on each Service sync", Buckets: perSync}, nil),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: sub, Name: "changes",
			Help: "Number of EndpointSlice changes"}, []string{"operation"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: sub, Name: "syncs",
			Help: "Number of EndpointSlice syncs"}, []string{"result"}),
		endpointsDesired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: "endpoints_desired",
			Help: "Number of endpoints desired"}, nil),
		numSlices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: "num_endpoint_slices",
			Help: "Number of EndpointSlices"}, nil),
		desiredSlices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: sub, Name: "desired_endpoint_slices",
			Help: "Number of EndpointSlices that would exist with perfect endpoint allocation"}, nil),
		byService: map[types.NamespacedName]planStats{},
	}
	var errs []error
	m.added = metricreg.Register(reg, m.added, &errs)
	m.removed = metricreg.Register(reg, m.removed, &errs)
	m.changes = metricreg.Register(reg, m.changes, &errs)
	m.syncs = metricreg.Register(reg, m.syncs, &errs)
	m.endpointsDesired = metricreg.Register(reg, m.endpointsDesired, &errs)
	m.numSlices = metricreg.Register(reg, m.numSlices, &errs)
	m.desiredSlices = metricreg.Register(reg, m.desiredSlices, &errs)
	return m, errors.Join(errs...)
}

// observePlan records a sync's plan: endpoints moved, and the Service's share of the gauges.
func (m *metrics) observePlan(svc types.NamespacedName, st planStats) {
	m.added.WithLabelValues().Observe(float64(st.added))
	m.removed.WithLabelValues().Observe(float64(st.removed))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subtract(m.byService[svc])
	m.byService[svc] = st
	m.totals.endpoints += st.endpoints
	m.totals.slices += st.slices
	m.totals.desiredSlices += st.desiredSlices
	m.publish()
}

// forgetService removes a deleted Service's share of the gauges.
func (m *metrics) forgetService(svc types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subtract(m.byService[svc])
	delete(m.byService, svc)
	m.publish()
}

func (m *metrics) subtract(st planStats) {
	m.totals.endpoints -= st.endpoints
	m.totals.slices -= st.slices
	m.totals.desiredSlices -= st.desiredSlices
}

func (m *metrics) publish() {
	m.endpointsDesired.WithLabelValues().Set(float64(m.totals.endpoints))
	m.numSlices.WithLabelValues().Set(float64(m.totals.slices))
	m.desiredSlices.WithLabelValues().Set(float64(m.totals.desiredSlices))
}
