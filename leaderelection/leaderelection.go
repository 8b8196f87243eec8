// Package leaderelection elects one leader among replicas of a component through a
// coordination.k8s.io/v1 Lease, the way Kubernetes components do, so kplane and Kubernetes
// replicas see the same lock.
//
// The holder renews the Lease every RetryPeriod. A candidate takes the Lease over when it has
// seen the same record unchanged for LeaseDuration, measured on its own clock (never by
// comparing the record's timestamps with its clock, so clock skew between machines does not
// matter). A leader that cannot renew within RenewDeadline stops leading.
package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kplane/kplane/client"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config describes one candidate.
type Config struct {
	Client    *client.Client
	Namespace string
	Name      string
	// Identity names this candidate in the Lease's holderIdentity; it must be unique.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod have Kubernetes' meanings and defaults
	// (15 s, 10 s, 2 s): how long a silent holder keeps the Lease, how long a leader tries to
	// renew before giving up, and how often candidates and the leader act.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ReleaseOnCancel gives the Lease up when ctx is cancelled, so that another candidate
	// need not wait for it to expire.
	ReleaseOnCancel bool
}

// Defaults returns c with zero durations set to Kubernetes' defaults.
func (c Config) Defaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 15 * time.Second
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = 10 * time.Second
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = 2 * time.Second
	}
	return c
}

// Validate checks the durations' order, as Kubernetes does: a leader must give up before
// others may take over, and must try more than once before giving up.
func (c Config) Validate() error {
	switch {
	case c.Name == "" || c.Namespace == "":
		return errors.New("leader election: the lease needs a namespace and a name")
	case c.Identity == "":
		return errors.New("leader election: the identity must not be empty")
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("leader election: lease duration (%v) must be greater than the renew deadline (%v)", c.LeaseDuration, c.RenewDeadline)
	case float64(c.RenewDeadline) <= 1.2*float64(c.RetryPeriod):
		return fmt.Errorf("leader election: renew deadline (%v) must be greater than 1.2 × the retry period (%v)", c.RenewDeadline, c.RetryPeriod)
	case c.RetryPeriod <= 0:
		return errors.New("leader election: the retry period must be positive")
	}
	return nil
}

// errConflict: another writer changed the Lease between our read and our write; the next
// attempt decides with the new record.
var errConflict = errors.New("the lease changed while we wrote it")

// ErrLost is returned by Run when this candidate led and then lost the Lease.
var ErrLost = errors.New("leader election lost")

// Elector is one candidate. Run campaigns; Healthy and IsLeader report on it.
type Elector struct {
	cfg    Config
	leases *client.Typed[*coordinationv1.Lease]

	mu           sync.Mutex
	observed     coordinationv1.LeaseSpec // the last record seen
	observedRV   string
	observedTime time.Time // when the record last changed, by our clock
	leading      bool
	lastRenew    time.Time
}

// New returns a candidate for cfg (with defaults filled in), or why cfg is invalid.
func New(cfg Config) (*Elector, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Elector{cfg: cfg, leases: client.Resource[*coordinationv1.Lease](cfg.Client, "leases").Namespace(cfg.Namespace)}, nil
}

// IsLeader reports whether this candidate holds the Lease now.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// Healthy fails when this candidate leads but has not renewed for longer than the lease
// duration plus tolerance: it would then be acting while another may lead.
func (e *Elector) Healthy(tolerance time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leading && time.Since(e.lastRenew) > e.cfg.LeaseDuration+tolerance {
		return fmt.Errorf("leader election: lease not renewed for %v", time.Since(e.lastRenew).Round(time.Second))
	}
	return nil
}

// Run campaigns until it holds the Lease, then calls lead with a context that is cancelled
// when leadership is lost or ctx is cancelled, and keeps renewing. It returns nil once ctx is
// cancelled and lead has returned; ErrLost if the Lease was lost while leading.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context)) error {
	if !e.acquire(ctx) {
		return nil
	}
	leadCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(leadCtx)
	}()
	err := e.renew(leadCtx)
	stop()
	<-done
	e.mu.Lock()
	e.leading = false
	e.mu.Unlock()
	if ctx.Err() != nil {
		if e.cfg.ReleaseOnCancel {
			e.release()
		}
		return nil
	}
	return err
}

// acquire tries every RetryPeriod (with jitter) until it holds the Lease or ctx ends.
func (e *Elector) acquire(ctx context.Context) bool {
	logged := false
	for {
		ok, err := e.tryAcquireOrRenew(ctx)
		if ok {
			slog.Info("became leader", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
			return true
		}
		if err != nil && !errors.Is(err, errConflict) && ctx.Err() == nil {
			slog.Warn("leader election: could not read or write the lease", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "err", err)
		} else if !logged && ctx.Err() == nil {
			e.mu.Lock()
			holder := e.observed.HolderIdentity
			e.mu.Unlock()
			slog.Info("waiting to become leader", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "holder", deref(holder))
			logged = true
		}
		if !sleep(ctx, jitter(e.cfg.RetryPeriod)) {
			return false
		}
	}
}

// renew renews every RetryPeriod; it returns ErrLost when a renewal has not succeeded
// within RenewDeadline, and nil when ctx ends.
func (e *Elector) renew(ctx context.Context) error {
	for {
		if !sleep(ctx, e.cfg.RetryPeriod) {
			return nil
		}
		deadline, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
		renewed := false
		for !renewed && deadline.Err() == nil {
			ok, err := e.tryAcquireOrRenew(deadline)
			if ok {
				renewed = true
				break
			}
			if err != nil && !errors.Is(err, errConflict) && deadline.Err() == nil {
				slog.Warn("leader election: renewal failed", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "err", err)
			}
			if !ok && err == nil {
				break // someone else holds it now
			}
			sleep(deadline, e.cfg.RetryPeriod/4)
		}
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if !renewed {
			slog.Error("leader election lost", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
			return ErrLost
		}
	}
}

// tryAcquireOrRenew makes one attempt to take or keep the Lease. It returns true when this
// candidate holds it afterwards; false with a nil error when another holder's Lease is valid.
func (e *Elector) tryAcquireOrRenew(ctx context.Context) (bool, error) {
	now := metav1.NewMicroTime(time.Now())
	duration := int32(e.cfg.LeaseDuration / time.Second)
	lease, err := e.leases.Get(ctx, e.cfg.Name)
	if client.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &e.cfg.Identity, LeaseDurationSeconds: &duration,
				AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr(int32(0))},
		}
		created, err := e.leases.Create(ctx, lease)
		if err != nil {
			return false, err
		}
		e.observe(created, true)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	e.observe(lease, false)
	e.mu.Lock()
	mine := deref(lease.Spec.HolderIdentity) == e.cfg.Identity
	heldByOther := !mine && deref(lease.Spec.HolderIdentity) != "" &&
		time.Since(e.observedTime) < time.Duration(deref(lease.Spec.LeaseDurationSeconds))*time.Second
	e.mu.Unlock()
	if heldByOther {
		return false, nil
	}
	next := lease.DeepCopy()
	next.Spec.HolderIdentity = &e.cfg.Identity
	next.Spec.LeaseDurationSeconds = &duration
	next.Spec.RenewTime = &now
	if !mine {
		next.Spec.AcquireTime = &now
		next.Spec.LeaseTransitions = ptr(deref(lease.Spec.LeaseTransitions) + 1)
	}
	// The update carries the resourceVersion read above: if another candidate wrote in
	// between, it fails with a conflict and this attempt loses.
	updated, err := e.leases.Update(ctx, next)
	if err != nil {
		if client.IsConflict(err) {
			return false, errConflict
		}
		return false, err
	}
	e.observe(updated, true)
	return true, nil
}

// observe records the Lease as last seen; ours says whether we just wrote it.
func (e *Elector) observe(lease *coordinationv1.Lease, ours bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if lease.ResourceVersion != e.observedRV {
		e.observed, e.observedRV, e.observedTime = lease.Spec, lease.ResourceVersion, time.Now()
	}
	if ours {
		e.leading, e.lastRenew = true, time.Now()
	}
}

// release gives up the Lease if we still hold it, so others may take it at once.
func (e *Elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	lease, err := e.leases.Get(ctx, e.cfg.Name)
	if err != nil || deref(lease.Spec.HolderIdentity) != e.cfg.Identity {
		return
	}
	next := lease.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	next.Spec.HolderIdentity = nil
	next.Spec.LeaseDurationSeconds = ptr(int32(1))
	next.Spec.RenewTime, next.Spec.AcquireTime = &now, &now
	if _, err := e.leases.Update(ctx, next); err != nil {
		slog.Warn("leader election: could not release the lease", "err", err)
		return
	}
	slog.Info("released the lease", "lease", e.cfg.Namespace+"/"+e.cfg.Name)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter spreads candidates' attempts over [d, 1.2·d).
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Float64()*0.2*float64(d))
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
