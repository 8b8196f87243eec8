package cache

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// DeltaType says what happened to an object.
type DeltaType string

// The kinds of Delta.
const (
	// Added: the object was created (a watch ADDED event).
	Added DeltaType = "Added"
	// Updated: the object changed (a watch MODIFIED event).
	Updated DeltaType = "Updated"
	// Deleted: the object is gone. Object is its final state, or with FinalStateUnknown set the
	// last state this side knew.
	Deleted DeltaType = "Deleted"
	// Replaced: the object was in a full list (the initial list or a relist after a broken
	// watch); it may or may not have changed since it was last seen.
	Replaced DeltaType = "Replaced"
	// Sync: a periodic resync re-delivers an object already known, unchanged.
	Sync DeltaType = "Sync"
)

// Delta is one change to one object.
type Delta[T Object] struct {
	Type DeltaType
	// Object is the state after the change; for Deleted, the state just before it. It is never
	// the zero T (nil), and it is shared: it must not be mutated.
	Object T
	// FinalStateUnknown marks a Deleted delta produced by Replace for an object that vanished
	// while the watch was disconnected; Object is the last state known (Kubernetes'
	// DeletedFinalStateUnknown), possibly stale.
	FinalStateUnknown bool
}

// KnownObjects is the consumer's view of what it already holds — in an informer, its Indexer.
// DeltaFIFO reads it to find deletions missed during a disconnect (Replace), to skip deletions
// of objects nobody knows (Delete), and to re-deliver everything known (Resync).
type KnownObjects[T Object] interface {
	ListKeys() []string
	Get(key string) (T, bool)
}

// ErrFIFOClosed is returned by Pop once the queue is closed and empty.
var ErrFIFOClosed = errors.New("cache: DeltaFIFO closed")

// DeltaFIFO is the queue between a reflector (the producer: Add, Update, Delete, Replace,
// Resync) and an informer's process loop (the consumer: Pop). For each object key it
// accumulates the deltas that arrived since the key was last popped, so the consumer sees every
// change once, in order, and a deletion even if the watch missed it. Keys are popped in the order
// they joined the queue; deltas for a key already queued join it in its place.
//
// Its behaviour matches client-go's DeltaFIFO built with EmitDeltaTypeReplaced, MetaNamespaceKeyFunc
// and an indexer as KnownObjects, with these differences: keys that Replace and Resync queue
// for known objects are queued in sorted order (client-go uses the known store's iteration order,
// which is random), objects without a name are refused, Replace queues no object-less tombstone
// for a known key that vanishes from the known store during the call, and there is no key
// function, transformer, Bookmark or AddIfNotPresent.
//
// All methods are safe for concurrent use. The zero value is not usable; call NewDeltaFIFO.
type DeltaFIFO[T Object] struct {
	mu   sync.Mutex
	cond sync.Cond // signalled, with mu, when a key is queued or the FIFO is closed

	// items holds each queued key's deltas, oldest first, never empty; queue holds the same
	// keys in pop order, each once.
	items map[string][]Delta[T]
	queue []string

	known KnownObjects[T]

	// populated: the first Add, Update, Delete or Replace has happened. initialCount: how many
	// more pops finish the first Replace's batch. synced latches populated && initialCount == 0.
	populated    bool
	initialCount int
	synced       bool
	syncedCh     chan struct{}

	closed bool
}

// NewDeltaFIFO returns an empty, open DeltaFIFO. known is the consumer's store (normally the
// Indexer the process loop writes); it may be nil, which makes it behave as an empty store. The
// process function given to Pop runs under the FIFO's lock, so a consumer that updates known
// there keeps it consistent with the queue.
func NewDeltaFIFO[T Object](known KnownObjects[T]) *DeltaFIFO[T] {
	f := &DeltaFIFO[T]{
		items:    map[string][]Delta[T]{},
		known:    known,
		syncedCh: make(chan struct{}),
	}
	f.cond.L = &f.mu
	return f
}

func validate[T Object](obj T) error {
	if obj.GetName() == "" {
		return fmt.Errorf("cache: %T in namespace %q has no name", obj, obj.GetNamespace())
	}
	return nil
}

// Add queues an Added delta for obj. The only error is for an object without a name.
func (f *DeltaFIFO[T]) Add(obj T) error { return f.enqueue(Added, obj) }

// Update queues an Updated delta for obj. The only error is for an object without a name.
func (f *DeltaFIFO[T]) Update(obj T) error { return f.enqueue(Updated, obj) }

func (f *DeltaFIFO[T]) enqueue(t DeltaType, obj T) error {
	if err := validate(obj); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.markPopulated()
	f.queueLocked(MetaNamespaceKey(obj), Delta[T]{Type: t, Object: obj})
	return nil
}

// Delete queues a Deleted delta for obj, unless obj's key is neither in known nor queued: then
// the deletion was already reported (by a Replace, typically) and Delete does nothing. The only
// error is for an object without a name.
func (f *DeltaFIFO[T]) Delete(obj T) error {
	if err := validate(obj); err != nil {
		return err
	}
	key := MetaNamespaceKey(obj)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.markPopulated()
	if _, queued := f.items[key]; !queued && !f.isKnown(key) {
		return nil
	}
	f.queueLocked(key, Delta[T]{Type: Deleted, Object: obj})
	return nil
}

func (f *DeltaFIFO[T]) isKnown(key string) bool {
	if f.known == nil {
		return false
	}
	_, ok := f.known.Get(key)
	return ok
}

// Replace reports a full list (the reflector's list, at resourceVersion, which is unused here):
// a Replaced delta for each object of list, in list order, then a Deleted delta with
// FinalStateUnknown for every key that is queued or known but absent from list — an object
// deleted while the watch was down. The first Replace, if it comes before any Add, Update or
// Delete, defines the initial batch that HasSynced waits for. The only error is for an object
// without a name, and then nothing is queued.
func (f *DeltaFIFO[T]) Replace(list []T, resourceVersion string) error {
	for _, obj := range list {
		if err := validate(obj); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()

	listed := make(map[string]struct{}, len(list))
	for _, obj := range list {
		key := MetaNamespaceKey(obj)
		listed[key] = struct{}{}
		f.queueLocked(key, Delta[T]{Type: Replaced, Object: obj})
	}

	deletions := 0
	// Queued keys not listed: their newest delta holds the last state seen. These keys are
	// already in the queue, so map order does not affect pop order.
	for key, deltas := range f.items {
		if _, ok := listed[key]; ok {
			continue
		}
		last := deltas[len(deltas)-1].Object
		f.queueLocked(key, Delta[T]{Type: Deleted, Object: last, FinalStateUnknown: true})
		deletions++
	}
	// Known keys neither listed nor queued (the loop above queued every other unlisted one).
	if f.known != nil {
		var gone []string
		for _, key := range f.known.ListKeys() {
			if _, ok := listed[key]; ok {
				continue
			}
			if _, queued := f.items[key]; queued {
				continue
			}
			gone = append(gone, key)
		}
		slices.Sort(gone) // a deterministic pop order; the known store's order is arbitrary
		for _, key := range gone {
			// A key listed but no longer gettable was removed from known by someone else since
			// ListKeys: that removal already accounts for the object, so there is nothing to report
			// (client-go queues a tombstone without an object instead).
			if last, ok := f.known.Get(key); ok {
				f.queueLocked(key, Delta[T]{Type: Deleted, Object: last, FinalStateUnknown: true})
				deletions++
			}
		}
	}

	if !f.populated {
		f.populated = true
		f.initialCount = len(listed) + deletions
		f.checkSynced()
	}
	return nil
}

// Resync queues a Sync delta, with the object from known, for every key in known that has no
// deltas queued — a queued delta is newer than known's copy, which must not overtake it. Keys
// are queued in sorted order. It never fails; the error is for the reflector's store interface.
func (f *DeltaFIFO[T]) Resync() error {
	if f.known == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for _, key := range f.known.ListKeys() {
		if _, queued := f.items[key]; !queued {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		if obj, ok := f.known.Get(key); ok {
			f.queueLocked(key, Delta[T]{Type: Sync, Object: obj})
		}
	}
	return nil
}

// queueLocked appends d to key's deltas, queueing key if it is new. Two Deleted deltas in a row
// say the same thing; only one is kept, preferring a real final state over FinalStateUnknown
// and, between equals, the earlier one.
func (f *DeltaFIFO[T]) queueLocked(key string, d Delta[T]) {
	deltas, queued := f.items[key]
	if !queued {
		f.items[key] = []Delta[T]{d}
		f.queue = append(f.queue, key)
		f.cond.Signal()
		return
	}
	if n := len(deltas); d.Type == Deleted && deltas[n-1].Type == Deleted {
		if deltas[n-1].FinalStateUnknown {
			deltas[n-1] = d
		}
		return
	}
	f.items[key] = append(deltas, d)
}

func (f *DeltaFIFO[T]) markPopulated() {
	f.populated = true
	f.checkSynced()
}

func (f *DeltaFIFO[T]) checkSynced() {
	if !f.synced && f.populated && f.initialCount == 0 {
		f.synced = true
		close(f.syncedCh)
	}
}

// Pop waits until a key is queued or the FIFO is closed. It removes the oldest key with all its
// deltas (oldest first) and calls process with them and whether they belong to the initial list
// (popped before HasSynced became true), then returns process's error. The deltas are handed
// over exactly once: they are not queued again whatever process returns. On a closed FIFO Pop
// still returns queued keys, and ErrFIFOClosed once there are none.
//
// process runs with the FIFO locked, so that updating the consumer's store (known) there is
// atomic with the pop: producers block meanwhile, so process should be quick, and it must not
// call the FIFO's methods (they would deadlock). Concurrent Pops each get different keys, but
// their process calls are serialized by the lock.
func (f *DeltaFIFO[T]) Pop(process func(key string, deltas []Delta[T], isInInitialList bool) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.queue) == 0 {
		if f.closed {
			return ErrFIFOClosed
		}
		f.cond.Wait()
	}
	inInitialList := !f.synced
	key := f.queue[0]
	f.queue[0] = "" // let the string be collected while the backing array lives on
	f.queue = f.queue[1:]
	deltas := f.items[key]
	delete(f.items, key)
	if f.initialCount > 0 {
		f.initialCount--
		f.checkSynced()
	}
	return process(key, deltas, inInitialList)
}

// Close closes the FIFO: Pops blocked on an empty queue return ErrFIFOClosed. Producers may
// still queue deltas, and Pop still returns them. Closing twice is harmless.
func (f *DeltaFIFO[T]) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cond.Broadcast()
}

// IsClosed reports whether Close has been called.
func (f *DeltaFIFO[T]) IsClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// HasSynced reports whether the initial list has been delivered: true once an Add, Update or
// Delete came first, or once every key of the first Replace (its listed keys and its deletions)
// has been popped. It never turns false again.
func (f *DeltaFIFO[T]) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

// Synced returns a channel that is closed when HasSynced becomes true, for waiting without polling.
func (f *DeltaFIFO[T]) Synced() <-chan struct{} {
	return f.syncedCh
}

// Len returns the number of keys queued.
func (f *DeltaFIFO[T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}

// ListKeys returns the queued keys in the order Pop will return them.
func (f *DeltaFIFO[T]) ListKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.queue)
}
