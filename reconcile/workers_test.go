package reconcile

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplane/kplane/workqueue"
)

// TestWorkersWaitForSync: nothing is synced before the caches are; Ready runs once, before the
// first sync; Run returns, with the queue shut down, once ctx is cancelled.
func TestWorkersWaitForSync(t *testing.T) {
	queue := workqueue.NewRateLimited[string](workqueue.DefaultControllerRateLimiter[string]())
	var synced atomic.Bool
	var mu sync.Mutex
	var order []string
	record := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	queue.Add("key")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Workers{Name: "test", Queue: queue, Count: 2,
			Sync: Ignore(func(_ context.Context, key string) error {
				if !synced.Load() {
					t.Error("a key synced before the caches")
				}
				record("sync " + key)
				return nil
			}),
			Synced: []func() bool{synced.Load},
			Ready:  func() { record("ready") },
		}.Run(ctx)
	}()
	time.Sleep(50 * time.Millisecond)
	synced.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(order)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order so far: %v", order)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if order[0] != "ready" || order[1] != "sync key" {
		t.Errorf("order %v, want ready then the sync", order)
	}
	if !queue.ShuttingDown() {
		t.Error("queue not shut down")
	}
}

// TestWorkersCancelledBeforeSync: Run returns at once, with the queue shut down, when ctx ends
// before the caches sync.
func TestWorkersCancelledBeforeSync(t *testing.T) {
	queue := workqueue.NewRateLimited[string](workqueue.DefaultControllerRateLimiter[string]())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Workers{Name: "test", Queue: queue, Sync: Ignore(func(context.Context, string) error { return nil }),
		Synced: []func() bool{func() bool { return false }},
		Ready:  func() { t.Error("Ready ran") }}.Run(ctx)
	if !queue.ShuttingDown() {
		t.Error("queue not shut down")
	}
}

// TestResultAfter: a sync asking for After is called again after that long, its key's
// failure count untouched; a failing sync is retried with the rate limiter, and its Result
// is ignored.
func TestResultAfter(t *testing.T) {
	queue := workqueue.NewRateLimited[string](workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond))
	var mu sync.Mutex
	var calls []time.Time
	var requeues []int
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Workers{Name: "test", Queue: queue, Sync: func(_ context.Context, key string) (Result, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, time.Now())
			requeues = append(requeues, queue.NumRequeues(key))
			switch len(calls) {
			case 1:
				return After(100 * time.Millisecond), nil
			case 2:
				return After(time.Hour), errors.New("failed")
			default:
				cancel()
				return Result{}, nil
			}
		}}.Run(ctx)
	}()
	queue.Add("key")
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the key was not synced three times")
	}
	mu.Lock()
	defer mu.Unlock()
	if d := calls[1].Sub(calls[0]); d < 100*time.Millisecond {
		t.Errorf("second sync %v after the first, want at least 100ms", d)
	}
	if d := calls[2].Sub(calls[1]); d > time.Second {
		t.Errorf("the failed sync was retried after %v: its After was not ignored", d)
	}
	if want := []int{0, 0, 1}; !slices.Equal(requeues, want) {
		t.Errorf("requeue counts %v, want %v (After is not a failure)", requeues, want)
	}
}
