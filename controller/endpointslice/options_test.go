package endpointslice

import (
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
)

func TestOptionsValidate(t *testing.T) {
	type c = testserver.OptionsCase[*Options]
	testserver.CheckOptions(t, DefaultOptions,
		c{Name: "defaults", Set: func(*Options) {}, Flag: ""},
		c{Name: "bounds", Set: func(o *Options) { o.ConcurrentServiceEndpointSyncs, o.MaxEndpointsPerSlice = 50, 1000 }, Flag: ""},
		c{Name: "no workers", Set: func(o *Options) { o.ConcurrentServiceEndpointSyncs = 0 }, Flag: "--concurrent-service-endpoint-syncs"},
		c{Name: "too many workers", Set: func(o *Options) { o.ConcurrentServiceEndpointSyncs = 51 }, Flag: "--concurrent-service-endpoint-syncs"},
		c{Name: "empty slices", Set: func(o *Options) { o.MaxEndpointsPerSlice = 0 }, Flag: "--max-endpoints-per-slice"},
		c{Name: "huge slices", Set: func(o *Options) { o.MaxEndpointsPerSlice = 1001 }, Flag: "--max-endpoints-per-slice"},
		c{Name: "negative batch period", Set: func(o *Options) { o.EndpointSliceUpdatesBatchPeriod = -time.Second }, Flag: "--endpointslice-updates-batch-period"},
	)
	// Built without the manager, the controller refuses what Validate refuses.
	o := DefaultOptions()
	o.MaxEndpointsPerSlice = 0
	if _, err := New(&controller.Context{}, o); err == nil || !strings.Contains(err.Error(), "--max-endpoints-per-slice") {
		t.Errorf("New with invalid options: err = %v", err)
	}
}
