package testserver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
)

// StartControllers builds the controllers of entries on a new Context over c (with the
// default Config) and runs them, workers goroutines each, until the test ends.
func StartControllers(t testing.TB, c *client.Client, workers int, entries ...controller.Entry) {
	t.Helper()
	cctx, err := controller.NewContext(c, controller.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrls := make([]controller.Controller, 0, len(entries))
	for _, e := range entries {
		ctrl, err := e.New(cctx)
		if err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		ctrls = append(ctrls, ctrl)
	}
	RunControllers(t, cctx, workers, ctrls...)
}

// RunControllers runs controllers built on cctx as the controller manager would (shared
// informers started, event recorder running, each controller with workers goroutines) until
// stop is called or the test ends; stop returns once everything started here has ended.
func RunControllers(t testing.TB, cctx *controller.Context, workers int, ctrls ...controller.Controller) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	cctx.Informers.Start(ctx)
	wg.Go(func() { cctx.Recorder.Run(ctx) })
	for _, ctrl := range ctrls {
		wg.Go(func() {
			if err := ctrl.Run(ctx, workers); err != nil {
				t.Errorf("%s: %v", ctrl.Name(), err)
			}
		})
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			cctx.Informers.Shutdown()
		})
	}
	t.Cleanup(stop)
	return stop
}

// Eventually polls cond every 20 ms until it holds, failing the test after timeout.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
