// Package runner runs a function at a bounded frequency: on request, but not more often than a
// minimum interval; at least every maximum interval; and again after a retry interval when it
// fails. The proxy syncs its data path with it.
package runner

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// Runner calls a function from one goroutine (Loop).
type Runner struct {
	name            string
	fn              func(context.Context) error
	min, retry, max time.Duration
	requests        chan struct{} // one slot: requests made while one is pending coalesce
	minWaits        func()        // test hook: the pause after a call begins
}

// New makes a runner of fn named name (for logs). After each call Loop waits minInterval
// (0: no wait) before the next one; a call happens maxInterval after the last one without any
// request (0: never), or retryInterval after a failed one (0: only when requested or at
// maxInterval), whichever is sooner.
func New(name string, fn func(context.Context) error, minInterval, retryInterval, maxInterval time.Duration) *Runner {
	return &Runner{name: name, fn: fn, min: max(minInterval, 0), retry: max(retryInterval, 0), max: max(maxInterval, 0),
		requests: make(chan struct{}, 1)}
}

// Run requests a call. It never blocks: requests made before the call starts are served by
// that one call.
func (r *Runner) Run() {
	select {
	case r.requests <- struct{}{}:
	default:
	}
}

// Loop calls the function as requested and as the intervals say until ctx is cancelled; the
// function gets ctx. A panic in the function counts as a failure (and is logged with its stack).
func (r *Runner) Loop(ctx context.Context) {
	next := time.NewTimer(time.Hour)
	defer next.Stop()
	r.schedule(next, r.max)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.requests:
		case <-next.C:
		}
		err := r.call(ctx)
		wait := r.max
		if err != nil {
			slog.Debug("runner: call failed", "runner", r.name, "err", err)
			if r.retry > 0 && (wait == 0 || r.retry < wait) {
				wait = r.retry
			}
		}
		r.schedule(next, wait)
		if r.min > 0 {
			if r.minWaits != nil {
				r.minWaits()
			}
			pause := time.NewTimer(r.min)
			select {
			case <-ctx.Done():
				pause.Stop()
				return
			case <-pause.C:
			}
		}
	}
}

// schedule sets next to fire after d, or stops it when d is 0.
func (r *Runner) schedule(next *time.Timer, d time.Duration) {
	next.Stop()
	if d > 0 {
		next.Reset(d)
	}
}

func (r *Runner) call(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("runner: call panicked", "runner", r.name, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.fn(ctx)
}
