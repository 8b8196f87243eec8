package podautoscaler

import (
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/spf13/pflag"
)

func TestOptions(t *testing.T) {
	type oc = testserver.OptionsCase[*Options]
	testserver.CheckOptions(t, DefaultOptions,
		oc{Name: "defaults", Set: func(*Options) {}},
		oc{Name: "no tolerance", Set: func(o *Options) { o.Tolerance = 0 }},
		oc{Name: "no sync period", Set: func(o *Options) { o.SyncPeriod = 0 }, Flag: "--horizontal-pod-autoscaler-sync-period"},
		oc{Name: "negative tolerance", Set: func(o *Options) { o.Tolerance = -0.1 }, Flag: "--horizontal-pod-autoscaler-tolerance"},
		oc{Name: "negative window", Set: func(o *Options) { o.DownscaleStabilization = -time.Second }, Flag: "--horizontal-pod-autoscaler-downscale-stabilization"},
		oc{Name: "negative delay", Set: func(o *Options) { o.InitialReadinessDelay = -time.Second }, Flag: "--horizontal-pod-autoscaler-initial-readiness-delay"},
		oc{Name: "negative period", Set: func(o *Options) { o.CPUInitializationPeriod = -time.Second }, Flag: "--horizontal-pod-autoscaler-cpu-initialization-period"},
		oc{Name: "no workers", Set: func(o *Options) { o.ConcurrentSyncs = 0 }, Flag: "--concurrent-horizontal-pod-autoscaler-syncs"},
	)
	o := DefaultOptions()
	if *o != (Options{SyncPeriod: 15 * time.Second, Tolerance: 0.1, DownscaleStabilization: 5 * time.Minute,
		InitialReadinessDelay: 30 * time.Second, CPUInitializationPeriod: 5 * time.Minute, ConcurrentSyncs: 5}) {
		t.Errorf("defaults %+v", *o)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	err := fs.Parse([]string{"--horizontal-pod-autoscaler-sync-period=5s", "--horizontal-pod-autoscaler-tolerance=0.2",
		"--horizontal-pod-autoscaler-downscale-stabilization=1m", "--horizontal-pod-autoscaler-initial-readiness-delay=10s",
		"--horizontal-pod-autoscaler-cpu-initialization-period=2m", "--concurrent-horizontal-pod-autoscaler-syncs=9"})
	if err != nil || *o != (Options{SyncPeriod: 5 * time.Second, Tolerance: 0.2, DownscaleStabilization: time.Minute,
		InitialReadinessDelay: 10 * time.Second, CPUInitializationPeriod: 2 * time.Minute, ConcurrentSyncs: 9}) {
		t.Errorf("flags: %+v, %v", *o, err)
	}
	o.SyncPeriod = 0
	if _, err := New(&controller.Context{}, o); err == nil || !strings.Contains(err.Error(), "--horizontal-pod-autoscaler-sync-period") {
		t.Errorf("New with no sync period: %v", err)
	}
	if Entry.Name != "horizontal-pod-autoscaler-controller" || len(Entry.Aliases) != 1 || Entry.Aliases[0] != "horizontalpodautoscaling" || Entry.Disabled {
		t.Errorf("entry %+v", Entry)
	}
}
