package manager

import (
	"slices"
	"testing"
)

// TestControllerAliases: --controllers takes kube-controller-manager's older names too.
func TestControllerAliases(t *testing.T) {
	for _, tc := range []struct {
		controllers []string
		has, lacks  string
	}{
		{[]string{"*"}, "serviceaccount-token-controller", ""},
		{[]string{"endpoint", "endpointslice"}, "endpointslice-controller", "namespace-controller"},
		{[]string{"*", "-serviceaccount-token"}, "root-ca-certificate-publisher-controller", "serviceaccount-token-controller"},
		{[]string{"root-ca-cert-publisher"}, "root-ca-certificate-publisher-controller", "endpoints-controller"},
		{[]string{"*", "-root-ca-certificate-publisher-controller"}, "endpoints-controller", "root-ca-certificate-publisher-controller"},
		{[]string{"podgc"}, "pod-garbage-collector-controller", "endpoints-controller"},
		{[]string{"*", "-pod-garbage-collector-controller"}, "endpoints-controller", "pod-garbage-collector-controller"},
	} {
		o := DefaultOptions()
		o.Controllers = tc.controllers
		entries, err := o.enabled()
		if err != nil {
			t.Fatalf("%v: %v", tc.controllers, err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name)
		}
		if !slices.Contains(names, tc.has) || tc.lacks != "" && slices.Contains(names, tc.lacks) {
			t.Errorf("%v: %v, want %s and not %q", tc.controllers, names, tc.has, tc.lacks)
		}
	}
}
