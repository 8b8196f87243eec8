// Package manager is the controller manager: it connects to an API server, elects a leader
// among its replicas, runs the registered controllers on shared informers while it leads,
// and serves health, metrics and profiling.
package manager

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/leaderelection"
	"github.com/spf13/pflag"
)

// Options are the controller manager's settings; DefaultOptions holds Kubernetes' defaults.
type Options struct {
	Kubeconfig string
	Master     string
	// BindAddress and SecurePort: where /healthz, /metrics and /debug/pprof are served
	// (plain HTTP; port 0 turns the server off).
	BindAddress string
	SecurePort  int
	Profiling   bool
	// Controllers selects controllers: "*" (every one enabled by default), "name", "-name".
	Controllers  []string
	KubeAPIQPS   float32
	KubeAPIBurst int
	Config       controller.Config
	LeaderElect  bool
	Election     leaderelection.Options
	// APIServerWait bounds the wait for the API server's /healthz before anything starts.
	APIServerWait time.Duration
}

// DefaultOptions returns the settings of kube-controller-manager v1.36 where they apply
// (seed 000's where those still hold: QPS 20, burst 30, MinResyncPeriod 12h).
func DefaultOptions() Options {
	return Options{
		BindAddress:   "127.0.0.1",
		SecurePort:    10257,
		Profiling:     true,
		Controllers:   []string{"*"},
		KubeAPIQPS:    20,
		KubeAPIBurst:  30,
		Config:        controller.Config{}.Defaults(),
		LeaderElect:   true,
		Election:      leaderelection.DefaultOptions("kube-controller-manager"),
		APIServerWait: 30 * time.Second,
	}
}

// AddFlags binds o's fields to Kubernetes' flag names.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the API server (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&o.Master, "master", o.Master, "API server address, overriding the kubeconfig's")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address of the health, metrics and profiling server")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "port of the health, metrics and profiling server (plain HTTP; 0 = off)")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "serve /debug/pprof")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, fmt.Sprintf("controllers to run: '*' for every default one, 'name' to add, '-name' to remove; known: %s", strings.Join(Names(), ", ")))
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "queries per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst of queries to the API server")
	fs.IntVar(&o.Config.ConcurrentEndpointSyncs, "concurrent-endpoint-syncs", o.Config.ConcurrentEndpointSyncs, "workers of the endpoints controller")
	fs.IntVar(&o.Config.ConcurrentServiceEndpointSyncs, "concurrent-service-endpoint-syncs", o.Config.ConcurrentServiceEndpointSyncs, "workers of the EndpointSlice controller (1–50)")
	fs.IntVar(&o.Config.MaxEndpointsPerSlice, "max-endpoints-per-slice", o.Config.MaxEndpointsPerSlice, "endpoints in one EndpointSlice (1–1000)")
	fs.DurationVar(&o.Config.EndpointUpdatesBatchPeriod, "endpoint-updates-batch-period", o.Config.EndpointUpdatesBatchPeriod, "delay before syncing a service after a pod change, to batch changes")
	fs.DurationVar(&o.Config.EndpointSliceUpdatesBatchPeriod, "endpointslice-updates-batch-period", o.Config.EndpointSliceUpdatesBatchPeriod, "delay before syncing a service's slices after a pod change")
	fs.DurationVar(&o.Config.MinResyncPeriod, "min-resync-period", o.Config.MinResyncPeriod, "informer resyncs happen at a random period between this and twice this")
	fs.IntVar(&o.Config.ConcurrentNamespaceSyncs, "concurrent-namespace-syncs", o.Config.ConcurrentNamespaceSyncs, "workers of the namespace controller")
	fs.DurationVar(&o.Config.NamespaceSyncPeriod, "namespace-sync-period", o.Config.NamespaceSyncPeriod, "how often the namespace controller looks at every namespace again")
	fs.IntVar(&o.Config.ConcurrentReplicaSetSyncs, "concurrent-replicaset-syncs", o.Config.ConcurrentReplicaSetSyncs, "workers of the ReplicaSet controller")
	fs.IntVar(&o.Config.ConcurrentRCSyncs, "concurrent-rc-syncs", o.Config.ConcurrentRCSyncs, "workers of the ReplicationController controller")
	fs.IntVar(&o.Config.ConcurrentDeploymentSyncs, "concurrent-deployment-syncs", o.Config.ConcurrentDeploymentSyncs, "workers of the Deployment controller")
	fs.Var(gcThreshold{&o.Config.TerminatedPodGCThreshold}, "terminated-pod-gc-threshold", "terminated pods kept before the pod garbage collector deletes the oldest (0 = never delete them)")
	fs.DurationVar(&o.Config.NodeMonitorGracePeriod, "node-monitor-grace-period", o.Config.NodeMonitorGracePeriod, "how long a node may go without a heartbeat before it is marked unreachable")
	fs.DurationVar(&o.Config.NodeMonitorPeriod, "node-monitor-period", o.Config.NodeMonitorPeriod, "how often the node lifecycle controller looks at every node")
	fs.StringVar(&o.Config.ServiceAccountKeyFile, "service-account-private-key-file", o.Config.ServiceAccountKeyFile, "PEM private key (RSA or ECDSA) that signs the tokens of service-account token Secrets; empty turns the token controller off")
	fs.StringVar(&o.Config.RootCAFile, "root-ca-file", o.Config.RootCAFile, "CA bundle published in every namespace's kube-root-ca.crt and put into service-account token Secrets (default: the kubeconfig's)")
	fs.IntVar(&o.Config.ConcurrentSATokenSyncs, "concurrent-serviceaccount-token-syncs", o.Config.ConcurrentSATokenSyncs, "workers of the service-account token controller")
	fs.DurationVar(&o.Config.PodEvictionTimeout, "pod-eviction-timeout", o.Config.PodEvictionTimeout, "how long pods stay on an unreachable or not-ready node before they are evicted (unless they tolerate it)")
	fs.DurationVar(&o.Config.PVClaimBinderSyncPeriod, "pvclaimbinder-sync-period", o.Config.PVClaimBinderSyncPeriod, "how often the PersistentVolume binder looks at every volume and claim again")
	o.Election.AddFlags(fs, &o.LeaderElect, "runs controllers")
}

// Validate reports every invalid setting at once.
func (o Options) Validate() error {
	var errs []string
	if _, err := o.enabled(); err != nil {
		errs = append(errs, err.Error())
	}
	c := o.Config
	if c.ConcurrentEndpointSyncs < 1 {
		errs = append(errs, "--concurrent-endpoint-syncs must be at least 1")
	}
	if c.ConcurrentServiceEndpointSyncs < 1 || c.ConcurrentServiceEndpointSyncs > 50 {
		errs = append(errs, "--concurrent-service-endpoint-syncs must be between 1 and 50")
	}
	if c.MaxEndpointsPerSlice < 1 || c.MaxEndpointsPerSlice > 1000 {
		errs = append(errs, "--max-endpoints-per-slice must be between 1 and 1000")
	}
	if c.EndpointUpdatesBatchPeriod < 0 || c.EndpointSliceUpdatesBatchPeriod < 0 {
		errs = append(errs, "batch periods must not be negative")
	}
	if c.ConcurrentNamespaceSyncs < 1 {
		errs = append(errs, "--concurrent-namespace-syncs must be at least 1")
	}
	if c.ConcurrentReplicaSetSyncs < 1 || c.ConcurrentRCSyncs < 1 {
		errs = append(errs, "--concurrent-replicaset-syncs and --concurrent-rc-syncs must be at least 1")
	}
	if c.ConcurrentDeploymentSyncs < 1 {
		errs = append(errs, "--concurrent-deployment-syncs must be at least 1")
	}
	if c.ConcurrentSATokenSyncs < 1 {
		errs = append(errs, "--concurrent-serviceaccount-token-syncs must be at least 1")
	}
	if c.NamespaceSyncPeriod <= 0 {
		errs = append(errs, "--namespace-sync-period must be positive")
	}
	if c.NodeMonitorGracePeriod <= 0 || c.NodeMonitorPeriod <= 0 || c.PodEvictionTimeout <= 0 {
		errs = append(errs, "--node-monitor-grace-period, --node-monitor-period and --pod-eviction-timeout must be positive")
	}
	if c.MinResyncPeriod <= 0 {
		errs = append(errs, "--min-resync-period must be positive")
	}
	if c.PVClaimBinderSyncPeriod <= 0 {
		errs = append(errs, "--pvclaimbinder-sync-period must be positive")
	}
	if o.SecurePort < 0 || o.SecurePort > 65535 {
		errs = append(errs, "--secure-port must be between 0 and 65535")
	}
	if o.LeaderElect {
		if err := o.Election.Validate(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if o.KubeAPIBurst < 0 {
		errs = append(errs, "--kube-api-burst must not be negative")
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid options: %s", strings.Join(errs, "; "))
	}
	return nil
}

// enabled resolves --controllers against the registry, in registry order.
func (o Options) enabled() ([]controller.Entry, error) {
	want := map[string]bool{}
	star := false
	for _, name := range o.Controllers {
		name = strings.TrimSpace(name)
		switch {
		case name == "*":
			star = true
		case strings.HasPrefix(name, "-"):
			canonical, ok := lookupName(name[1:])
			if !ok {
				return nil, fmt.Errorf("--controllers: unknown controller %q", name[1:])
			}
			want[canonical] = false
		default:
			canonical, ok := lookupName(name)
			if !ok {
				return nil, fmt.Errorf("--controllers: unknown controller %q", name)
			}
			want[canonical] = true
		}
	}
	var out []controller.Entry
	for _, e := range Registry {
		on, named := want[e.Name]
		if (named && on) || (!named && star && !e.Disabled) {
			out = append(out, e)
		}
	}
	return out, nil
}

// lookupName returns the registered name of a controller named by its name or an alias.
func lookupName(name string) (string, bool) {
	for _, e := range Registry {
		if e.Name == name || slices.Contains(e.Aliases, name) {
			return e.Name, true
		}
	}
	return "", false
}

// Names lists the registered controllers.
func Names() []string {
	var names []string
	for _, e := range Registry {
		names = append(names, e.Name)
	}
	return names
}

// gcThreshold is --terminated-pod-gc-threshold: on the command line 0 turns the collection of
// terminated pods off, as in kube-controller-manager; in controller.Config 0 means the default
// and a negative value means off.
type gcThreshold struct{ p *int }

func (g gcThreshold) String() string {
	if g.p == nil || *g.p < 0 {
		return "0"
	}
	return strconv.Itoa(*g.p)
}

func (g gcThreshold) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("must be a whole number, 0 or more")
	}
	if n == 0 {
		n = -1
	}
	*g.p = n
	return nil
}

func (gcThreshold) Type() string { return "int" }
