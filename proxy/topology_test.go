package proxy

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// ep builds an endpoint from a compact spec: "10.0.0.1 ready local zone=a hints=a,b nodehints=n1".
func ep(spec string) Endpoint {
	f := strings.Fields(spec)
	e := Endpoint{Addr: netip.AddrPortFrom(netip.MustParseAddr(f[0]), 80)}
	for _, w := range f[1:] {
		switch {
		case w == "ready":
			e.Ready, e.Serving = true, true
		case w == "serving":
			e.Serving = true
		case w == "terminating":
			e.Terminating = true
		case w == "local":
			e.IsLocal = true
		case strings.HasPrefix(w, "hints="):
			e.Hints = cmp.Or(e.Hints, &Hints{})
			e.Hints.Zones = strings.Split(strings.TrimPrefix(w, "hints="), ",")
		case strings.HasPrefix(w, "nodehints="):
			e.Hints = cmp.Or(e.Hints, &Hints{})
			e.Hints.Nodes = strings.Split(strings.TrimPrefix(w, "nodehints="), ",")
		}
	}
	return e
}

func ips(eps []Endpoint) string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Addr.Addr().String())
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func TestCategorizeEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		internalLocal, extLocal   bool
		endpoints                 []string
		cluster, local, reachable string
		hasAny                    bool
	}{
		{name: "no endpoints"},
		{name: "ready ones only", endpoints: []string{"10.0.0.1 ready", "10.0.0.2", "10.0.0.3 serving terminating"},
			cluster: "10.0.0.1", reachable: "10.0.0.1", hasAny: true},
		{name: "none ready: serving terminating ones", endpoints: []string{"10.0.0.2", "10.0.0.3 serving terminating", "10.0.0.4 terminating"},
			cluster: "10.0.0.3", reachable: "10.0.0.3", hasAny: true},
		{name: "nothing usable", endpoints: []string{"10.0.0.2", "10.0.0.4 terminating"}},
		{name: "zone hints for our zone", endpoints: []string{"10.0.0.1 ready hints=a", "10.0.0.2 ready hints=b"},
			cluster: "10.0.0.1", reachable: "10.0.0.1", hasAny: true},
		{name: "zone hints, none for us: all", endpoints: []string{"10.0.0.1 ready hints=c", "10.0.0.2 ready hints=b"},
			cluster: "10.0.0.1 10.0.0.2", reachable: "10.0.0.1 10.0.0.2", hasAny: true},
		{name: "hints on some only: ignored", endpoints: []string{"10.0.0.1 ready hints=a", "10.0.0.2 ready"},
			cluster: "10.0.0.1 10.0.0.2", reachable: "10.0.0.1 10.0.0.2", hasAny: true},
		{name: "node hints win over zone hints", endpoints: []string{"10.0.0.1 ready hints=a nodehints=n2", "10.0.0.2 ready hints=a nodehints=n1"},
			cluster: "10.0.0.2", reachable: "10.0.0.2", hasAny: true},
		{name: "internal Local, no external access", internalLocal: true, endpoints: []string{"10.0.0.1 ready local", "10.0.0.2 ready"},
			local: "10.0.0.1", reachable: "10.0.0.1", hasAny: true},
		{name: "internal Local, no local endpoint", internalLocal: true, endpoints: []string{"10.0.0.2 ready"},
			hasAny: true},
		{name: "both Local, externally accessible: the cluster set serves short-circuited traffic", internalLocal: true, extLocal: true,
			endpoints: []string{"10.0.0.1 ready local", "10.0.0.2 ready"},
			cluster:   "10.0.0.1 10.0.0.2", local: "10.0.0.1", reachable: "10.0.0.1 10.0.0.2", hasAny: true},
		{name: "Local falls back to local terminating", extLocal: true, endpoints: []string{"10.0.0.1 serving terminating local", "10.0.0.2 ready"},
			cluster: "10.0.0.2", local: "10.0.0.1", reachable: "10.0.0.1 10.0.0.2", hasAny: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eps []Endpoint
			for _, s := range tc.endpoints {
				eps = append(eps, ep(s))
			}
			svc := &ServicePort{InternalLocal: tc.internalLocal, ExternalLocal: tc.extLocal}
			if tc.extLocal {
				svc.NodePort = 30080 // externalTrafficPolicy applies only to external access
			}
			cluster, local, reachable, hasAny := CategorizeEndpoints(eps, svc, "n1", "a")
			if ips(cluster) != tc.cluster || ips(local) != tc.local || ips(reachable) != tc.reachable || hasAny != tc.hasAny {
				t.Errorf("cluster %q local %q reachable %q hasAny %v; want %q %q %q %v",
					ips(cluster), ips(local), ips(reachable), hasAny, tc.cluster, tc.local, tc.reachable, tc.hasAny)
			}
		})
	}
}
