// Package manager is the controller manager: it connects to an API server, elects a leader
// among its replicas, runs the registered controllers on shared informers while it leads,
// and serves health, metrics and profiling.
package manager

import (
	"fmt"
	"slices"
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
	// MinResyncPeriod and RootCAFile are the settings every controller shares (see
	// controller.Context).
	MinResyncPeriod time.Duration
	RootCAFile      string
	// Controller holds each registered controller's own settings, by name, at their
	// defaults in DefaultOptions; OptionsOf reads one with its type.
	Controller  map[string]controller.Options
	LeaderElect bool
	Election    leaderelection.Options
	// APIServerWait bounds the wait for the API server's /healthz before anything starts.
	APIServerWait time.Duration
}

// DefaultOptions returns the settings of kube-controller-manager v1.36 where they apply
// (seed 000's where those still hold: QPS 20, burst 30, MinResyncPeriod 12h).
func DefaultOptions() Options {
	return Options{
		BindAddress:     "127.0.0.1",
		SecurePort:      10257,
		Profiling:       true,
		Controllers:     []string{"*"},
		KubeAPIQPS:      20,
		KubeAPIBurst:    30,
		MinResyncPeriod: controller.DefaultMinResyncPeriod,
		Controller:      defaultControllerOptions(),
		LeaderElect:     true,
		Election:        leaderelection.DefaultOptions("kube-controller-manager"),
		APIServerWait:   30 * time.Second,
	}
}

// AddFlags binds o's fields to Kubernetes' flag names.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the API server (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&o.Master, "master", o.Master, "API server address, overriding the kubeconfig's")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address of the health, metrics and profiling server")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "port of the health, metrics and profiling server (plain HTTP; 0 = off)")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "serve /debug/pprof")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, "controllers to run: '*' for every one on by default, 'name' to add one, '-name' to remove one.\n"+controllerStates())
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "queries per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst of queries to the API server")
	fs.DurationVar(&o.MinResyncPeriod, "min-resync-period", o.MinResyncPeriod, "informer resyncs happen at a random period between this and twice this")
	fs.StringVar(&o.RootCAFile, "root-ca-file", o.RootCAFile, "CA bundle published in every namespace's kube-root-ca.crt and put into service-account token Secrets (default: the kubeconfig's)")
	for _, e := range Registry {
		if opts := o.Controller[e.Name]; opts != nil {
			opts.AddFlags(fs)
		}
	}
	o.Election.AddFlags(fs, &o.LeaderElect, "runs controllers")
}

// Validate reports every invalid setting at once.
func (o Options) Validate() error {
	var errs []string
	if _, err := o.enabled(); err != nil {
		errs = append(errs, err.Error())
	}
	if enabled, err := o.enabled(); err == nil {
		for _, e := range enabled {
			for _, err := range o.options(e).Validate() {
				errs = append(errs, err.Error())
			}
		}
	}
	if o.MinResyncPeriod <= 0 {
		errs = append(errs, "--min-resync-period must be positive")
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

// controllerStates lists the controllers for --help: each with its state and other names.
func controllerStates() string {
	var b strings.Builder
	for _, e := range Registry {
		state := "on by default"
		if e.Disabled {
			state = "off by default"
		}
		fmt.Fprintf(&b, "  %s (%s", e.Name, state)
		if len(e.Aliases) > 0 {
			fmt.Fprintf(&b, "; also %s", strings.Join(e.Aliases, ", "))
		}
		b.WriteString(")\n")
	}
	b.WriteString("kube-controller-manager v1.36 controllers kplane does not have:\n")
	for _, m := range missing {
		fmt.Fprintf(&b, "  %s (%s)\n", m.name, m.why)
	}
	return "Known controllers:\n" + b.String()
}

// Names lists the registered controllers.
func Names() []string {
	var names []string
	for _, e := range Registry {
		names = append(names, e.Name)
	}
	return names
}

func defaultControllerOptions() map[string]controller.Options {
	m := map[string]controller.Options{}
	for _, e := range Registry {
		m[e.Name] = e.Options()
	}
	return m
}

// options returns the settings of e in o, its defaults when o has none (an Options not made
// by DefaultOptions).
func (o Options) options(e controller.Entry) controller.Options {
	if opts := o.Controller[e.Name]; opts != nil {
		return opts
	}
	return e.Options()
}

// OptionsOf returns the settings o holds for the controller name, with their type O (a
// pointer, as its Entry's Options returns them), to read or change before Start; name may
// be an alias.
func OptionsOf[O controller.Options](o Options, name string) (O, bool) {
	if canonical, ok := lookupName(name); ok {
		name = canonical
	}
	opts, ok := o.Controller[name].(O)
	return opts, ok
}
