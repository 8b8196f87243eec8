package workqueue

import (
	"sync"
	"time"
)

// DelayingQueue is a Queue that can also add an item after a delay. All delayed items share one
// goroutine and one timer, armed for the earliest of them.
type DelayingQueue[T comparable] struct {
	*Queue[T]

	waitMu  sync.Mutex // guards waiting; taken before the queue's own lock, never after
	waiting delayHeap[T]
	wake    chan struct{} // capacity 1: the earliest ready time moved earlier, re-arm the timer
}

// NewDelaying returns an empty delaying queue. Options are those of New.
func NewDelaying[T comparable](opts ...Option) *DelayingQueue[T] {
	return newDelaying[T](buildOptions(opts))
}

func newDelaying[T comparable](o options) *DelayingQueue[T] {
	q := &DelayingQueue[T]{
		Queue:   newQueue[T](o),
		waiting: delayHeap[T]{index: map[T]int{}},
		wake:    make(chan struct{}, 1),
	}
	q.goBackground(q.waitLoop)
	return q
}

// AddAfter adds item once d has passed; with d <= 0 it adds item at once. If item is already
// waiting for its delay, it keeps the earlier of the two ready times (one pending delayed add per
// item). After shutdown has begun, AddAfter does nothing, and delayed items not yet added are
// dropped.
func (q *DelayingQueue[T]) AddAfter(item T, d time.Duration) {
	if q.ShuttingDown() {
		return
	}
	q.metrics.retry()
	if d <= 0 {
		q.Add(item)
		return
	}
	q.waitMu.Lock()
	first := q.waiting.push(item, q.clock.Now().Add(d))
	q.waitMu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default: // a wake-up is already pending; the loop will look at the heap anyway
		}
	}
}

// waitLoop moves items whose time has come into the queue, then sleeps until the next one is due,
// an earlier one arrives, or the queue shuts down.
func (q *DelayingQueue[T]) waitLoop() {
	var timer Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := q.clock.Now()
		// Adding under waitMu means that whoever sees the heap without due entries also sees them
		// queued, and costs AddAfter callers at most one batch of Adds.
		q.waitMu.Lock()
		q.waiting.popUntil(now, q.Add)
		next, pending := q.waiting.peek()
		q.waitMu.Unlock()

		var fire <-chan time.Time
		if pending {
			if timer == nil {
				timer = q.clock.NewTimer(next.Sub(now))
			} else {
				timer.Reset(next.Sub(now))
			}
			fire = timer.C()
		} else if timer != nil {
			timer.Stop()
		}
		select {
		case <-q.stopped:
			return
		case <-q.wake:
		case <-fire:
		}
	}
}

// delayHeap is a min-heap of items by ready time, with at most one entry per item. Entries with
// the same ready time come out in the order they went in, which keeps tests deterministic.
type delayHeap[T comparable] struct {
	entries []delayEntry[T]
	index   map[T]int // item -> position in entries
	seq     uint64
}

type delayEntry[T comparable] struct {
	item    T
	readyAt time.Time
	seq     uint64
}

func (h *delayHeap[T]) less(i, j int) bool {
	a, b := &h.entries[i], &h.entries[j]
	if !a.readyAt.Equal(b.readyAt) {
		return a.readyAt.Before(b.readyAt)
	}
	return a.seq < b.seq
}

func (h *delayHeap[T]) swap(i, j int) {
	h.entries[i], h.entries[j] = h.entries[j], h.entries[i]
	h.index[h.entries[i].item] = i
	h.index[h.entries[j].item] = j
}

// push schedules item at readyAt, or moves an existing entry earlier (never later). It reports
// whether item is now the earliest entry, which is when the timer must be re-armed.
func (h *delayHeap[T]) push(item T, readyAt time.Time) bool {
	if i, ok := h.index[item]; ok {
		if !readyAt.Before(h.entries[i].readyAt) {
			return false
		}
		h.entries[i].readyAt = readyAt
		return h.up(i) == 0
	}
	h.seq++
	h.entries = append(h.entries, delayEntry[T]{item: item, readyAt: readyAt, seq: h.seq})
	i := len(h.entries) - 1
	h.index[item] = i
	return h.up(i) == 0
}

// peek returns the earliest ready time, if any entry exists.
func (h *delayHeap[T]) peek() (time.Time, bool) {
	if len(h.entries) == 0 {
		return time.Time{}, false
	}
	return h.entries[0].readyAt, true
}

// popUntil removes every entry ready at or before now and passes their items to add, earliest
// first.
func (h *delayHeap[T]) popUntil(now time.Time, add func(T)) {
	for len(h.entries) > 0 && !h.entries[0].readyAt.After(now) {
		last := len(h.entries) - 1
		h.swap(0, last)
		e := h.entries[last]
		h.entries[last] = delayEntry[T]{}
		h.entries = h.entries[:last]
		delete(h.index, e.item)
		h.down(0)
		add(e.item)
	}
}

func (h *delayHeap[T]) up(i int) int {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h.swap(i, parent)
		i = parent
	}
	return i
}

func (h *delayHeap[T]) down(i int) {
	n := len(h.entries)
	for {
		smallest := i
		if l := 2*i + 1; l < n && h.less(l, smallest) {
			smallest = l
		}
		if r := 2*i + 2; r < n && h.less(r, smallest) {
			smallest = r
		}
		if smallest == i {
			return
		}
		h.swap(i, smallest)
		i = smallest
	}
}
