package reconcile

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/workqueue"
	"github.com/prometheus/client_golang/prometheus"
)

// MaxRetries is how many times a failing key is retried, with growing delays, before it is
// dropped until its next change (as Kubernetes' endpoint controllers do).
const MaxRetries = 15

// SyncMetrics counts and times the syncs of every controller, by controller name.
type SyncMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewSyncMetrics builds the sync metrics and registers them with reg.
func NewSyncMetrics(reg prometheus.Registerer) (*SyncMetrics, error) {
	m := &SyncMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kplane_controller_syncs_total",
			Help: "Syncs of one key by a controller, by result (success, error, dropped).",
		}, []string{"controller", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kplane_controller_sync_duration_seconds",
			Help:    "Time one sync of one key took.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"controller"}),
	}
	for _, c := range []prometheus.Collector{m.total, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *SyncMetrics) observe(name, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.total.WithLabelValues(name, result).Inc()
	m.duration.WithLabelValues(name).Observe(d.Seconds())
}

// Result is what a sync that did not fail asks of the queue.
type Result struct {
	// After, when positive, syncs the key again after this long: for a state that changes
	// with time (a deadline, content still going away), not a failure.
	After time.Duration
}

// After is the Result that syncs the key again after d.
func After(d time.Duration) Result { return Result{After: d} }

// Func syncs one key. An error retries the key with the queue's rate limiter (the Result is
// then ignored); otherwise the key's failures are forgotten and Result.After, if set, queues
// it again after that long.
type Func func(ctx context.Context, key string) (Result, error)

// Ignore adapts a sync that never asks for a delay to a Func.
func Ignore(sync func(ctx context.Context, key string) error) Func {
	return func(ctx context.Context, key string) (Result, error) { return Result{}, sync(ctx, key) }
}

// Workers describes a worker pool: Sync is called for each key taken from Queue by Count
// goroutines. A key whose sync fails is retried with the queue's rate limiter, up to
// MaxRetries times.
type Workers struct {
	Name    string
	Queue   *workqueue.RateLimitingQueue[string]
	Count   int
	Sync    Func
	Metrics *SyncMetrics
	// Synced are the informers' HasSynced: no worker starts before they all report true.
	Synced []func() bool
	// Handlers are the controller's event handlers: the workers also wait for each to have
	// seen its informer's initial list, and Run removes them when it returns.
	Handlers []cache.Registration
	// Ready, if set, runs once everything has synced, before the first worker starts.
	Ready func()
	// Log are extra attributes for the line logged when Run starts.
	Log []any
}

// Run waits for the caches and handlers to sync, runs the workers until ctx is cancelled, then
// shuts the queue down, waits for the syncs in progress to return and removes the handlers.
// Cancelled before the caches synced, it returns at once.
func (w Workers) Run(ctx context.Context) {
	defer func() {
		for _, h := range w.Handlers {
			h.Remove()
		}
	}()
	slog.Info("waiting for caches", append([]any{"controller", w.Name, "workers", max(w.Count, 1)}, w.Log...)...)
	defer slog.Info("workers stopped", "controller", w.Name)
	synced := slices.Clone(w.Synced)
	for _, h := range w.Handlers {
		synced = append(synced, h.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx, synced...) {
		w.Queue.ShutDown()
		return
	}
	if w.Ready != nil {
		w.Ready()
	}
	var wg sync.WaitGroup
	for range max(w.Count, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	w.Queue.ShutDown()
	wg.Wait()
}

func (w Workers) next(ctx context.Context) bool {
	key, shutdown := w.Queue.Get()
	if shutdown {
		return false
	}
	defer w.Queue.Done(key)
	start := time.Now()
	res, err := w.Sync(ctx, key)
	switch {
	case err == nil:
		w.Queue.Forget(key)
		if res.After > 0 {
			w.Queue.AddAfter(key, res.After)
		}
		w.Metrics.observe(w.Name, "success", time.Since(start))
	case ctx.Err() != nil:
		// Shutting down: the error is the cancellation's, not the key's.
	case w.Queue.NumRequeues(key) < MaxRetries:
		slog.Info("sync failed, will retry", "controller", w.Name, "key", key, "err", err)
		w.Queue.AddRateLimited(key)
		w.Metrics.observe(w.Name, "error", time.Since(start))
	default:
		slog.Warn("sync failed too often, dropping key until its next change", "controller", w.Name, "key", key, "err", err)
		w.Queue.Forget(key)
		w.Metrics.observe(w.Name, "dropped", time.Since(start))
	}
	return true
}
