package proxy

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyLog is a DataPath that logs what each Apply was given and fails as often as told.
type applyLog struct {
	mu       sync.Mutex
	applies  []applied
	failNext int
	panics   bool // failures are panics
	notify   chan struct{}
}

type applied struct {
	full             bool
	changed, udp     []string
	services, zone   string
	endpointsOfPorts int
}

func (l *applyLog) Apply(_ context.Context, s State) error {
	var names []string
	for name := range s.Services {
		names = append(names, name.String())
	}
	sort.Strings(names)
	a := applied{full: s.Changed == nil, changed: sortedNames(s.Changed), udp: sortedNames(s.UDPChanged), zone: s.Zone,
		endpointsOfPorts: len(s.Endpoints)}
	for _, n := range names {
		a.services += n + " "
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applies = append(l.applies, a)
	l.notify <- struct{}{}
	if l.failNext > 0 {
		l.failNext--
		if l.panics {
			panic("failing as told")
		}
		return errors.New("failing as told")
	}
	return nil
}

func sortedNames(m map[ServicePortName]bool) []string {
	var out []string
	for name := range m {
		out = append(out, name.String())
	}
	sort.Strings(out)
	return out
}

// TestProxierSyncs drives a Proxier through its handler methods, as the configs would, and
// checks each Apply that follows (or that none does).
func TestProxierSyncs(t *testing.T) {
	a := service("a", []string{"10.0.0.1"}, []string{"80/TCP/http"})
	aRelabelled := service("a", []string{"10.0.0.1"}, []string{"80/TCP/http"}, func(s *corev1.Service) { s.Labels = map[string]string{"x": "y"} })
	b := service("b", []string{"10.0.0.2"}, []string{"53/UDP/dns"})
	node := func(zone, color string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelTopologyZone: zone, "color": color}}}
	}
	z1 := node("z1", "red")

	type step struct {
		name   string
		do     func(p *Proxier)
		fail   int        // Applies to fail from here
		panics bool       // fail by panicking
		want   []*applied // the Applies that follow; none: no Apply for a while
	}
	for _, steps := range [][]step{{
		{name: "service before sync", do: func(p *Proxier) { p.OnServiceAdd(a) }},
		{name: "services synced", do: func(p *Proxier) { p.OnServiceSynced() }},
		{name: "slice before sync", do: func(p *Proxier) {
			p.OnEndpointSliceAdd(slice("a-1", "a", []string{"http/TCP/8080"}, []string{"10.1.0.1"}))
		}},
		{name: "slices synced: the first, full sync", do: func(p *Proxier) { p.OnEndpointSliceSynced() },
			want: []*applied{{full: true, services: "ns/a:http/TCP ", endpointsOfPorts: 1}}},
		{name: "a change of nothing the proxy uses", do: func(p *Proxier) { p.OnServiceUpdate(a, aRelabelled) }},
		{name: "a new service: partial", do: func(p *Proxier) { p.OnServiceAdd(b) },
			want: []*applied{{changed: []string{"ns/b:dns/UDP"}, udp: []string{"ns/b:dns/UDP"}, services: "ns/a:http/TCP ns/b:dns/UDP ", endpointsOfPorts: 1}}},
		{name: "the node's zone appears: full", do: func(p *Proxier) { p.OnNodeAdd(z1) },
			want: []*applied{{full: true, zone: "z1", services: "ns/a:http/TCP ns/b:dns/UDP ", endpointsOfPorts: 1}}},
		{name: "another node change: nothing", do: func(p *Proxier) { p.OnNodeUpdate(z1, node("z1", "blue")) }},
		{name: "a failed partial sync is retried full", fail: 1, do: func(p *Proxier) { p.OnServiceDelete(b) },
			want: []*applied{
				{changed: []string{"ns/b:dns/UDP"}, udp: []string{"ns/b:dns/UDP"}, zone: "z1", services: "ns/a:http/TCP ", endpointsOfPorts: 1},
				{full: true, udp: []string{"ns/b:dns/UDP"}, zone: "z1", services: "ns/a:http/TCP ", endpointsOfPorts: 1},
			}},
		{name: "a panicking data path: a failed sync", fail: 1, panics: true, do: func(p *Proxier) { p.OnServiceAdd(b) },
			want: []*applied{
				{changed: []string{"ns/b:dns/UDP"}, udp: []string{"ns/b:dns/UDP"}, zone: "z1", services: "ns/a:http/TCP ns/b:dns/UDP ", endpointsOfPorts: 1},
				{full: true, udp: []string{"ns/b:dns/UDP"}, zone: "z1", services: "ns/a:http/TCP ns/b:dns/UDP ", endpointsOfPorts: 1},
			}},
		{name: "the slice goes: partial", do: func(p *Proxier) {
			p.OnEndpointSliceDelete(slice("a-1", "a", []string{"http/TCP/8080"}, []string{"10.1.0.1"}))
		}, want: []*applied{{changed: []string{"ns/a:http/TCP"}, zone: "z1", services: "ns/a:http/TCP ns/b:dns/UDP "}}},
	}, {
		{name: "slices first", do: func(p *Proxier) { p.OnEndpointSliceSynced() }},
		{name: "then services: the first sync", do: func(p *Proxier) { p.OnServiceSynced() }, want: []*applied{{full: true}}},
	}} {
		t.Run(steps[0].name, func(t *testing.T) {
			log := &applyLog{notify: make(chan struct{}, 16)}
			p, err := NewProxier(ProxierConfig{DataPath: log, NodeName: "n1", SyncPeriod: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { p.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			seen := 0
			for _, s := range steps {
				log.mu.Lock()
				log.failNext, log.panics = s.fail, s.panics
				log.mu.Unlock()
				s.do(p)
				for range s.want {
					select {
					case <-log.notify:
					case <-time.After(10 * time.Second):
						t.Fatalf("%s: no Apply", s.name)
					}
				}
				if len(s.want) == 0 {
					select {
					case <-log.notify:
					case <-time.After(50 * time.Millisecond):
					}
				}
				log.mu.Lock()
				got := slices.Clone(log.applies[seen:])
				log.mu.Unlock()
				seen += len(got)
				if len(got) != len(s.want) {
					t.Fatalf("%s: %d Applies %+v, want %d", s.name, len(got), got, len(s.want))
				}
				for i, g := range got {
					w := s.want[i]
					if g.full != w.full || !slices.Equal(g.changed, w.changed) || !slices.Equal(g.udp, w.udp) ||
						g.services != w.services || g.zone != w.zone || g.endpointsOfPorts != w.endpointsOfPorts {
						t.Errorf("%s: Apply %d got %+v, want %+v", s.name, i, g, *w)
					}
				}
			}
			if !maps.Equal(p.reported, map[ServicePortName]string{}) {
				t.Errorf("problems reported: %v", p.reported)
			}
		})
	}
}
