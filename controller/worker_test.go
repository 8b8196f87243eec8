package controller

import (
	"context"
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
			Sync: func(_ context.Context, key string) error {
				if !synced.Load() {
					t.Error("a key synced before the caches")
				}
				record("sync " + key)
				return nil
			},
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
	Workers{Name: "test", Queue: queue, Sync: func(context.Context, string) error { return nil },
		Synced: []func() bool{func() bool { return false }},
		Ready:  func() { t.Error("Ready ran") }}.Run(ctx)
	if !queue.ShuttingDown() {
		t.Error("queue not shut down")
	}
}

// TestRunEvery: a pass at once after the sync, then one per period, until ctx ends.
func TestRunEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var passes atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunEvery(ctx, 10*time.Millisecond, []func() bool{func() bool { return true }}, func(context.Context) {
			if passes.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("RunEvery did not return after ctx ended")
	}
	if n := passes.Load(); n != 3 {
		t.Errorf("%d passes", n)
	}
}
