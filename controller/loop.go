package controller

import (
	"context"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/reconcile"
	"github.com/kplane/kplane/workqueue"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Loop is one controller's control loop under construction, then running: a rate-limited
// queue of keys, the informer handlers that fill it (For, Owns, Map, Watch), the informers it
// reads without watching (Reads), passes over everything at a period (Every), and the workers
// that call the controller's sync for each key. Handlers are registered when declared, so
// a Loop is built in the controller's constructor, before the manager starts the informers;
// Run waits for every informer and handler to sync and removes the handlers when it returns.
type Loop struct {
	// Queue holds the keys to sync: handlers add to it; a sync may add other keys.
	Queue *workqueue.RateLimitingQueue[string]

	name     string
	workers  int
	resync   time.Duration
	metrics  *reconcile.SyncMetrics
	synced   []func() bool
	handlers []cache.Registration
	passes   []pass
	ready    func()
}

type pass struct {
	period time.Duration
	run    func(context.Context)
}

// LoopOption configures a Loop.
type LoopOption func(*loopOptions)

type loopOptions struct {
	queue   string
	limiter workqueue.RateLimiter[string]
	workers int
	resync  time.Duration
}

// WithWorkers sets how many keys are synced at once (default 1).
func WithWorkers(n int) LoopOption { return func(o *loopOptions) { o.workers = n } }

// WithQueueName names the queue in the workqueue metrics (default: the controller's name),
// for controllers whose queue Kubernetes names otherwise.
func WithQueueName(name string) LoopOption { return func(o *loopOptions) { o.queue = name } }

// WithRateLimiter replaces the retry pacing of failed keys (default: 5 ms doubling up to
// 1000 s per key, at most 10 retries a second after a burst of 100 overall).
func WithRateLimiter(l workqueue.RateLimiter[string]) LoopOption {
	return func(o *loopOptions) { o.limiter = l }
}

// WithResync makes For's handler see every object again at this period (0: never), so that
// a key whose sync gave up is looked at again even without a change.
func WithResync(d time.Duration) LoopOption { return func(o *loopOptions) { o.resync = d } }

// NewLoop starts building the loop of the controller name, with ctx's queue and sync metrics.
func NewLoop(ctx *Context, name string, opts ...LoopOption) *Loop {
	o := loopOptions{workers: 1, queue: name}
	for _, opt := range opts {
		opt(&o)
	}
	if o.limiter == nil {
		o.limiter = workqueue.DefaultControllerRateLimiter[string]()
	}
	l := &Loop{name: name, workers: o.workers, resync: o.resync}
	var qm *workqueue.Metrics
	if ctx != nil {
		qm, l.metrics = ctx.QueueMetrics, ctx.Syncs
	}
	l.Queue = workqueue.NewRateLimited(o.limiter, workqueue.WithName(o.queue), workqueue.WithMetrics(qm))
	return l
}

// Name is the loop's controller's name.
func (l *Loop) Name() string { return l.name }

// Watch registers h on inf with the given resync period: the general form of the handlers
// below, for controllers whose events do more than queue keys (expectations, delays).
func Watch[T cache.Object](l *Loop, inf *cache.Informer[T], h cache.Handler[T], resync time.Duration) {
	l.handlers = append(l.handlers, inf.AddHandler(h, resync))
}

// Reads makes Run wait for informers the controller reads through their listers but does
// not watch.
func (l *Loop) Reads(synced ...func() bool) { l.synced = append(l.synced, synced...) }

// For queues the namespace/name key of every object of inf that is added, changed or
// deleted: the loop's own kind.
func For[T cache.Object](l *Loop, inf *cache.Informer[T]) {
	mapKeys(l, inf, func(o T) []string { return []string{cache.MetaNamespaceKey(o)} }, l.resync)
}

// Map queues the keys keys returns for every object of inf that is added, changed (for the
// old and the new state) or deleted; no keys leaves the event out.
func Map[T cache.Object](l *Loop, inf *cache.Informer[T], keys func(T) []string) {
	mapKeys(l, inf, keys, 0)
}

func mapKeys[T cache.Object](l *Loop, inf *cache.Informer[T], keys func(T) []string, resync time.Duration) {
	add := func(o T) {
		for _, k := range keys(o) {
			l.Queue.Add(k)
		}
	}
	Watch(l, inf, cache.Handler[T]{
		OnAdd: func(o T, _ bool) { add(o) },
		OnUpdate: func(old, o T) {
			add(old) // the queue holds a key once: a key that did not change costs nothing
			add(o)
		},
		OnDelete: func(o T, _ bool) { add(o) },
	}, resync)
}

// Owns queues the key of the controlling owner of every object of inf that is added,
// changed or deleted, when that owner is of kind gvk: the objects the loop's kind makes. The
// owner's UID is not checked here: the sync reads the owner and finds it gone or replaced.
func Owns[T cache.Object](l *Loop, inf *cache.Informer[T], gvk schema.GroupVersionKind) {
	apiVersion := gvk.GroupVersion().String()
	Map(l, inf, func(o T) []string {
		ref := metav1.GetControllerOfNoCopy(o)
		if ref == nil || ref.Kind != gvk.Kind || ref.APIVersion != apiVersion {
			return nil
		}
		if ns := o.GetNamespace(); ns != "" {
			return []string{ns + "/" + ref.Name}
		}
		return []string{ref.Name}
	})
}

// Every runs f once the caches have synced and then every period (> 0) until Run returns:
// for controllers that look at everything in one pass.
func (l *Loop) Every(period time.Duration, f func(context.Context)) {
	l.passes = append(l.passes, pass{period, f})
}

// OnReady runs f once everything has synced, before the first sync or pass.
func (l *Loop) OnReady(f func()) { l.ready = f }

// Run waits for the caches and handlers to sync, then runs the workers over sync (nil for a
// loop of passes only) and the passes until ctx is cancelled; it returns once they have all
// stopped, with the queue shut down and the handlers removed.
func (l *Loop) Run(ctx context.Context, fn reconcile.Func) {
	if fn == nil {
		fn = func(context.Context, string) (reconcile.Result, error) { return reconcile.Result{}, nil }
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ready := l.ready
	l.ready = nil
	startPasses := func() {
		if ready != nil {
			ready()
		}
		for _, p := range l.passes {
			wg.Go(func() { every(ctx, p.period, p.run) })
		}
	}
	reconcile.Workers{Name: l.name, Queue: l.Queue, Count: l.workers, Sync: fn, Metrics: l.metrics,
		Synced: l.synced, Handlers: l.handlers, Ready: startPasses,
		Log: []any{"passes", len(l.passes)}}.Run(ctx)
}

func every(ctx context.Context, period time.Duration, f func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
