package cache

import (
	"context"
	"sync"
	"time"
)

type notificationKind int

const (
	added notificationKind = iota
	updated
	deleted
)

type notification[T Object] struct {
	kind     notificationKind
	old, obj T
	initial  bool // an add of the initial list
	unknown  bool // a deletion whose final state is unknown
}

// listener runs one handler on its own goroutine, fed through an unbounded buffer so that the
// informer never waits for it.
type listener[T Object] struct {
	h      Handler[T]
	resync time.Duration
	// nextResync and resyncing belong to the informer's lock.
	nextResync time.Time
	resyncing  bool

	mu             sync.Mutex
	pending        []notification[T]
	initialPending int // initial-list adds not yet handled
	wake           chan struct{}
	quit           chan struct{}
	stopOnce       sync.Once
}

func newListener[T Object](h Handler[T], resync time.Duration) *listener[T] {
	return &listener[T]{h: h, resync: resync, wake: make(chan struct{}, 1), quit: make(chan struct{})}
}

// push queues a notification; it never blocks.
func (l *listener[T]) push(n notification[T]) {
	l.mu.Lock()
	l.pending = append(l.pending, n)
	if n.initial {
		l.initialPending++
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *listener[T]) initialDone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.initialPending == 0
}

func (l *listener[T]) stop() { l.stopOnce.Do(func() { close(l.quit) }) }

// start runs the handler loop until ctx ends or stop is called; wg (if any) tracks it.
func (l *listener[T]) start(ctx context.Context, wg *sync.WaitGroup) {
	if wg != nil {
		wg.Add(1)
	}
	go func() {
		if wg != nil {
			defer wg.Done()
		}
		for {
			l.mu.Lock()
			if len(l.pending) == 0 {
				l.pending = nil // let a burst's backing array go
				l.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-l.quit:
					return
				case <-l.wake:
				}
				continue
			}
			n := l.pending[0]
			l.pending[0] = notification[T]{}
			l.pending = l.pending[1:]
			l.mu.Unlock()
			select {
			case <-l.quit:
				return
			default:
			}
			l.handle(n)
			if n.initial {
				l.mu.Lock()
				l.initialPending--
				l.mu.Unlock()
			}
		}
	}()
}

func (l *listener[T]) handle(n notification[T]) {
	switch n.kind {
	case added:
		if l.h.OnAdd != nil {
			l.h.OnAdd(n.obj, n.initial)
		}
	case updated:
		if l.h.OnUpdate != nil {
			l.h.OnUpdate(n.old, n.obj)
		}
	case deleted:
		if l.h.OnDelete != nil {
			l.h.OnDelete(n.obj, n.unknown)
		}
	}
}
