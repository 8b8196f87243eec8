package manager_test

import (
	"testing"
	"time"

	"github.com/kplane/kplane/controller/manager"
	"github.com/spf13/pflag"
)

func TestNamespaceAndPodGCFlags(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		threshold  int
		nsWorkers  int
		nsPeriod   time.Duration
		wantErr    bool
		wantString string
	}{
		{nil, 12500, 10, 5 * time.Minute, false, "12500"},
		{[]string{"--terminated-pod-gc-threshold=100", "--concurrent-namespace-syncs=3", "--namespace-sync-period=1m"}, 100, 3, time.Minute, false, "100"},
		{[]string{"--terminated-pod-gc-threshold=0"}, -1, 10, 5 * time.Minute, false, "0"},
		{[]string{"--terminated-pod-gc-threshold=-5"}, 0, 0, 0, true, ""},
	} {
		o := manager.DefaultOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		err := fs.Parse(tc.args)
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
		c := o.Config
		if c.TerminatedPodGCThreshold != tc.threshold || c.ConcurrentNamespaceSyncs != tc.nsWorkers || c.NamespaceSyncPeriod != tc.nsPeriod {
			t.Errorf("%v: threshold %d, namespace workers %d, period %s", tc.args, c.TerminatedPodGCThreshold, c.ConcurrentNamespaceSyncs, c.NamespaceSyncPeriod)
		}
		if got := fs.Lookup("terminated-pod-gc-threshold").Value.String(); got != tc.wantString {
			t.Errorf("%v: flag shows %q, want %q", tc.args, got, tc.wantString)
		}
	}
}
