package manager

import (
	"slices"
	"strings"
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

// TestControllerStates: --help lists every registered controller with its state and every
// v1.36 controller kplane lacks, never one as both.
func TestControllerStates(t *testing.T) {
	help := controllerStates()
	for _, name := range Names() {
		if !strings.Contains(help, "  "+name+" (on by default") && !strings.Contains(help, "  "+name+" (off by default") {
			t.Errorf("%s missing from the help", name)
		}
	}
	for _, m := range missing {
		if _, ok := lookupName(m.name); ok {
			t.Errorf("%s is registered and listed as missing", m.name)
		}
	}
	if !strings.Contains(help, "ttl-controller (") {
		t.Errorf("help lacks the missing controllers:\n%s", help)
	}
}
