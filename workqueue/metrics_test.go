package workqueue

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// testMetrics returns a Metrics registered with a fresh registry, so that tests see only their
// own series.
func testMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sample is one series read back from a registry: a gauge or counter value, or a histogram's
// count and sum.
type sample struct {
	value, sum float64
	count      uint64
	buckets    []float64
}

// gather returns the series labelled name=queue, keyed by metric name.
func gather(t *testing.T, g prometheus.Gatherer, queue string) map[string]sample {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sample{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if !hasLabel(m, "name", queue) {
				continue
			}
			var s sample
			switch {
			case m.Gauge != nil:
				s.value = m.Gauge.GetValue()
			case m.Counter != nil:
				s.value = m.Counter.GetValue()
			case m.Histogram != nil:
				s.count, s.sum = m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
				for _, b := range m.Histogram.GetBucket() {
					s.buckets = append(s.buckets, b.GetUpperBound())
				}
			}
			out[f.GetName()] = s
		}
	}
	return out
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	q := NewRateLimited[string](NewItemExponentialFailureRateLimiter[string](time.Second, time.Minute),
		WithName("test"), WithMetrics(m), WithClock(clock))
	defer q.ShutDown()
	read := func() map[string]sample { return gather(t, reg, "test") }
	// step advances the clock once the periodic update has armed its timer for a full period from
	// now, so that an update that is due is not pushed back by a re-arm racing with the step.
	step := func(d time.Duration) {
		t.Helper()
		eventually(t, "the update timer to be armed", func() bool { return clock.armedAt(clock.Now().Add(unfinishedWorkPeriod)) })
		clock.step(d)
	}

	q.Add("a")
	q.Add("b")
	q.Add("a") // collapses: not an add
	s := read()
	if s["workqueue_adds_total"].value != 2 || s["workqueue_depth"].value != 2 {
		t.Fatalf("after 3 adds of 2 items: adds %v, depth %v; want 2, 2", s["workqueue_adds_total"].value, s["workqueue_depth"].value)
	}
	want := []string{
		"workqueue_adds_total", "workqueue_depth", "workqueue_longest_running_processor_seconds",
		"workqueue_queue_duration_seconds", "workqueue_retries_total", "workqueue_unfinished_work_seconds",
		"workqueue_work_duration_seconds",
	}
	var names []string
	for name := range s {
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("metrics %q, want %q", names, want)
	}
	wantBuckets := []float64{1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10}
	for _, h := range []string{"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"} {
		if !slices.EqualFunc(s[h].buckets, wantBuckets, func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*b }) {
			t.Fatalf("%s buckets %v, want %v", h, s[h].buckets, wantBuckets)
		}
	}

	step(time.Second)
	q.Get() // a waited 1s
	s = read()
	if h := s["workqueue_queue_duration_seconds"]; h.count != 1 || h.sum != 1 || s["workqueue_depth"].value != 1 {
		t.Fatalf("after Get: queue duration %d obs sum %v, depth %v; want 1, 1s, 1", h.count, h.sum, s["workqueue_depth"].value)
	}

	// The unfinished-work gauges follow the periodic update: a held for 2s, then b for 0.5s too.
	step(2 * time.Second)
	eventually(t, "unfinished work = 2s", func() bool { return read()["workqueue_unfinished_work_seconds"].value == 2 })
	q.Get()
	step(unfinishedWorkPeriod)
	eventually(t, "unfinished work = 3s", func() bool { return read()["workqueue_unfinished_work_seconds"].value == 3 })
	if v := read()["workqueue_longest_running_processor_seconds"].value; v != 2.5 {
		t.Fatalf("longest running = %v, want 2.5", v)
	}

	q.Done("a")
	q.Done("b")
	if h := read()["workqueue_work_duration_seconds"]; h.count != 2 || h.sum != 3 {
		t.Fatalf("work duration %d obs sum %v; want 2, 3s", h.count, h.sum)
	}

	q.AddAfter("c", time.Hour)
	q.AddAfter("d", 0)
	q.AddRateLimited("e")
	if v := read()["workqueue_retries_total"].value; v != 3 {
		t.Fatalf("retries = %v, want 3", v)
	}
}

func TestNewMetricsTwiceReusesVectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("second NewMetrics on one registry: %v", err)
	}
	q1 := New[string](WithName("one"), WithMetrics(m1))
	q2 := New[string](WithName("two"), WithMetrics(m2))
	defer q1.ShutDown()
	defer q2.ShutDown()
	q1.Add("a")
	q2.Add("a")
	if gather(t, reg, "one")["workqueue_adds_total"].value != 1 || gather(t, reg, "two")["workqueue_adds_total"].value != 1 {
		t.Fatal("queues built from two NewMetrics calls are not both exported")
	}
}

func TestDefaultMetricsRegisterWithDefaultRegisterer(t *testing.T) {
	q := New[string](WithName("workqueue-default-metrics-test"))
	defer q.ShutDown()
	q.Add("a")
	if v := gather(t, prometheus.DefaultGatherer, "workqueue-default-metrics-test")["workqueue_adds_total"].value; v != 1 {
		t.Fatalf("adds in the default registry = %v, want 1", v)
	}
}

func TestUnnamedQueueHasNoMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	q := NewDelaying[string](WithMetrics(m))
	defer q.ShutDown()
	if q.metrics != nil {
		t.Fatal("unnamed queue records metrics")
	}
	q.Add("a")
	q.AddAfter("b", 0)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if len(f.GetMetric()) != 0 {
			t.Fatalf("unnamed queue exported %s", f.GetName())
		}
	}
}
