package manager_test

import (
	"testing"
	"time"

	"github.com/kplane/kplane/controller/manager"
	"github.com/kplane/kplane/controller/namespace"
	"github.com/kplane/kplane/controller/podgc"
	"github.com/spf13/pflag"
)

// TestControllerFlags: the manager's command line reaches each controller's own settings.
func TestControllerFlags(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		threshold int
		nsWorkers int
		nsPeriod  time.Duration
		wantErr   bool
	}{
		{nil, 12500, 10, 5 * time.Minute, false},
		{[]string{"--terminated-pod-gc-threshold=100", "--concurrent-namespace-syncs=3", "--namespace-sync-period=1m"}, 100, 3, time.Minute, false},
		{[]string{"--terminated-pod-gc-threshold=0"}, 0, 10, 5 * time.Minute, false},
		{[]string{"--terminated-pod-gc-threshold=-5"}, 0, 0, 0, true},
	} {
		o := manager.DefaultOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		err := fs.Parse(tc.args)
		if err == nil {
			err = o.Validate()
		}
		if tc.wantErr {
			if err == nil {
				t.Errorf("%v: accepted", tc.args)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		gc, _ := manager.OptionsOf[*podgc.Options](o, podgc.Name)
		ns, _ := manager.OptionsOf[*namespace.Options](o, namespace.Name)
		if gc == nil || ns == nil {
			t.Fatalf("options missing: podgc %v, namespace %v", gc, ns)
		}
		if gc.TerminatedPodGCThreshold != tc.threshold || ns.ConcurrentSyncs != tc.nsWorkers || ns.SyncPeriod != tc.nsPeriod {
			t.Errorf("%v: threshold %d, namespace workers %d, period %s", tc.args, gc.TerminatedPodGCThreshold, ns.ConcurrentSyncs, ns.SyncPeriod)
		}
	}
}
