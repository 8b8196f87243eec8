package workqueue

import "sync"

// Item states. An item with neither bit set has no entry in Queue.state. An item is in the fifo
// exactly when it is dirty and not processing: a dirty item that is being processed waits for its
// Done before it goes back in line.
const (
	dirty      uint8 = 1 << iota // added and not yet handed out since
	processing                   // handed out by Get, Done not yet called
)

// Queue is a FIFO work queue of distinct items. It is safe for concurrent use; the zero value is
// not usable, build one with New.
type Queue[T comparable] struct {
	mu    sync.Mutex
	ready sync.Cond // an item went into the fifo, or shutdown began
	idle  sync.Cond // the last held item was Done, or a drain was cancelled

	items fifo[T]
	state map[T]uint8 // one map for both sets, so each operation costs one lookup
	held  int         // items in the processing state

	shuttingDown bool
	draining     bool
	stopped      chan struct{}  // closed when shutdown begins; background goroutines watch it
	background   sync.WaitGroup // goroutines that ShutDown waits for; each returns once stopped closes

	clock   Clock
	metrics *queueMetrics[T] // nil for an unnamed queue
}

// New returns an empty queue. Options: WithName (metrics), WithClock, WithMetrics.
func New[T comparable](opts ...Option) *Queue[T] {
	return newQueue[T](buildOptions(opts))
}

func newQueue[T comparable](o options) *Queue[T] {
	q := &Queue[T]{
		state:   map[T]uint8{},
		stopped: make(chan struct{}),
		clock:   o.clock,
		metrics: newQueueMetrics[T](o),
	}
	q.ready.L = &q.mu
	q.idle.L = &q.mu
	if q.metrics != nil {
		q.goBackground(q.updateUnfinishedLoop)
	}
	return q
}

// goBackground runs f in a goroutine that ShutDown and ShutDownWithDrain wait for; f returns once
// q.stopped is closed. (Not WaitGroup.Go: a goroutine that has not run yet would then show only
// sync frames in a stack dump, and the tests find the queue's goroutines by their frames.)
func (q *Queue[T]) goBackground(f func()) {
	q.background.Add(1)
	go func() {
		defer q.background.Done()
		f()
	}()
}

// Add marks item as needing processing. If item is already waiting, Add does nothing (the two
// adds collapse into one); if item is being processed, it is handed out again after its Done.
// After shutdown has begun, Add does nothing.
func (q *Queue[T]) Add(item T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	s := q.state[item]
	if s&dirty != 0 {
		return
	}
	q.state[item] = s | dirty
	q.metrics.add(item)
	if s&processing == 0 {
		q.items.push(item)
		q.ready.Signal()
	}
}

// Get blocks until an item is waiting, hands out the oldest and marks it as being processed; the
// caller must call Done with it when finished. Once shutdown has begun, Get keeps handing out
// waiting items, and when none is left it returns the zero value and shutdown=true at once; the
// worker should then return.
func (q *Queue[T]) Get() (item T, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.items.len() == 0 && !q.shuttingDown {
		q.ready.Wait()
	}
	if q.items.len() == 0 {
		return item, true
	}
	item = q.items.pop()
	q.state[item] = processing
	q.held++
	q.metrics.get(item)
	return item, false
}

// Done marks the end of processing an item returned by Get. If the item was added again in the
// meantime, it goes to the back of the line now. Done for an item that is not being processed does
// nothing.
func (q *Queue[T]) Done(item T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.state[item]
	if s&processing == 0 {
		return
	}
	q.held--
	q.metrics.done(item)
	if s&dirty != 0 {
		q.state[item] = dirty
		q.items.push(item)
		q.ready.Signal()
	} else {
		delete(q.state, item)
	}
	if q.held == 0 && q.draining {
		q.idle.Broadcast()
	}
}

// Len returns the number of items waiting to be handed out, not counting items that were added
// again while being processed. It is for monitoring: by the time the caller looks, it may be stale.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.items.len()
}

// ShutDown begins shutdown: from now on Add is ignored and Get returns shutdown=true once no item
// waits. It does not wait for workers, but it returns only after the queue's own goroutines have
// ended. It may be called more than once, and it makes a concurrent ShutDownWithDrain stop waiting.
func (q *Queue[T]) ShutDown() {
	q.mu.Lock()
	q.beginShutdown(false)
	q.mu.Unlock()
	q.background.Wait()
}

// ShutDownWithDrain is ShutDown, and then waits until every item handed out by Get has been
// given back with Done (items still waiting are not waited for, though Get keeps handing them out).
// It blocks forever if a worker never calls Done, unless ShutDown is called meanwhile.
func (q *Queue[T]) ShutDownWithDrain() {
	q.mu.Lock()
	q.beginShutdown(true)
	for q.held > 0 && q.draining {
		q.idle.Wait()
	}
	q.mu.Unlock()
	q.background.Wait()
}

// beginShutdown runs under q.mu.
func (q *Queue[T]) beginShutdown(drain bool) {
	if !q.shuttingDown {
		q.shuttingDown = true
		close(q.stopped)
	}
	q.draining = drain
	q.ready.Broadcast() // idle workers must see shutdown
	q.idle.Broadcast()  // a draining caller must see a plain ShutDown
}

// ShuttingDown reports whether shutdown has begun.
func (q *Queue[T]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}

// updateUnfinishedLoop refreshes the unfinished-work gauges of a named queue until shutdown.
func (q *Queue[T]) updateUnfinishedLoop() {
	t := q.clock.NewTimer(unfinishedWorkPeriod)
	defer t.Stop()
	for {
		select {
		case <-q.stopped:
			return
		case <-t.C():
			q.mu.Lock()
			q.metrics.updateUnfinished()
			q.mu.Unlock()
			t.Reset(unfinishedWorkPeriod)
		}
	}
}
