package runner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The tests check which calls happen and in what order, never how long they took: every
// interval is either tiny (so it surely passes) or an hour (so it surely does not).

const quiet = 50 * time.Millisecond // how long "no further call" is watched

func TestRunner(t *testing.T) {
	fail := errors.New("failed")
	for _, tc := range []struct {
		name            string
		min, retry, max time.Duration
		results         []any // what call i returns: nil, an error, or "panic"
		before          int   // Run() calls before Loop starts
		duringFirst     int   // Run() calls while the first call runs
		duringPause     int   // Run() calls during the pause after the first call
		calls           int   // the calls expected
		atLeast         bool  // calls is a minimum (periodic calls go on)
	}{
		{name: "nothing requested, no max: no call", calls: 0},
		{name: "requests before the loop coalesce", before: 5, calls: 1},
		{name: "requests during a call coalesce into one more", before: 1, duringFirst: 5, calls: 2},
		{name: "requests during the min pause coalesce into one more", min: 20 * time.Millisecond, before: 1, duringPause: 3, calls: 2},
		{name: "the min interval holds a request back", min: time.Hour, before: 1, duringFirst: 1, calls: 1},
		{name: "max interval calls unasked", max: time.Millisecond, calls: 3, atLeast: true},
		{name: "a failure is retried", retry: time.Millisecond, results: []any{fail}, before: 1, calls: 2},
		{name: "retried until it succeeds", retry: time.Millisecond, results: []any{fail, fail, fail}, before: 1, calls: 4},
		{name: "a panic is a failure", retry: time.Millisecond, results: []any{"panic"}, before: 1, calls: 2},
		{name: "no retry interval: no retry", results: []any{fail}, before: 1, calls: 1},
		{name: "max sooner than retry", retry: time.Hour, max: time.Millisecond, results: []any{fail}, before: 1, calls: 3, atLeast: true},
		{name: "retry sooner than max", retry: time.Millisecond, max: time.Hour, results: []any{fail}, before: 1, calls: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			firstRunning := make(chan struct{})
			releaseFirst := make(chan struct{})
			r := New("test", func(ctx context.Context) error {
				n := calls.Add(1)
				if n == 1 {
					close(firstRunning)
					<-releaseFirst
				}
				if int(n) <= len(tc.results) {
					switch res := tc.results[n-1].(type) {
					case error:
						return res
					case string:
						panic(res)
					}
				}
				return nil
			}, tc.min, tc.retry, tc.max)
			var pauses sync.Once
			r.minWaits = func() {
				pauses.Do(func() {
					for range tc.duringPause {
						r.Run()
					}
				})
			}
			for range tc.before {
				r.Run()
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { r.Loop(ctx); close(done) }()
			defer func() {
				cancel()
				select {
				case <-firstRunning:
				default:
					close(releaseFirst) // the first call never came: nothing waits on it
				}
				<-done
			}()
			if tc.calls > 0 {
				<-firstRunning
				for range tc.duringFirst {
					r.Run()
				}
				close(releaseFirst)
			}
			deadline := time.Now().Add(10 * time.Second)
			for int(calls.Load()) < tc.calls {
				if time.Now().After(deadline) {
					t.Fatalf("%d calls after 10s, want %d", calls.Load(), tc.calls)
				}
				time.Sleep(time.Millisecond)
			}
			if tc.atLeast {
				return
			}
			time.Sleep(quiet)
			if got := int(calls.Load()); got != tc.calls {
				t.Fatalf("%d calls, want %d", got, tc.calls)
			}
		})
	}
}

// TestLoopEndsWithItsContext: in a call (which sees the cancellation), in the min pause, and
// while waiting.
func TestLoopEndsWithItsContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		min  time.Duration
		// block: the call waits for its context.
		block bool
	}{
		{name: "waiting"},
		{name: "in a call", block: true},
		{name: "in the min pause", min: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := make(chan struct{}, 1)
			r := New("test", func(ctx context.Context) error {
				called <- struct{}{}
				if tc.block {
					<-ctx.Done()
				}
				return ctx.Err()
			}, tc.min, 0, 0)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { r.Loop(ctx); close(done) }()
			if tc.block || tc.min > 0 {
				r.Run()
				<-called
			}
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Loop did not end after cancel")
			}
		})
	}
}
