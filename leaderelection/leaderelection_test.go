package leaderelection_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/leaderelection"
	coordinationv1 "k8s.io/api/coordination/v1"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

// candidate runs one elector in the background and reports whether it leads.
type candidate struct {
	elector *leaderelection.Elector
	leading atomic.Bool
	cancel  context.CancelFunc
	result  chan error
}

func newCandidate(t *testing.T, ns, id string, release bool) *candidate {
	t.Helper()
	e, err := leaderelection.New(leaderelection.Config{
		Client: c, Namespace: ns, Name: "lock", Identity: id, ReleaseOnCancel: release,
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cd := &candidate{elector: e, cancel: cancel, result: make(chan error, 1)}
	go func() {
		cd.result <- e.Run(ctx, func(ctx context.Context) {
			cd.leading.Store(true)
			<-ctx.Done()
			cd.leading.Store(false)
		})
	}()
	t.Cleanup(func() { cancel(); <-cd.result })
	return cd
}

func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func holder(t *testing.T, ns string) string {
	t.Helper()
	l, err := client.Resource[*coordinationv1.Lease](c, "leases").Namespace(ns).Get(context.Background(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func TestOneLeadsAndTheOtherTakesOverWhenItDies(t *testing.T) {
	ns := testserver.Namespace(t, c, "election-")
	a := newCandidate(t, ns, "a", false)
	waitFor(t, "a to lead", a.leading.Load)
	b := newCandidate(t, ns, "b", false)
	time.Sleep(500 * time.Millisecond)
	if b.leading.Load() || !a.leading.Load() {
		t.Fatalf("both or neither lead: a=%v b=%v", a.leading.Load(), b.leading.Load())
	}
	// a dies without releasing: b must wait for the lease to expire, and no longer than that
	// plus a retry or two.
	a.cancel()
	if err := <-a.result; err != nil {
		t.Fatalf("a's Run after cancel: %v", err)
	}
	a.result <- nil // for the cleanup
	took := waitFor(t, "b to take over", b.leading.Load)
	if took < time.Second || took > 4*time.Second {
		t.Errorf("b took over after %v; the lease lasts 2s", took)
	}
	if got := holder(t, ns); got != "b" {
		t.Errorf("holder %q, want b", got)
	}
}

func TestReleaseOnCancelHandsOverAtOnce(t *testing.T) {
	ns := testserver.Namespace(t, c, "election-")
	a := newCandidate(t, ns, "a", true)
	waitFor(t, "a to lead", a.leading.Load)
	b := newCandidate(t, ns, "b", false)
	a.cancel()
	<-a.result
	a.result <- nil
	if took := waitFor(t, "b to take over", b.leading.Load); took > time.Second {
		t.Errorf("b took over after %v; a released the lease", took)
	}
}

func TestLeaderThatLosesTheLeaseStops(t *testing.T) {
	ns := testserver.Namespace(t, c, "election-")
	a := newCandidate(t, ns, "a", false)
	waitFor(t, "a to lead", a.leading.Load)
	// Someone else takes the lease over behind a's back.
	leases := client.Resource[*coordinationv1.Lease](c, "leases").Namespace(ns)
	l, err := leases.Get(context.Background(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	other := "intruder"
	l.Spec.HolderIdentity = &other
	if _, err := leases.Update(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.result:
		if !errors.Is(err, leaderelection.ErrLost) {
			t.Fatalf("Run returned %v, want ErrLost", err)
		}
		a.result <- nil
	case <-time.After(5 * time.Second):
		t.Fatal("the leader kept running after losing its lease")
	}
	if a.leading.Load() {
		t.Error("the lead function still runs")
	}
}

func TestInvalidDurations(t *testing.T) {
	for _, cfg := range []leaderelection.Config{
		{Namespace: "x", Name: "y", Identity: "z", LeaseDuration: time.Second, RenewDeadline: 2 * time.Second},
		{Namespace: "x", Name: "y", Identity: "z", RenewDeadline: time.Second, RetryPeriod: time.Second},
		{Namespace: "x", Name: "y"},
		{Name: "y", Identity: "z"},
	} {
		if _, err := leaderelection.New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
