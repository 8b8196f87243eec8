package workqueue

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/kplane/kplane/internal/metricreg"
	"github.com/prometheus/client_golang/prometheus"
)

// unfinishedWorkPeriod is how often a named queue refreshes its unfinished-work gauges (the
// period Kubernetes uses).
const unfinishedWorkPeriod = 500 * time.Millisecond

// Metrics is one set of the Kubernetes workqueue metric vectors, each labelled by queue name:
//
//	workqueue_depth                             gauge      items waiting (including re-adds of held items)
//	workqueue_adds_total                        counter    adds that were not collapsed into a waiting item
//	workqueue_queue_duration_seconds            histogram  time from Add to Get
//	workqueue_work_duration_seconds             histogram  time from Get to Done
//	workqueue_unfinished_work_seconds           gauge      summed age of the items now held by workers
//	workqueue_longest_running_processor_seconds gauge      age of the oldest item now held by a worker
//	workqueue_retries_total                     counter    AddAfter and AddRateLimited calls
//
// Named queues use the package default set unless given one with WithMetrics. The default set is
// registered with prometheus.DefaultRegisterer when the first named queue is built, and not before,
// so a program with only unnamed queues exports nothing. A process serving its own registry builds
// a set with NewMetrics(reg) and passes it to each queue.
type Metrics struct {
	depth         *prometheus.GaugeVec
	adds          *prometheus.CounterVec
	queueDuration *prometheus.HistogramVec
	workDuration  *prometheus.HistogramVec
	unfinished    *prometheus.GaugeVec
	longest       *prometheus.GaugeVec
	retries       *prometheus.CounterVec
}

// NewMetrics builds a set of the workqueue metric vectors and registers them with reg (none if reg
// is nil). If reg already holds vectors of these names of the same kind, for instance from an
// earlier NewMetrics call, they are reused, so calling NewMetrics twice with one registry is fine.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	// Buckets from 10ns to 10s by decades, as Kubernetes uses for both duration histograms.
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 10)
	labels := []string{"name"}
	m := &Metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "depth",
			Help: "Number of items waiting in the workqueue.",
		}, labels),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "adds_total",
			Help: "Number of items added to the workqueue (repeat adds of a waiting item not counted).",
		}, labels),
		queueDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help:    "Seconds an item waited in the workqueue before a worker took it.",
			Buckets: buckets,
		}, labels),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "work_duration_seconds",
			Help:    "Seconds a worker held an item, from Get to Done.",
			Buckets: buckets,
		}, labels),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "Summed seconds that the items held by workers right now have been held. " +
				"Steady growth means stuck workers; its slope is how many.",
		}, labels),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "Seconds the longest-held item of the workqueue has been held by a worker.",
		}, labels),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "retries_total",
			Help: "Number of delayed or rate-limited adds to the workqueue.",
		}, labels),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	m.depth = metricreg.Register(reg, m.depth, &errs)
	m.adds = metricreg.Register(reg, m.adds, &errs)
	m.queueDuration = metricreg.Register(reg, m.queueDuration, &errs)
	m.workDuration = metricreg.Register(reg, m.workDuration, &errs)
	m.unfinished = metricreg.Register(reg, m.unfinished, &errs)
	m.longest = metricreg.Register(reg, m.longest, &errs)
	m.retries = metricreg.Register(reg, m.retries, &errs)
	return m, errors.Join(errs...)
}

var (
	defaultMetricsOnce sync.Once
	defaultMetrics     *Metrics
)

// packageMetrics returns the default set, registering it on first use.
func packageMetrics() *Metrics {
	defaultMetricsOnce.Do(func() {
		var err error
		defaultMetrics, err = NewMetrics(prometheus.DefaultRegisterer)
		if err != nil {
			slog.Warn("workqueue metrics not registered; queues will not export them", "err", err)
		}
	})
	return defaultMetrics
}

// queueMetrics is the per-queue view of a Metrics. A nil *queueMetrics (unnamed queue) records
// nothing, so the hot paths cost one nil check. Methods other than retry run under the queue lock.
type queueMetrics[T comparable] struct {
	clock         Clock
	depth         prometheus.Gauge
	adds          prometheus.Counter
	queueDuration prometheus.Observer
	workDuration  prometheus.Observer
	unfinished    prometheus.Gauge
	longest       prometheus.Gauge
	retries       prometheus.Counter

	addedAt   map[T]time.Time // when each waiting item was added
	startedAt map[T]time.Time // when each held item was handed out
}

func newQueueMetrics[T comparable](o options) *queueMetrics[T] {
	if o.name == "" {
		return nil
	}
	m := o.metrics
	if m == nil {
		m = packageMetrics()
	}
	return &queueMetrics[T]{
		clock:         o.clock,
		depth:         m.depth.WithLabelValues(o.name),
		adds:          m.adds.WithLabelValues(o.name),
		queueDuration: m.queueDuration.WithLabelValues(o.name),
		workDuration:  m.workDuration.WithLabelValues(o.name),
		unfinished:    m.unfinished.WithLabelValues(o.name),
		longest:       m.longest.WithLabelValues(o.name),
		retries:       m.retries.WithLabelValues(o.name),
		addedAt:       map[T]time.Time{},
		startedAt:     map[T]time.Time{},
	}
}

// add records an item becoming dirty (waiting to be handed out, now or after its current Done).
func (m *queueMetrics[T]) add(item T) {
	if m == nil {
		return
	}
	m.adds.Inc()
	m.depth.Inc()
	if _, ok := m.addedAt[item]; !ok {
		m.addedAt[item] = m.clock.Now()
	}
}

func (m *queueMetrics[T]) get(item T) {
	if m == nil {
		return
	}
	now := m.clock.Now()
	m.depth.Dec()
	m.startedAt[item] = now
	if t, ok := m.addedAt[item]; ok {
		m.queueDuration.Observe(now.Sub(t).Seconds())
		delete(m.addedAt, item)
	}
}

func (m *queueMetrics[T]) done(item T) {
	if m == nil {
		return
	}
	if t, ok := m.startedAt[item]; ok {
		m.workDuration.Observe(m.clock.Now().Sub(t).Seconds())
		delete(m.startedAt, item)
	}
}

// updateUnfinished refreshes the two gauges about held items. A worker stuck on an item never
// calls Done, so only a periodic look at the held items can reveal it.
func (m *queueMetrics[T]) updateUnfinished() {
	now := m.clock.Now()
	var total, oldest float64
	for _, t := range m.startedAt {
		age := now.Sub(t).Seconds()
		total += age
		oldest = max(oldest, age)
	}
	m.unfinished.Set(total)
	m.longest.Set(oldest)
}

func (m *queueMetrics[T]) retry() {
	if m == nil {
		return
	}
	m.retries.Inc()
}
