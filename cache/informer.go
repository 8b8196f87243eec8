package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kplane/kplane/client"
)

// Handler receives an informer's notifications. Any field may be nil.
type Handler[T Object] struct {
	// OnAdd: a new object; isInInitialList tells the initial state from later creations.
	OnAdd func(obj T, isInInitialList bool)
	// OnUpdate: a changed object (also a resync, with old and obj the same state).
	OnUpdate func(old, obj T)
	// OnDelete: a deleted object's last state; finalStateUnknown when the deletion happened
	// while the informer was disconnected and obj is the last state it had seen.
	OnDelete func(obj T, finalStateUnknown bool)
}

// Informer keeps an Indexer equal to the server's state of one resource and tells every
// registered handler about each change, in order. Each handler has its own unbounded buffer and
// goroutine, so a slow handler delays no one else.
type Informer[T Object] struct {
	name      string
	indexer   *Indexer[T]
	fifo      *DeltaFIFO[T]
	reflector *Reflector[T]

	mu        sync.Mutex // guards listeners, ctx, stopped; held while a delta is processed
	listeners []*listener[T]
	ctx       context.Context
	stopped   bool
	handlers  sync.WaitGroup // every listener goroutine
	poke      chan struct{}  // wakes the resync loop when handlers change
}

// InformerOption configures an Informer.
type InformerOption[T Object] func(*Informer[T])

// WithTransform replaces the default transform (dropping managedFields, which controllers never
// read and which make up much of an object's size). It runs as objects arrive, before they are
// queued or stored. It may set fields of the object (obj.Spec.X = nil) but must not change the
// contents of its slices, maps or pointees, which can be shared with other objects (see the
// package documentation).
func WithTransform[T Object](f func(T) T) InformerOption[T] {
	return func(i *Informer[T]) { i.reflector.Transform = f }
}

// WithIndexers adds indexers besides the namespace index.
func WithIndexers[T Object](ix Indexers[T]) InformerOption[T] {
	return func(i *Informer[T]) {
		if err := i.indexer.AddIndexers(ix); err != nil {
			panic(err) // a name clash is a programming error, found when the informer is made
		}
	}
}

// WithSelectors narrows the informer to objects matching label and field selectors.
func WithSelectors[T Object](label, field string) InformerOption[T] {
	return func(i *Informer[T]) { i.reflector.LabelSelector, i.reflector.FieldSelector = label, field }
}

// NewInformer makes an informer over lw; name labels its logs. Run starts it.
func NewInformer[T Object](name string, lw ListerWatcher[T], opts ...InformerOption[T]) *Informer[T] {
	i := &Informer[T]{
		name:    name,
		indexer: NewIndexer(Indexers[T]{NamespaceIndex: MetaNamespaceIndexFunc[T]}),
		poke:    make(chan struct{}, 1),
	}
	i.fifo = NewDeltaFIFO[T](i.indexer)
	i.reflector = NewReflector(name, lw, i.fifo)
	i.reflector.SharedParts = &client.SharedParts{}
	i.reflector.Transform = func(obj T) T {
		obj.SetManagedFields(nil)
		return obj
	}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Indexer is the informer's store; its objects are shared, with each other too (see the package
// documentation), and must not be modified.
func (i *Informer[T]) Indexer() *Indexer[T] { return i.indexer }

// Lister reads the informer's store.
func (i *Informer[T]) Lister() Lister[T] { return Lister[T]{indexer: i.indexer} }

// HasSynced reports whether the initial list has been stored.
func (i *Informer[T]) HasSynced() bool { return i.fifo.HasSynced() }

// LastSyncResourceVersion is the newest resourceVersion the informer has seen.
func (i *Informer[T]) LastSyncResourceVersion() string { return i.reflector.LastSyncResourceVersion() }

// Run lists, watches and dispatches until ctx is cancelled; it returns when every goroutine it
// started has ended. Run must be called once.
func (i *Informer[T]) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	i.mu.Lock()
	i.ctx = ctx
	for _, l := range i.listeners {
		l.start(ctx, &i.handlers)
	}
	i.mu.Unlock()
	wg.Add(2)
	go func() {
		defer wg.Done()
		i.reflector.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		i.resyncLoop(ctx)
	}()
	go func() {
		<-ctx.Done()
		i.fifo.Close()
	}()
	for {
		err := i.fifo.Pop(i.process)
		if errors.Is(err, ErrFIFOClosed) {
			break
		}
	}
	cancel()
	i.mu.Lock()
	i.stopped = true
	for _, l := range i.listeners {
		l.stop()
	}
	i.mu.Unlock()
	wg.Wait()
	i.handlers.Wait()
}

// process stores one key's deltas and notifies the handlers; it runs under the FIFO's lock,
// so the store and the handlers' view change together.
func (i *Informer[T]) process(_ string, deltas []Delta[T], isInInitialList bool) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, d := range deltas {
		obj := d.Object
		old, exists := i.indexer.Get(MetaNamespaceKey(obj))
		switch {
		case d.Type == Deleted:
			i.indexer.Delete(obj)
			i.notify(notification[T]{kind: deleted, obj: obj, unknown: d.FinalStateUnknown}, false)
		case exists:
			i.indexer.Update(obj)
			// A relist's Replaced of an unchanged object is no news: like a Sync, only
			// handlers that asked for resyncs hear of it.
			unchanged := d.Type == Sync || (d.Type == Replaced && old.GetResourceVersion() == obj.GetResourceVersion())
			i.notify(notification[T]{kind: updated, old: old, obj: obj}, unchanged)
		default:
			i.indexer.Add(obj)
			i.notify(notification[T]{kind: added, obj: obj, initial: isInInitialList}, false)
		}
	}
	return nil
}

func (i *Informer[T]) notify(n notification[T], resync bool) {
	for _, l := range i.listeners {
		if !resync || l.resyncing {
			l.push(n)
		}
	}
}

// Registration is a handler's registration.
type Registration struct {
	hasSynced func() bool
	remove    func()
}

// HasSynced reports whether the handler has been told the whole initial state.
func (r Registration) HasSynced() bool { return r.hasSynced() }

// Remove unregisters the handler; it receives nothing after Remove returns, except what its
// goroutine is running already.
func (r Registration) Remove() { r.remove() }

// AddHandler registers h. A handler added after the informer started is first told the current
// state (as adds in the initial list). resync > 0 also delivers every object as an update that
// often. After Run has returned a handler is never run, and its registration never syncs.
func (i *Informer[T]) AddHandler(h Handler[T], resync time.Duration) Registration {
	l := newListener(h, resync)
	i.mu.Lock()
	if i.stopped {
		// Nothing will run it: a registration that never syncs.
		i.mu.Unlock()
		return Registration{hasSynced: func() bool { return false }, remove: func() {}}
	}
	i.listeners = append(i.listeners, l)
	if i.ctx != nil {
		// Started: the store is the state so far; the deltas after it follow under this lock.
		for _, obj := range i.indexer.List() {
			l.push(notification[T]{kind: added, obj: obj, initial: true})
		}
		l.start(i.ctx, &i.handlers)
	}
	i.mu.Unlock()
	select {
	case i.poke <- struct{}{}:
	default:
	}
	return Registration{
		hasSynced: func() bool { return i.fifo.HasSynced() && l.initialDone() },
		remove: func() {
			i.mu.Lock()
			defer i.mu.Unlock()
			for k, x := range i.listeners {
				if x == l {
					i.listeners = append(i.listeners[:k:k], i.listeners[k+1:]...)
				}
			}
			l.stop()
		},
	}
}

// resyncLoop asks the FIFO for a resync whenever some handler's resync period has passed; only
// the handlers that are due receive the Sync deltas as updates.
func (i *Informer[T]) resyncLoop(ctx context.Context) {
	for {
		i.mu.Lock()
		now := time.Now()
		var next time.Time
		for _, l := range i.listeners {
			if l.resync <= 0 {
				continue
			}
			if l.nextResync.IsZero() {
				l.nextResync = now.Add(l.resync)
			}
			if next.IsZero() || l.nextResync.Before(next) {
				next = l.nextResync
			}
		}
		i.mu.Unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-i.poke:
			t.Stop()
			continue
		case <-t.C:
		}
		i.mu.Lock()
		now = time.Now()
		due := false
		for _, l := range i.listeners {
			l.resyncing = l.resync > 0 && !now.Before(l.nextResync)
			if l.resyncing {
				l.nextResync = now.Add(l.resync)
				due = true
			}
		}
		i.mu.Unlock()
		if due {
			_ = i.fifo.Resync()
		}
	}
}
