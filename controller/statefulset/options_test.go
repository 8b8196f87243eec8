package statefulset

import (
	"testing"

	"github.com/kplane/kplane/internal/testserver"
	"github.com/spf13/pflag"
)

func TestOptions(t *testing.T) {
	testserver.CheckOptions(t, DefaultOptions,
		testserver.OptionsCase[*Options]{Name: "defaults", Set: func(*Options) {}},
		testserver.OptionsCase[*Options]{Name: "no workers", Set: func(o *Options) { o.ConcurrentSyncs = 0 }, Flag: "--concurrent-statefulset-syncs"},
	)
	o := DefaultOptions()
	fs := pflag.NewFlagSet("kcm", pflag.ContinueOnError)
	o.AddFlags(fs)
	if o.ConcurrentSyncs != 5 {
		t.Errorf("default workers %d, want v1.36's 5", o.ConcurrentSyncs)
	}
	if err := fs.Parse([]string{"--concurrent-statefulset-syncs=2"}); err != nil || o.ConcurrentSyncs != 2 {
		t.Errorf("flag: %v, workers %d", err, o.ConcurrentSyncs)
	}
}
