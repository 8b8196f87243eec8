package replicaset

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestOptions(t *testing.T) {
	rs, ok := ReplicaSetEntry.Options().(*Options)
	rc, ok2 := ReplicationControllerEntry.Options().(*Options)
	if !ok || !ok2 {
		t.Fatalf("entries' options are %T and %T", ReplicaSetEntry.Options(), ReplicationControllerEntry.Options())
	}
	// Each kind has its own settings, bound to its own flag.
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	rs.AddFlags(fs)
	rc.AddFlags(fs)
	if err := fs.Parse([]string{"--concurrent-replicaset-syncs=3", "--concurrent-rc-syncs=4"}); err != nil {
		t.Fatal(err)
	}
	if rs.ConcurrentSyncs != 3 || rc.ConcurrentSyncs != 4 {
		t.Errorf("workers after flags: ReplicaSet %d, ReplicationController %d; want 3, 4", rs.ConcurrentSyncs, rc.ConcurrentSyncs)
	}
	if u := fs.Lookup("concurrent-rc-syncs").Usage; u != "workers of the ReplicationController controller" {
		t.Errorf("--concurrent-rc-syncs help %q", u)
	}

	for _, tt := range []struct {
		o    *Options
		flag string
	}{
		{DefaultOptions(ReplicaSets), "--concurrent-replicaset-syncs"},
		{DefaultOptions(ReplicationControllers), "--concurrent-rc-syncs"},
	} {
		if errs := tt.o.Validate(); tt.o.ConcurrentSyncs != 5 || len(errs) > 0 {
			t.Errorf("%s: default %d workers, errors %v; want 5, none", tt.flag, tt.o.ConcurrentSyncs, errs)
		}
		tt.o.ConcurrentSyncs = 0
		if errs := tt.o.Validate(); len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.flag) {
			t.Errorf("no workers: errors %v, want one naming %s", errs, tt.flag)
		}
	}
}
