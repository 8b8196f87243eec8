package deployment

import (
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	o := DefaultOptions()
	if o.ConcurrentDeploymentSyncs != 5 {
		t.Errorf("default workers %d, want 5", o.ConcurrentDeploymentSyncs)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Errorf("defaults: %v", errs)
	}
	o.ConcurrentDeploymentSyncs = 0
	if errs := o.Validate(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "--concurrent-deployment-syncs") {
		t.Errorf("no workers: errors %v, want one naming --concurrent-deployment-syncs", errs)
	}
}
