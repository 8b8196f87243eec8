// Package controller holds what every controller of the controller manager shares: the
// Controller interface, the Context a controller is built from, the registry Entry that names
// it, and the worker loop over a rate-limited queue. The event recorder (package events) and
// leader election (package leaderelection) live outside it, for every role to use.
//
// A controller is a sync function over keys plus its event wiring: informer handlers turn
// changes into queue keys, and Workers.Run, once the caches have synced, calls sync for each key
// on N goroutines.
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
	"github.com/kplane/kplane/workqueue"
	"github.com/prometheus/client_golang/prometheus"
)

// Controller is one control loop. Run starts its workers and blocks until ctx is cancelled
// (returning nil) or the controller cannot go on (returning why). The manager has started
// the shared informers by the time Run is called; Run waits for the caches it needs.
type Controller interface {
	Name() string
	Run(ctx context.Context, workers int) error
}

// Config is the tuning every controller may read, with the controller manager's flags as
// its source. Zero values mean the Kubernetes defaults (see Defaults).
type Config struct {
	// ConcurrentEndpointSyncs: workers of the endpoints controller (default 5).
	ConcurrentEndpointSyncs int
	// ConcurrentServiceEndpointSyncs: workers of the EndpointSlice controller (default 5).
	ConcurrentServiceEndpointSyncs int
	// MaxEndpointsPerSlice: endpoints in one EndpointSlice, 1–1000 (default 100).
	MaxEndpointsPerSlice int
	// EndpointUpdatesBatchPeriod delays the endpoints controller's sync after a pod change,
	// so bursts of changes become one write (default 0: no delay).
	EndpointUpdatesBatchPeriod time.Duration
	// EndpointSliceUpdatesBatchPeriod does the same for the EndpointSlice controller.
	EndpointSliceUpdatesBatchPeriod time.Duration
	// MinResyncPeriod: informer handlers resync at a random period in [min, 2·min) (default 12h).
	MinResyncPeriod time.Duration
	// ConcurrentNamespaceSyncs: workers of the namespace controller (default 10).
	ConcurrentNamespaceSyncs int
	// NamespaceSyncPeriod: how often every namespace is looked at again (default 5m).
	NamespaceSyncPeriod time.Duration
	// TerminatedPodGCThreshold: terminated pods kept before the pod garbage collector deletes
	// the oldest (default 12500; negative: never, which --terminated-pod-gc-threshold=0 sets).
	TerminatedPodGCThreshold int
	// PodGCPeriod: how often the pod garbage collector looks at every pod (default 20s).
	PodGCPeriod time.Duration
	// PodGCQuarantine: how long a node must stay missing before its pods are deleted
	// (default 40s), so that a node registering a moment late does not lose its pods.
	PodGCQuarantine time.Duration
	// ConcurrentReplicaSetSyncs: workers of the ReplicaSet controller (default 5).
	ConcurrentReplicaSetSyncs int
	// ConcurrentRCSyncs: workers of the ReplicationController controller (default 5).
	ConcurrentRCSyncs int
	// ConcurrentDeploymentSyncs: workers of the Deployment controller (default 5).
	ConcurrentDeploymentSyncs int
	// NodeMonitorGracePeriod: how long a node may go without a heartbeat (Lease renewal or
	// Ready condition update) before it is marked unreachable (default 50s, as in v1.36).
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod: how often the node lifecycle controller looks at every node (default 5s).
	NodeMonitorPeriod time.Duration
	// PodEvictionTimeout: how long pods that do not tolerate the unreachable or not-ready taint
	// stay on such a node before they are evicted (default 5m, seed 000's).
	PodEvictionTimeout time.Duration
	// ServiceAccountKeyFile is the PEM private key the token controller signs the tokens of
	// kubernetes.io/service-account-token Secrets with; empty turns that controller off.
	ServiceAccountKeyFile string
	// RootCAFile is the CA bundle published as kube-root-ca.crt and put into token Secrets;
	// empty: the one the manager's own kubeconfig trusts.
	RootCAFile string
	// ConcurrentSATokenSyncs: workers of the token controller (default 5).
	ConcurrentSATokenSyncs int
	// PVClaimBinderSyncPeriod: how often the PersistentVolume binder looks at every volume and
	// claim again (default 15s).
	PVClaimBinderSyncPeriod time.Duration
}

// Defaults returns c with every zero field set to Kubernetes' default.
func (c Config) Defaults() Config {
	if c.ConcurrentEndpointSyncs == 0 {
		c.ConcurrentEndpointSyncs = 5
	}
	if c.ConcurrentServiceEndpointSyncs == 0 {
		c.ConcurrentServiceEndpointSyncs = 5
	}
	if c.MaxEndpointsPerSlice == 0 {
		c.MaxEndpointsPerSlice = 100
	}
	if c.MinResyncPeriod == 0 {
		c.MinResyncPeriod = 12 * time.Hour
	}
	if c.ConcurrentNamespaceSyncs == 0 {
		c.ConcurrentNamespaceSyncs = 10
	}
	if c.NamespaceSyncPeriod == 0 {
		c.NamespaceSyncPeriod = 5 * time.Minute
	}
	if c.TerminatedPodGCThreshold == 0 {
		c.TerminatedPodGCThreshold = 12500
	}
	if c.PodGCPeriod == 0 {
		c.PodGCPeriod = 20 * time.Second
	}
	if c.PodGCQuarantine == 0 {
		c.PodGCQuarantine = 40 * time.Second
	}
	if c.ConcurrentReplicaSetSyncs == 0 {
		c.ConcurrentReplicaSetSyncs = 5
	}
	if c.ConcurrentRCSyncs == 0 {
		c.ConcurrentRCSyncs = 5
	}
	if c.ConcurrentDeploymentSyncs == 0 {
		c.ConcurrentDeploymentSyncs = 5
	}
	if c.NodeMonitorGracePeriod == 0 {
		c.NodeMonitorGracePeriod = 50 * time.Second
	}
	if c.NodeMonitorPeriod == 0 {
		c.NodeMonitorPeriod = 5 * time.Second
	}
	if c.PodEvictionTimeout == 0 {
		c.PodEvictionTimeout = 5 * time.Minute
	}
	if c.ConcurrentSATokenSyncs == 0 {
		c.ConcurrentSATokenSyncs = 5
	}
	if c.PVClaimBinderSyncPeriod == 0 {
		c.PVClaimBinderSyncPeriod = 15 * time.Second
	}
	return c
}

// Context is what a controller is built from: a client, the shared informers, where to
// record events and metrics, and the tuning.
type Context struct {
	Client    *client.Client
	Informers *cache.Factory
	Recorder  *events.Recorder
	// Registry is the controller manager's metrics registry; QueueMetrics is the workqueue
	// metric set registered in it, for every queue to share (workqueue.WithMetrics).
	Registry     prometheus.Registerer
	QueueMetrics *workqueue.Metrics
	// Syncs counts every controller's syncs (see Workers).
	Syncs  *SyncMetrics
	Config Config
}

// RootCA is the CA bundle the controller manager hands out (in kube-root-ca.crt and token
// Secrets): --root-ca-file, else the CA the manager's own kubeconfig trusts (maybe none).
func (c *Context) RootCA() ([]byte, error) {
	if f := c.Config.RootCAFile; f != "" {
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
	min := c.Config.Defaults().MinResyncPeriod
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
	// Workers returns the number of sync goroutines from the configuration.
	Workers func(Config) int
	// New builds the controller; it registers its informers and handlers here, before the
	// manager starts the shared informers. A nil Controller without error means the
	// configuration turns it off (the token controller without a signing key).
	New func(*Context) (Controller, error)
}

// NewContext builds a Context over c: a shared informer factory for all namespaces, an event
// recorder, and metrics registered in reg (a fresh registry when nil). The caller starts
// ctx.Informers and ctx.Recorder once the controllers are built.
func NewContext(c *client.Client, cfg Config, reg prometheus.Registerer) (*Context, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	qm, err := workqueue.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	sm, err := NewSyncMetrics(reg)
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
		Config:       cfg.Defaults(),
	}, nil
}
