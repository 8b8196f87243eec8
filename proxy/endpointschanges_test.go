package proxy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kplane/kplane/internal/testserver"
)

// slice builds EndpointSlice "ns/<name>" of service svc (no label when svc is ""), IPv4 unless
// the first endpoint is IPv6; ports "name/PROTO/port"; endpoints "ip word..." where the words
// are notready, notserving, terminating, node=N, zone=Z, hints=a,b, nodehints=n1,n2 (no
// conditions set at all unless one is given).
func slice(name, svc string, ports []string, endpoints []string, mutate ...func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, AddressType: discoveryv1.AddressTypeIPv4}
	if svc != "" {
		s.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	}
	for _, p := range ports {
		f := strings.Split(p, "/")
		port := discoveryv1.EndpointPort{Name: new(f[0]), Protocol: new(corev1.Protocol(f[1]))}
		var n int32
		fmt.Sscan(f[2], &n)
		port.Port = &n
		s.Ports = append(s.Ports, port)
	}
	for i, e := range endpoints {
		f := strings.Fields(e)
		if i == 0 && strings.Contains(f[0], ":") {
			s.AddressType = discoveryv1.AddressTypeIPv6
		}
		ep := discoveryv1.Endpoint{Addresses: []string{f[0]}}
		for _, w := range f[1:] {
			k, v, _ := strings.Cut(w, "=")
			switch k {
			case "notready":
				ep.Conditions.Ready = new(false)
			case "notserving":
				ep.Conditions.Serving = new(false)
			case "terminating":
				ep.Conditions.Terminating = new(true)
			case "node":
				ep.NodeName = new(v)
			case "zone":
				ep.Zone = new(v)
			case "hints", "nodehints":
				if ep.Hints == nil {
					ep.Hints = &discoveryv1.EndpointHints{}
				}
				for _, h := range strings.Split(v, ",") {
					if k == "hints" {
						ep.Hints.ForZones = append(ep.Hints.ForZones, discoveryv1.ForZone{Name: h})
					} else {
						ep.Hints.ForNodes = append(ep.Hints.ForNodes, discoveryv1.ForNode{Name: h})
					}
				}
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func triggeredAt(at time.Time) func(*discoveryv1.EndpointSlice) {
	return func(s *discoveryv1.EndpointSlice) {
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339Nano)}
	}
}

func (e Endpoint) describe() string {
	var b strings.Builder
	b.WriteString(e.Addr.String())
	for _, c := range []struct {
		on   bool
		word string
	}{{e.Ready, "ready"}, {e.Serving, "serving"}, {e.Terminating, "terminating"}, {e.IsLocal, "local"}} {
		if c.on {
			b.WriteString(" " + c.word)
		}
	}
	if e.NodeName != "" {
		b.WriteString(" node=" + e.NodeName)
	}
	if e.Zone != "" {
		b.WriteString(" zone=" + e.Zone)
	}
	if e.ZoneHints() != nil {
		b.WriteString(" hints=" + strings.Join(e.ZoneHints(), ","))
	}
	if e.NodeHints() != nil {
		b.WriteString(" nodehints=" + strings.Join(e.NodeHints(), ","))
	}
	return b.String()
}

// describeEndpoints lists m as "port name: endpoint" lines, in the map's (sorted) order per port.
func describeEndpoints(m EndpointsMap) []string {
	var names []string
	for name := range m {
		names = append(names, name.String())
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		for name, eps := range m {
			if name.String() == n {
				for _, e := range eps {
					out = append(out, n+" "+e.describe())
				}
			}
		}
	}
	return out
}

func TestEndpointsChangeTracker(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	web := []string{"http/TCP/8080"}
	webDNS := []string{"http/TCP/8080", "dns/UDP/53"}
	type update struct {
		slice       *discoveryv1.EndpointSlice
		removed     bool
		wantChanged bool // Update's answer
	}
	type sync struct {
		updates  []update
		want     []string // describeEndpoints of the map after Apply
		changed  []string
		triggers []time.Time // for ns/web
		problems int
	}
	for _, tc := range []struct {
		name   string
		family corev1.IPFamily
		syncs  []sync
	}{
		{name: "conditions, locality, zone, hints", syncs: []sync{
			{updates: []update{{slice: slice("web-1", "web", webDNS, []string{
				"10.1.0.2 node=n2 zone=b hints=b nodehints=n2",
				"10.1.0.1 node=n1 zone=a",
				"10.1.0.3 notready terminating node=n1",
				"10.1.0.4 notready notserving",
			}), wantChanged: true}},
				want: []string{
					"ns/web:dns/UDP 10.1.0.1:53 ready serving local node=n1 zone=a",
					"ns/web:dns/UDP 10.1.0.2:53 ready serving node=n2 zone=b hints=b nodehints=n2",
					"ns/web:dns/UDP 10.1.0.3:53 serving terminating local node=n1",
					"ns/web:dns/UDP 10.1.0.4:53",
					"ns/web:http/TCP 10.1.0.1:8080 ready serving local node=n1 zone=a",
					"ns/web:http/TCP 10.1.0.2:8080 ready serving node=n2 zone=b hints=b nodehints=n2",
					"ns/web:http/TCP 10.1.0.3:8080 serving terminating local node=n1",
					"ns/web:http/TCP 10.1.0.4:8080",
				},
				changed: []string{"ns/web:dns/UDP", "ns/web:http/TCP"}},
		}},
		{name: "slices merged, duplicates once, ready over terminating", syncs: []sync{
			{updates: []update{
				{slice: slice("web-b", "web", web, []string{"10.1.0.1 terminating", "10.1.0.2"}), wantChanged: true},
				{slice: slice("web-a", "web", web, []string{"10.1.0.3", "10.1.0.1"}), wantChanged: true},
				{slice: slice("web-c", "web", web, []string{"10.1.0.2 notready"}), wantChanged: true},
			},
				want: []string{
					"ns/web:http/TCP 10.1.0.1:8080 ready serving",
					"ns/web:http/TCP 10.1.0.2:8080 ready serving",
					"ns/web:http/TCP 10.1.0.3:8080 ready serving",
				},
				changed: []string{"ns/web:http/TCP"}},
			{updates: []update{{slice: slice("web-a", "web", web, nil), removed: true, wantChanged: true}},
				want: []string{
					"ns/web:http/TCP 10.1.0.1:8080 ready serving terminating",
					"ns/web:http/TCP 10.1.0.2:8080 ready serving",
				},
				changed: []string{"ns/web:http/TCP"}},
		}},
		{name: "one slice listing an address twice: once, ready over terminating, then empty", syncs: []sync{
			{updates: []update{{slice: slice("web-1", "web", web, []string{"10.1.0.1 terminating", "10.1.0.2", "10.1.0.1 node=n2"}), wantChanged: true}},
				want: []string{
					"ns/web:http/TCP 10.1.0.1:8080 ready serving node=n2",
					"ns/web:http/TCP 10.1.0.2:8080 ready serving",
				},
				changed: []string{"ns/web:http/TCP"}},
			{updates: []update{{slice: slice("web-1", "web", web, []string{"10.1.0.1 node=n2", "10.1.0.2", "10.1.0.1 terminating"})}},
				want: []string{
					"ns/web:http/TCP 10.1.0.1:8080 ready serving node=n2",
					"ns/web:http/TCP 10.1.0.2:8080 ready serving",
				}},
			{updates: []update{{slice: slice("web-1", "web", web, nil), wantChanged: true}},
				changed: []string{"ns/web:http/TCP"}},
			{updates: []update{{slice: slice("web-1", "web", web, nil, func(s *discoveryv1.EndpointSlice) { s.ResourceVersion = "9" })}}},
		}},
		{name: "no-op changes: metadata, order, back and forth, create and delete", syncs: []sync{
			{updates: []update{{slice: slice("web-1", "web", webDNS, []string{"10.1.0.1", "10.1.0.2"}), wantChanged: true}},
				want: []string{
					"ns/web:dns/UDP 10.1.0.1:53 ready serving", "ns/web:dns/UDP 10.1.0.2:53 ready serving",
					"ns/web:http/TCP 10.1.0.1:8080 ready serving", "ns/web:http/TCP 10.1.0.2:8080 ready serving",
				},
				changed: []string{"ns/web:dns/UDP", "ns/web:http/TCP"}},
			{updates: []update{
				{slice: slice("web-1", "web", webDNS, []string{"10.1.0.2", "10.1.0.1"}, func(s *discoveryv1.EndpointSlice) { s.ResourceVersion = "9" })},
				{slice: slice("web-1", "web", webDNS, []string{"10.1.0.1"}), wantChanged: true},
				{slice: slice("web-1", "web", webDNS, []string{"10.1.0.1", "10.1.0.2"})},
				{slice: slice("web-2", "web", webDNS, []string{"10.1.0.9"}), wantChanged: true},
				{slice: slice("web-2", "web", webDNS, nil), removed: true},
			},
				want: []string{
					"ns/web:dns/UDP 10.1.0.1:53 ready serving", "ns/web:dns/UDP 10.1.0.2:53 ready serving",
					"ns/web:http/TCP 10.1.0.1:8080 ready serving", "ns/web:http/TCP 10.1.0.2:8080 ready serving",
				}},
		}},
		{name: "only the ports whose endpoints changed", syncs: []sync{
			{updates: []update{{slice: slice("web-1", "web", webDNS, []string{"10.1.0.1"}), wantChanged: true}},
				want:    []string{"ns/web:dns/UDP 10.1.0.1:53 ready serving", "ns/web:http/TCP 10.1.0.1:8080 ready serving"},
				changed: []string{"ns/web:dns/UDP", "ns/web:http/TCP"}},
			{updates: []update{{slice: slice("web-1", "web", []string{"http/TCP/9090", "dns/UDP/53"}, []string{"10.1.0.1"}), wantChanged: true}},
				want:    []string{"ns/web:dns/UDP 10.1.0.1:53 ready serving", "ns/web:http/TCP 10.1.0.1:9090 ready serving"},
				changed: []string{"ns/web:http/TCP"}},
			{updates: []update{{slice: slice("web-1", "web", []string{"http/TCP/9090"}, []string{"10.1.0.1"}), wantChanged: true}},
				want:    []string{"ns/web:http/TCP 10.1.0.1:9090 ready serving"},
				changed: []string{"ns/web:dns/UDP"}},
			{updates: []update{{slice: slice("web-1", "web", nil, nil), removed: true, wantChanged: true}},
				changed: []string{"ns/web:http/TCP"}},
		}},
		{name: "ignored: other family, FQDN, no service label, unknown removal", syncs: []sync{
			{updates: []update{
				{slice: slice("web-6", "web", web, []string{"fd00::1"})},
				{slice: slice("web-f", "web", web, []string{"10.1.0.1"}, func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeFQDN })},
				{slice: slice("loose", "", web, []string{"10.1.0.1"})},
				{slice: slice("web-x", "web", web, nil), removed: true},
			}},
		}},
		{name: "IPv6 proxy", family: corev1.IPv6Protocol, syncs: []sync{
			{updates: []update{
				{slice: slice("web-6", "web", web, []string{"fd00::1 node=n1"}), wantChanged: true},
				{slice: slice("web-4", "web", web, []string{"10.1.0.1"})},
			},
				want:    []string{"ns/web:http/TCP [fd00::1]:8080 ready serving local node=n1"},
				changed: []string{"ns/web:http/TCP"}},
		}},
		{name: "bad endpoints and ports skipped, once reported", syncs: []sync{
			{updates: []update{{slice: slice("web-1", "web", []string{"http/TCP/8080", "bad/TCP/0"}, []string{"10.1.0.1", "10.1.0.300", "fd00::1"}), wantChanged: true}},
				want:    []string{"ns/web:http/TCP 10.1.0.1:8080 ready serving"},
				changed: []string{"ns/web:http/TCP"}, problems: 1},
		}},
		{name: "trigger times: after the start, dropped with the slice", syncs: []sync{
			{updates: []update{
				{slice: slice("web-1", "web", web, []string{"10.1.0.1"}, triggeredAt(start.Add(-time.Second))), wantChanged: true},
				{slice: slice("web-1", "web", web, []string{"10.1.0.2"}, triggeredAt(start.Add(time.Second))), wantChanged: true},
				{slice: slice("web-2", "web", web, []string{"10.1.0.3"}, triggeredAt(start.Add(2*time.Second))), wantChanged: true},
				{slice: slice("web-2", "web", web, []string{"10.1.0.3"}, triggeredAt(start.Add(3*time.Second)))},
			},
				want:     []string{"ns/web:http/TCP 10.1.0.2:8080 ready serving", "ns/web:http/TCP 10.1.0.3:8080 ready serving"},
				changed:  []string{"ns/web:http/TCP"},
				triggers: []time.Time{start.Add(time.Second), start.Add(2 * time.Second)}},
			{updates: []update{
				{slice: slice("web-1", "web", web, []string{"10.1.0.4"}, triggeredAt(start.Add(4*time.Second))), wantChanged: true},
				{slice: slice("web-2", "web", web, nil), removed: true, wantChanged: true},
			},
				want:    []string{"ns/web:http/TCP 10.1.0.4:8080 ready serving"},
				changed: []string{"ns/web:http/TCP"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			family := tc.family
			if family == "" {
				family = corev1.IPv4Protocol
			}
			tr := NewEndpointsChangeTracker(family, "n1", start)
			problems := 0
			tr.OnProblem = func(Problem) { problems++ }
			m := EndpointsMap{}
			for i, s := range tc.syncs {
				problems = 0
				for j, u := range s.updates {
					if got := tr.Update(u.slice, u.removed); got != u.wantChanged {
						t.Errorf("sync %d update %d: changed %v, want %v", i, j, got, u.wantChanged)
					}
				}
				if problems != s.problems {
					t.Errorf("sync %d: %d problems, want %d", i, problems, s.problems)
				}
				u := tr.Apply(m)
				if tr.Pending() != 0 {
					t.Errorf("sync %d: %d pending after Apply", i, tr.Pending())
				}
				if got := describeEndpoints(m); !slices.Equal(got, s.want) {
					t.Errorf("sync %d: endpoints\n  %s\nwant\n  %s", i, strings.Join(got, "\n  "), strings.Join(s.want, "\n  "))
				}
				var changed []string
				for name := range u.Changed {
					changed = append(changed, name.String())
				}
				sort.Strings(changed)
				if !slices.Equal(changed, s.changed) {
					t.Errorf("sync %d: changed %v, want %v", i, changed, s.changed)
				}
				triggers := u.TriggerTimes[types.NamespacedName{Namespace: "ns", Name: "web"}]
				slices.SortFunc(triggers, time.Time.Compare)
				if !slices.EqualFunc(triggers, s.triggers, time.Time.Equal) {
					t.Errorf("sync %d: trigger times %v, want %v", i, triggers, s.triggers)
				}
			}
		})
	}
}

// BenchmarkTrackerMemory reports the live heap the tracker and the merged map hold for 10k
// Services with one slice of 10 endpoints each (the proxy benchmark's shape), per endpoint.
func BenchmarkTrackerMemory(b *testing.B) {
	const services, perService = 10000, 10
	in := make([]*discoveryv1.EndpointSlice, services)
	for i := range in {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "b", Name: fmt.Sprint("svc-", i), Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprint("svc-", i)}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
		}
		for e := range perService {
			n := i*perService + e
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 100+n>>16, (n>>8)&255, n&255)},
				Conditions: discoveryv1.EndpointConditions{Ready: new(true)}, NodeName: new("node-1")})
		}
		in[i] = s
	}
	var live uint64
	for b.Loop() {
		live = testserver.LiveHeap(func() any {
			tr := NewEndpointsChangeTracker(corev1.IPv4Protocol, "node-1", time.Now())
			for _, s := range in {
				tr.Update(s, false)
			}
			m := EndpointsMap{}
			tr.Apply(m)
			return []any{tr, m}
		})
	}
	b.ReportMetric(float64(live)/1e6, "live-MB")
	b.ReportMetric(float64(live)/(services*perService), "B/endpoint")
}
