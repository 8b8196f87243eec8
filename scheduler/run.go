package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/leaderelection"
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
	Election    ElectionOptions
}

// ElectionOptions locate the Lease and time the election.
type ElectionOptions struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	ResourceName, ResourceNamespace           string
}

// DefaultOptions returns kube-scheduler's defaults where they apply (QPS 50, burst 100,
// the "kube-scheduler" Lease in kube-system).
func DefaultOptions() Options {
	return Options{
		KubeAPIQPS:   50,
		KubeAPIBurst: 100,
		Workers:      1,
		LeaderElect:  true,
		Election: ElectionOptions{
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			ResourceName: "kube-scheduler", ResourceNamespace: "kube-system",
		},
	}
}

// AddFlags binds o's fields to kube-scheduler's flag names.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the API server (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&o.Master, "master", o.Master, "API server address, overriding the kubeconfig's")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "queries per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst of queries to the API server")
	fs.IntVar(&o.Workers, "workers", o.Workers, "pods placed at once")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader among replicas through a Lease; only the leader schedules")
	fs.DurationVar(&o.Election.LeaseDuration, "leader-elect-lease-duration", o.Election.LeaseDuration, "how long a silent leader keeps the lease")
	fs.DurationVar(&o.Election.RenewDeadline, "leader-elect-renew-deadline", o.Election.RenewDeadline, "how long the leader tries to renew before it stops leading")
	fs.DurationVar(&o.Election.RetryPeriod, "leader-elect-retry-period", o.Election.RetryPeriod, "how often candidates try to acquire and the leader renews")
	fs.StringVar(&o.Election.ResourceName, "leader-elect-resource-name", o.Election.ResourceName, "name of the Lease")
	fs.StringVar(&o.Election.ResourceNamespace, "leader-elect-resource-namespace", o.Election.ResourceNamespace, "namespace of the Lease")
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
		if err := o.electionConfig(nil, "-").Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	return nil
}

func (o Options) electionConfig(c *client.Client, identity string) leaderelection.Config {
	e := o.Election
	return leaderelection.Config{Client: c, Namespace: e.ResourceNamespace, Name: e.ResourceName, Identity: identity,
		LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod, ReleaseOnCancel: true}
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
	host, _ := os.Hostname()
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	elector, err := leaderelection.New(o.electionConfig(c, host+"_"+hex.EncodeToString(suffix)))
	if err != nil {
		return err
	}
	return elector.Run(ctx, lead)
}
