package osthread

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNeverOnMainThread runs many functions with one P, where the main thread is free to pick
// up any goroutine: none runs there, and all finish (no goroutine bounces on the main thread).
func TestNeverOnMainThread(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 2000
	before := movedOffMain.Load()
	var onMain atomic.Int32
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		Go(func() {
			defer wg.Done()
			if unix.Gettid() == unix.Getpid() {
				onMain.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not all functions ran within 30 s")
	}
	if c := onMain.Load(); c > 0 {
		t.Errorf("%d functions ran on the main thread", c)
	}
	// With one P the main thread runs most new goroutines: the move is what is tested here.
	if moved := movedOffMain.Load() - before; moved == 0 {
		t.Errorf("no start found itself on the main thread: the move was not exercised")
	} else {
		t.Logf("%d of %d starts were moved off the main thread", moved, n)
	}
}
