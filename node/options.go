package node

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/utils/clock"
)

// Options are the settings of `kplane node`, named after the kubelet's flags where one exists.
type Options struct {
	Kubeconfig string
	Master     string
	// HostnameOverride names the Node; empty means the machine's hostname.
	HostnameOverride string
	// DataDir holds pods/<uid>/<container>/ (working directory and log files).
	DataDir string
	// PodCIDR is the range pod IPs are taken from, one address per pod. The default is a
	// loopback range, which Linux routes to lo, so a container can bind $POD_IP:port as is.
	PodCIDR string
	// Address and Port are where the agent serves HTTP (container logs for the apiserver's
	// pods/log). Port 0 picks a free port; the Node's status.daemonEndpoints reports the one
	// bound. The default address is loopback because the Node's InternalIP is 127.0.0.1 and
	// the endpoint is unauthenticated.
	Address string
	Port    int

	// LeaseDuration is written into the node's Lease; RenewInterval is how often it is renewed.
	LeaseDuration time.Duration
	RenewInterval time.Duration
	// StatusInterval is how often the Node's status (the Ready heartbeat) is posted.
	StatusInterval time.Duration
	// BackoffBase and BackoffMax pace the restarts of exited containers (doubling per
	// consecutive quick exit, as the kubelet's CrashLoopBackOff).
	BackoffBase, BackoffMax time.Duration
	// SyncFrequency is how often the files of a pod's ConfigMap, Secret, downward API and
	// projected volumes are brought up to date (the kubelet's --sync-frequency, whose
	// default is a minute; 10 s here, one machine's API server can take it).
	SyncFrequency time.Duration
	// ShutdownGrace is how long containers get after SIGTERM when the agent itself stops.
	ShutdownGrace time.Duration
	// Clock is the time pods' restarts, probes and status run on; nil is the real clock.
	Clock clock.WithTicker
	// DisableCgroups runs containers without cgroups, as on a machine where they cannot be
	// created: usage is accounted from /proc and limits are not enforced (node/cgroups).
	DisableCgroups bool
}

// DefaultPodCIDR is the default pod range: loopback, so binding needs no setup.
const DefaultPodCIDR = "127.77.0.0/16"

// DefaultPort is the kubelet's port.
const DefaultPort = 10250

// DefaultOptions returns the kubelet's timings (Lease 40 s renewed every 10 s, status every
// 10 s, restart backoff 10 s doubling to 5 min) and the loopback pod range.
func DefaultOptions() Options {
	return Options{
		DataDir:        "kplane-node",
		PodCIDR:        DefaultPodCIDR,
		Address:        "127.0.0.1",
		Port:           DefaultPort,
		LeaseDuration:  40 * time.Second,
		RenewInterval:  10 * time.Second,
		StatusInterval: 10 * time.Second,
		BackoffBase:    10 * time.Second,
		BackoffMax:     5 * time.Minute,
		ShutdownGrace:  2 * time.Second,
		SyncFrequency:  10 * time.Second,
	}
}

// AddFlags binds o's fields to the kubelet's flag names.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the API server (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&o.Master, "master", o.Master, "API server address, overriding the kubeconfig's")
	fs.StringVar(&o.HostnameOverride, "hostname-override", o.HostnameOverride, "name of the Node (default: the hostname)")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory for pods' working directories and logs")
	fs.StringVar(&o.PodCIDR, "pod-cidr", o.PodCIDR, "range pod IPs are taken from, one per pod (the default is loopback, so binding needs no setup)")
	fs.StringVar(&o.Address, "address", o.Address, "IP address the agent serves HTTP (container logs, exec, attach, port-forward) on")
	fs.IntVar(&o.Port, "port", o.Port, "port the agent serves HTTP (container logs, exec, attach, port-forward) on; 0 picks a free port")
	fs.DurationVar(&o.RenewInterval, "node-lease-renew-interval", o.RenewInterval, "how often the node's Lease is renewed")
	fs.DurationVar(&o.StatusInterval, "node-status-update-frequency", o.StatusInterval, "how often the node posts its status")
	fs.DurationVar(&o.SyncFrequency, "sync-frequency", o.SyncFrequency, "how often the files of ConfigMap, Secret, downward API and projected volumes are brought up to date")
}

// Validate reports every invalid setting at once.
func (o Options) Validate() error {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if p, err := netip.ParsePrefix(o.PodCIDR); err != nil {
		errs = append(errs, fmt.Errorf("--pod-cidr: %w", err))
	} else if !p.Addr().Is4() || p.Bits() > 30 {
		errs = append(errs, fmt.Errorf("--pod-cidr %s: need an IPv4 range of at least 4 addresses", o.PodCIDR))
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d: must be 0 to 65535", o.Port))
	}
	if _, err := netip.ParseAddr(o.Address); err != nil {
		errs = append(errs, fmt.Errorf("--address: %w", err))
	}
	for name, d := range map[string]time.Duration{"lease duration": o.LeaseDuration, "--node-lease-renew-interval": o.RenewInterval,
		"--node-status-update-frequency": o.StatusInterval, "backoff base": o.BackoffBase, "backoff max": o.BackoffMax,
		"--sync-frequency": o.SyncFrequency} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	return nil
}
