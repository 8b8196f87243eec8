package workqueue

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock whose time moves only when the test calls step.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

type fakeTimer struct {
	clock *fakeClock
	c     chan time.Time // capacity 1, emptied on every Reset and Stop
	at    time.Time
	armed bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clock: c, c: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// step moves time forward by d and fires the timers that have come due.
func (c *fakeClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

func (c *fakeClock) fireLocked() {
	for _, t := range c.timers {
		if t.armed && !t.at.After(c.now) {
			t.armed = false
			t.c <- c.now // never blocks: the channel was emptied when the timer was armed
		}
	}
}

// armedAt reports whether some timer is armed to fire exactly at at.
func (c *fakeClock) armedAt(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if t.armed && t.at.Equal(at) {
			return true
		}
	}
	return false
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	t.drainLocked()
	t.at, t.armed = c.now.Add(d), true
	c.fireLocked()
}

func (t *fakeTimer) Stop() {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	t.armed = false
	t.drainLocked()
}

func (t *fakeTimer) drainLocked() {
	select {
	case <-t.c:
	default:
	}
}

// eventually polls cond until it holds, failing the test after a few seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// stillBlocked reports whether done stays open for a short while: long enough that a goroutine
// that could proceed would have done so on a loaded machine, short enough to keep the suite fast.
func stillBlocked(done <-chan struct{}) bool {
	select {
	case <-done:
		return false
	case <-time.After(30 * time.Millisecond):
		return true
	}
}

// queueGoroutines returns the stacks of the live goroutines that this package's non-test code
// started. Counting those, rather than runtime.NumGoroutine, keeps the runtime's and other tests'
// goroutines out of the count.
func queueGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "kplane/workqueue.") && !strings.Contains(g, "kplane/workqueue.Test") &&
			!strings.Contains(g, "testing.") {
			ours = append(ours, g)
		}
	}
	return ours
}

// noQueueGoroutines waits until queueGoroutines is empty: a goroutine that has called
// WaitGroup.Done may take a moment to be gone.
func noQueueGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := queueGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(time.Millisecond)
	}
}
