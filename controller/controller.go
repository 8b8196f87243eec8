// Package controller holds what every controller of the controller manager shares: the
// Controller interface, the Context a controller is built from, the registry Entry that names
// it with its Options (flags, defaults, validation), and the Loop builder. The worker pool
// (package reconcile), the event recorder (events) and leader election (leaderelection) live
// outside it, for every role to use.
//
// A controller is a sync function over keys plus its event wiring, declared on a Loop:
//
//	l := controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentSyncs))
//	controller.For(l, jobs)               // a Job changed: sync it
//	controller.Owns(l, pods, jobKind)      // one of its pods changed: sync the Job
//	...
//	l.Run(ctx, c.sync)                     // in Run: workers call sync for each key
//
// A sync returns reconcile.After(d) to look at a key again later without calling it a failure.
// Controllers that act on every served resource of some shape (the garbage collector, the
// quota controller) keep their per-resource handlers in a Discovered set, in step with
// ServedResources.
package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/reconcile"
	"github.com/kplane/kplane/workqueue"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
)

// Controller is one control loop. Run starts its workers and blocks until ctx is cancelled
// (returning nil) or the controller cannot go on (returning why). The manager has started
// the shared informers by the time Run is called; Run waits for the caches it needs.
type Controller interface {
	Name() string
	Run(ctx context.Context) error
}

// Options are one controller's settings: its flags (Kubernetes' names), their defaults (in
// the value its Entry's Options returns) and their validation.
type Options interface {
	AddFlags(fs *pflag.FlagSet)
	// Validate reports every invalid setting, naming its flag.
	Validate() []error
}

// NoOptions are the settings of a controller without any.
type NoOptions struct{}

func (NoOptions) AddFlags(*pflag.FlagSet) {}
func (NoOptions) Validate() []error       { return nil }

// Context is what a controller is built from: a client, the shared informers, where to
// record events and metrics, and the settings every controller shares (the manager's
// generic flags).
type Context struct {
	Client    *client.Client
	Informers *cache.Factory
	Recorder  *events.Recorder
	// Registry is the controller manager's metrics registry; QueueMetrics is the workqueue
	// metric set registered in it, for every queue to share (workqueue.WithMetrics).
	Registry     prometheus.Registerer
	QueueMetrics *workqueue.Metrics
	// Syncs counts every controller's syncs (see reconcile.Workers).
	Syncs *reconcile.SyncMetrics
	// MinResyncPeriod: informer handlers resync at a random period in [min, 2·min)
	// (--min-resync-period, default 12h).
	MinResyncPeriod time.Duration
	// RootCAFile is the CA bundle published as kube-root-ca.crt and put into token Secrets
	// (--root-ca-file); empty: the one the manager's own kubeconfig trusts.
	RootCAFile string
}

// DefaultMinResyncPeriod is --min-resync-period's default, seed 000's.
const DefaultMinResyncPeriod = 12 * time.Hour

// RootCA is the CA bundle the controller manager hands out (in kube-root-ca.crt and token
// Secrets): --root-ca-file, else the CA the manager's own kubeconfig trusts (maybe none).
func (c *Context) RootCA() ([]byte, error) {
	if f := c.RootCAFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--root-ca-file: %w", err)
		}
		return data, nil
	}
	return c.Client.CAData(), nil
}

// ResyncPeriod returns a handler resync period in [MinResyncPeriod, 2·MinResyncPeriod), so
// that controllers' resyncs do not all fall at the same moment.
func (c *Context) ResyncPeriod() time.Duration {
	min := c.MinResyncPeriod
	if min <= 0 {
		min = DefaultMinResyncPeriod
	}
	return time.Duration(float64(min) * (1 + rand.Float64()))
}

// Entry registers one controller with the manager.
type Entry struct {
	// Name is what --controllers selects and what /healthz/<name> reports.
	Name string
	// Aliases are other names --controllers accepts for it (kube-controller-manager's older,
	// shorter ones).
	Aliases []string
	// Disabled controllers run only when --controllers names them.
	Disabled bool
	// Options returns the controller's settings at their defaults; the manager binds them to
	// its flags, validates them and hands them to New.
	Options func() Options
	// New builds the controller with the settings Options returned (after the flags); it
	// registers its informers and handlers here, before the manager starts the shared
	// informers. A nil Controller without error means the settings turn it off (the token
	// controller without a signing key). Make it with Build.
	New func(*Context, Options) (Controller, error)
}

// Build adapts a constructor taking the controller's own Options type to Entry.New.
func Build[O Options, C Controller](f func(*Context, O) (C, error)) func(*Context, Options) (Controller, error) {
	return func(ctx *Context, o Options) (Controller, error) {
		opts, ok := o.(O)
		if !ok {
			return nil, fmt.Errorf("settings of type %T, want %T", o, *new(O))
		}
		c, err := f(ctx, opts)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// Start builds the controller of e on ctx with its default settings.
func (e Entry) Start(ctx *Context) (Controller, error) { return e.New(ctx, e.Options()) }

// NewContext builds a Context over c: a shared informer factory for all namespaces, an event
// recorder, and metrics registered in reg (a fresh registry when nil). The caller starts
// ctx.Informers and ctx.Recorder once the controllers are built.
func NewContext(c *client.Client, reg prometheus.Registerer) (*Context, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	qm, err := workqueue.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	sm, err := reconcile.NewSyncMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Context{
		Client:       c,
		Informers:    cache.NewFactory(c, ""),
		Recorder:     events.NewRecorder(c),
		Registry:     reg,
		QueueMetrics: qm,
		Syncs:        sm,
	}, nil
}
