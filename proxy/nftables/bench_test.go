package nftables

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/knftables"

	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/proxy"
)

// BenchmarkDataPath compares, in one run, a client talking to a backend directly (routed
// through the node) and through a ClusterIP the node DNATs: bulk TCP throughput, small
// request/response latency on an open connection, and connect + first answer.
func BenchmarkDataPath(b *testing.B) {
	l := newLab(b, 1)
	p, err := New(Options{NetNS: l.nodeNS, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	be := l.backends[0]
	w := newWorld()
	w.set(svcPort(spn("bench", "who", "", corev1.ProtocolTCP), "10.96.0.10", 80),
		ready(netip.AddrPortFrom(be.ip, whoPort).String()))
	w.set(svcPort(spn("bench", "sink", "", corev1.ProtocolTCP), "10.96.0.10", 81),
		ready(netip.AddrPortFrom(be.ip, sinkPort).String()))
	if err := p.Apply(context.Background(), w.state(true)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Cleanup(context.Background()) })

	paths := []struct {
		name      string
		who, sink netip.AddrPort
	}{
		{"direct", netip.AddrPortFrom(be.ip, whoPort), netip.AddrPortFrom(be.ip, sinkPort)},
		{"nftables", netip.MustParseAddrPort("10.96.0.10:80"), netip.MustParseAddrPort("10.96.0.10:81")},
	}
	const chunk = 16 << 20
	buf := make([]byte, 1<<20)
	for _, path := range paths {
		b.Run("bulk/"+path.name, func(b *testing.B) {
			c, err := l.dial(path.sink)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(chunk)
			var hdr [8]byte
			var ack [1]byte
			binary.BigEndian.PutUint64(hdr[:], chunk)
			for b.Loop() {
				if _, err := c.Write(hdr[:]); err != nil {
					b.Fatal(err)
				}
				for sent := 0; sent < chunk; sent += len(buf) {
					if _, err := c.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := io.ReadFull(c, ack[:]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, path := range paths {
		b.Run("request/"+path.name, func(b *testing.B) {
			c, _, _, err := l.who(path.who)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg, reply := make([]byte, 64), make([]byte, 64)
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, path := range paths {
		b.Run("connect/"+path.name, func(b *testing.B) {
			for b.Loop() {
				c, err := l.dial(path.who)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// BenchmarkSync measures Apply against the real nft in a namespace: a full sync of 10k
// service ports with 10 endpoints each, and a partial sync after one of them changed.
func BenchmarkSync(b *testing.B) {
	needLab(b)
	name := nsName("sync")
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v: %s", err, out)
	}
	b.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	p, err := New(Options{NetNS: "/run/netns/" + name, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	const services, perService = 10000, 10
	w := newWorld()
	names := make([]proxy.ServicePortName, services)
	for i := range services {
		names[i] = spn("bench", fmt.Sprintf("svc-%d", i), "http", corev1.ProtocolTCP)
		var opts []svcOpt
		if i%10 == 0 {
			opts = append(opts, nodePort(30000+i/10))
		}
		eps := make([]proxy.Endpoint, perService)
		for e := range eps {
			n := i*perService + e
			eps[e] = ready(fmt.Sprintf("10.%d.%d.%d:8080", 128+n>>16, n>>8&255, n&255))
		}
		w.set(svcPort(names[i], fmt.Sprintf("10.96.%d.%d", i>>8, i&255), 80, opts...), eps...)
	}
	full := w.state(true)

	b.Run("full-10k-services", func(b *testing.B) {
		for b.Loop() {
			if err := p.Apply(context.Background(), full); err != nil {
				b.Fatal(err)
			}
		}
	})
	// partial times the Apply of each op's one change, and reports its p50 and max besides
	// the mean: the maps' catch-up runs 100 ms after a change, holding the proxier's lock,
	// and ops back to back sometimes wait for it.
	partial := func(b *testing.B, change func(i int)) {
		if err := p.Apply(context.Background(), full); err != nil {
			b.Fatal(err)
		}
		var took []time.Duration
		for i := 0; b.Loop(); i++ {
			change(i)
			began := time.Now()
			if err := p.Apply(context.Background(), w.state(false)); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(began))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
	}
	b.Run("partial-1-changed", func(b *testing.B) {
		partial(b, func(i int) {
			// One endpoint replaced: the service's chain and nothing else changes.
			n := names[i%services]
			eps := w.endpoints[n]
			w.set(w.services[n], append(eps[1:len(eps):len(eps)], ready(fmt.Sprintf("10.200.%d.%d:8080", i>>8&255, i&255)))...)
		})
	})
	b.Run("partial-1-not-ready", func(b *testing.B) {
		partial(b, func(i int) {
			// One endpoint of a ClusterIP-only service turns not ready (10 ready become 9),
			// and back on the next op: the number of endpoints to pick from changes.
			n := names[(i/2)%services/10*10+1]
			eps := slices.Clone(w.endpoints[n])
			eps[0].Ready, eps[0].Serving = i%2 == 1, i%2 == 1
			w.set(w.services[n], eps...)
		})
	})
	b.Cleanup(func() { _ = p.Cleanup(context.Background()) })
}

// BenchmarkElementsMemory reports the live heap the element tracking holds, once programmed,
// for 10k ClusterIP service ports with 10 endpoints each (120k elements).
func BenchmarkElementsMemory(b *testing.B) {
	pl := planner{masqRule: "mark set mark or 0x4000"}
	plans := map[proxy.ServicePortName]*plan{}
	for i := range 10000 {
		n := spn("bench", fmt.Sprintf("svc-%d", i), "http", corev1.ProtocolTCP)
		eps := make([]proxy.Endpoint, 10)
		for e := range eps {
			k := i*10 + e
			eps[e] = ready(fmt.Sprintf("10.%d.%d.%d:8080", 128+k>>16, k>>8&255, k&255))
		}
		plans[n] = pl.plan(n, svcPort(n, fmt.Sprintf("10.96.%d.%d", i>>8, i&255), 80), eps)
	}
	var live uint64
	for b.Loop() {
		live = testserver.LiveHeap(func() *elements {
			e := newElements()
			for n, p := range plans {
				e.set(n, nil, p.elems)
			}
			e.diff(knftables.NewFake(knftables.IPv4Family, TableName).NewTransaction())
			return e
		})
	}
	b.ReportMetric(float64(live)/1e6, "live-MB")
}
