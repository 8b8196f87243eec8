package controller

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

// Workers describes a controller's worker pool: Sync is called for each key taken from Queue
// by Count goroutines. A key whose sync fails is retried with the queue's rate limiter, up to
// MaxRetries times.
type Workers struct {
	Name    string
	Queue   *workqueue.RateLimitingQueue[string]
	Count   int
	Sync    func(ctx context.Context, key string) error
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
	err := w.Sync(ctx, key)
	switch {
	case err == nil:
		w.Queue.Forget(key)
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

// RunEvery waits for the caches (synced) to sync, then calls pass at once and every period (> 0)
// after until ctx is cancelled: the loop of controllers that look at everything in one pass.
func RunEvery(ctx context.Context, period time.Duration, synced []func() bool, pass func(context.Context)) {
	if !cache.WaitForCacheSync(ctx, synced...) {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
