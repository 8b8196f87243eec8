package app

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kplane/kplane/proxy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Proxy modes: the data paths (chosen by the caller, which builds the DataPath).
const (
	// ProxyModeAuto lets the caller choose: nftables where it can be used (root, a kernel
	// with nftables), userspace elsewhere.
	ProxyModeAuto      = ""
	ProxyModeUserspace = "userspace"
	ProxyModeNFTables  = "nftables"
)

// Options are the proxy's settings, with kube-proxy's flag names and defaults.
type Options struct {
	Kubeconfig string
	Master     string
	// HostnameOverride names this proxy's node; empty means the host name (lowercased).
	HostnameOverride string
	// HealthzBindAddress and MetricsBindAddress are host:port (port 0: pick a free one;
	// empty: no server).
	HealthzBindAddress string
	MetricsBindAddress string
	MinSyncPeriod      time.Duration
	// SyncPeriod is the retry interval after a failed sync; /healthz fails when a change has
	// waited twice as long.
	SyncPeriod time.Duration
	// ConfigSyncPeriod: informers tell every object again this often (0: never).
	ConfigSyncPeriod time.Duration
	KubeAPIQPS       float32
	KubeAPIBurst     int
	// Profiling serves Go's profiles at /debug/pprof on the metrics server (--profiling,
	// off by default as in kube-proxy).
	Profiling bool
	// ProxyMode is "userspace", "nftables", or ProxyModeAuto (""). AddFlags does not bind
	// --proxy-mode: the caller does, as it builds the DataPath.
	ProxyMode string

	// Not flags.

	// FullSyncPeriod: a full sync at least this often (proxy.DefaultFullSyncPeriod).
	FullSyncPeriod time.Duration
	// Registry is where /metrics comes from; the data path registers its own metrics in it
	// too. nil: a fresh one.
	Registry *prometheus.Registry
	// IPFamily is the family served; empty means: the family of the node's first InternalIP
	// (else ExternalIP) when the Node exists at start, else IPv4.
	IPFamily corev1.IPFamily
}

// DefaultOptions returns kube-proxy v1.36's defaults.
func DefaultOptions() Options {
	return Options{
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		MinSyncPeriod:      time.Second,
		SyncPeriod:         30 * time.Second,
		ConfigSyncPeriod:   15 * time.Minute,
		KubeAPIQPS:         5,
		KubeAPIBurst:       10,
		FullSyncPeriod:     proxy.DefaultFullSyncPeriod,
	}
}

// AddFlags binds o's fields to kube-proxy's flag names (all but --proxy-mode).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the API server (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&o.Master, "master", o.Master, "API server address, overriding the kubeconfig's")
	fs.StringVar(&o.HostnameOverride, "hostname-override", o.HostnameOverride, "name of this proxy's node (default: the host name)")
	fs.StringVar(&o.HealthzBindAddress, "healthz-bind-address", o.HealthzBindAddress, "host:port of /healthz and /livez (port 0: pick a free one; empty: off)")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "host:port of /metrics (port 0: pick a free one; empty: off)")
	fs.DurationVar(&o.MinSyncPeriod, "iptables-min-sync-period", o.MinSyncPeriod, "least time between syncs of the data path, in every mode (kube-proxy's name; 0: sync on every change)")
	fs.DurationVar(&o.SyncPeriod, "iptables-sync-period", o.SyncPeriod, "retry interval after a failed sync, in every mode (kube-proxy's name); /healthz fails when a change waits twice as long")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "serve Go's profiles at /debug/pprof on the metrics server")
	fs.DurationVar(&o.ConfigSyncPeriod, "config-sync-period", o.ConfigSyncPeriod, "how often informers tell every Service and EndpointSlice again (0: never)")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "queries per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst of queries to the API server")
}

// NodeName is the node this proxy runs on: --hostname-override, else the host name, lowercased.
func (o Options) NodeName() (string, error) {
	name := strings.TrimSpace(o.HostnameOverride)
	if name == "" {
		host, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("no --hostname-override and no host name: %w", err)
		}
		name = host
	}
	return strings.ToLower(name), nil
}

// Validate reports every invalid setting at once.
func (o Options) Validate() error {
	var errs []string
	if name, err := o.NodeName(); err != nil {
		errs = append(errs, err.Error())
	} else if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("node name %q: %s", name, strings.Join(msgs, "; ")))
	}
	for _, a := range []struct{ flag, value string }{
		{"--healthz-bind-address", o.HealthzBindAddress}, {"--metrics-bind-address", o.MetricsBindAddress},
	} {
		if err := validBindAddress(a.value); err != nil {
			errs = append(errs, fmt.Sprintf("%s %q: %v", a.flag, a.value, err))
		}
	}
	if o.MinSyncPeriod < 0 {
		errs = append(errs, "--iptables-min-sync-period must not be negative")
	}
	if o.SyncPeriod <= 0 {
		errs = append(errs, "--iptables-sync-period must be positive")
	}
	if o.ConfigSyncPeriod < 0 {
		errs = append(errs, "--config-sync-period must not be negative")
	}
	if o.FullSyncPeriod < 0 {
		errs = append(errs, "the full sync period must not be negative")
	}
	if o.KubeAPIBurst < 0 {
		errs = append(errs, "--kube-api-burst must not be negative")
	}
	switch o.ProxyMode {
	case ProxyModeAuto, ProxyModeUserspace, ProxyModeNFTables:
	default:
		errs = append(errs, fmt.Sprintf("--proxy-mode %q: must be %q or %q", o.ProxyMode, ProxyModeUserspace, ProxyModeNFTables))
	}
	switch o.IPFamily {
	case "", corev1.IPv4Protocol, corev1.IPv6Protocol:
	default:
		errs = append(errs, fmt.Sprintf("IP family %q: must be IPv4 or IPv6", o.IPFamily))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid options: %s", strings.Join(errs, "; "))
	}
	return nil
}

// validBindAddress accepts "" (off) and host:port with an IP (or empty) host.
func validBindAddress(s string) error {
	if s == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("host must be an IP address")
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port must be between 0 and 65535")
	}
	return nil
}
