package leaderelection

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/spf13/pflag"
)

// Options are a component's election settings, as Kubernetes components' --leader-elect-*
// flags set them.
type Options struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	ResourceName, ResourceNamespace           string
}

// DefaultOptions are Kubernetes components' defaults (15 s, 10 s, 2 s) for the Lease name in
// kube-system.
func DefaultOptions(name string) Options {
	return Options{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		ResourceName: name, ResourceNamespace: "kube-system"}
}

// AddFlags binds --leader-elect to elect and the --leader-elect-* flags to o; leads says what
// the leader alone does, for the help text.
func (o *Options) AddFlags(fs *pflag.FlagSet, elect *bool, leads string) {
	fs.BoolVar(elect, "leader-elect", *elect, "elect a leader among replicas through a Lease; only the leader "+leads)
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "how long a silent leader keeps the lease")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "how long the leader tries to renew before it stops leading")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "how often candidates try to acquire and the leader renews")
	fs.StringVar(&o.ResourceName, "leader-elect-resource-name", o.ResourceName, "name of the Lease")
	fs.StringVar(&o.ResourceNamespace, "leader-elect-resource-namespace", o.ResourceNamespace, "namespace of the Lease")
}

// Validate reports what is wrong with o, as Config.Validate does.
func (o Options) Validate() error { return o.Config(nil).Validate() }

// Config is the election o describes for client c, under a new identity (the host name and
// a random suffix, as Kubernetes components make theirs), giving the Lease up when it ends.
func (o Options) Config(c *client.Client) Config {
	return Config{Client: c, Namespace: o.ResourceNamespace, Name: o.ResourceName, Identity: newIdentity(),
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod, ReleaseOnCancel: true}
}

func newIdentity() string {
	host, _ := os.Hostname()
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	return host + "_" + hex.EncodeToString(suffix)
}
