package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/leaderelection"
	"github.com/spf13/pflag"
)

// Options are the settings of `kplane scheduler`, named after kube-scheduler's flags.
type Options struct {
	Kubeconfig   string
	Master       string
	KubeAPIQPS   float32
	KubeAPIBurst int
	// Workers is how many pods are placed at once.
	Workers     int
	LeaderElect bool
	Election    leaderelection.Options
}

// DefaultOptions returns kube-scheduler's defaults where they apply (QPS 50, burst 100,
// the "kube-scheduler" Lease in kube-system).
func DefaultOptions() Options {
	return Options{
		KubeAPIQPS:   50,
		KubeAPIBurst: 100,
		Workers:      1,
		LeaderElect:  true,
		Election:     leaderelection.DefaultOptions("kube-scheduler"),
	}
}

// AddFlags binds o's fields to kube-scheduler's flag names.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the API server (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&o.Master, "master", o.Master, "API server address, overriding the kubeconfig's")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "queries per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst of queries to the API server")
	fs.IntVar(&o.Workers, "workers", o.Workers, "pods placed at once")
	o.Election.AddFlags(fs, &o.LeaderElect, "schedules")
}

// Validate reports every invalid setting at once.
func (o Options) Validate() error {
	var errs []error
	if o.Workers < 1 {
		errs = append(errs, errors.New("--workers must be at least 1"))
	}
	if o.KubeAPIBurst < 0 {
		errs = append(errs, errors.New("--kube-api-burst must not be negative"))
	}
	if o.LeaderElect {
		if err := o.Election.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	return nil
}

// Run connects with o's kubeconfig and runs the scheduler until ctx is cancelled.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	c, err := client.FromKubeconfigAndMaster(o.Kubeconfig, o.Master, o.KubeAPIQPS, o.KubeAPIBurst)
	if err != nil {
		return err
	}
	return RunWithClient(ctx, o, c)
}

// RunWithClient is Run with a client made by the caller (kplane up, tests); the Kubeconfig,
// Master and QPS options are not used. With leader election the scheduler runs only while
// this replica leads; it returns leaderelection.ErrLost if the lead is lost.
func RunWithClient(ctx context.Context, o Options, c *client.Client) error {
	if err := o.Validate(); err != nil {
		return err
	}
	c = c.WithUserAgent("kplane-scheduler")
	lead := func(ctx context.Context) {
		f := cache.NewFactory(c, "")
		s := New(c, f)
		f.Start(ctx)
		s.Run(ctx, o.Workers)
		f.Shutdown()
	}
	if !o.LeaderElect {
		lead(ctx)
		return nil
	}
	elector, err := leaderelection.New(o.Election.Config(c))
	if err != nil {
		return err
	}
	return elector.Run(ctx, lead)
}
