package userspace

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proxy"
)

// The benchmarks measure each path against a direct connection to the same backend, in one run:
// BenchmarkThroughput reports the ratio itself; for BenchmarkRequestLatency compare its
// "direct" and "userspace" sub-benchmarks.

const bulkBytes = 64 << 20

// BenchmarkThroughput sends bulkBytes per path per op over one long-lived connection per path
// to a backend that discards the data and acknowledges each complete block with one byte. The
// sender writes one 256 KiB buffer over and over, as iperf-like tools do. Each op sends a block
// directly and one through the proxy, in turns (direct first in even ops, last in odd ones), so
// that both see the same machine; the figure to compare is the median over the ops of each op's
// ratio (userspace/direct throughput), reported with the ratio of the mean throughputs: the MB/s
// of each path swing widely from run to run on a small shared machine.
func BenchmarkThroughput(b *testing.B) {
	backend := startSinkBackend(b, bulkBytes)
	paths := benchPaths(b, backend)
	conns := make([]*net.TCPConn, len(paths))
	for i, path := range paths {
		conns[i] = dialTCP(b, path.addr, netip.Addr{})
	}
	chunk := bytes.Repeat([]byte("kplane"), 256<<10/6+1)[:256<<10]
	ack := make([]byte, 1)
	send := func(c *net.TCPConn) time.Duration {
		start := time.Now()
		for sent := 0; sent < bulkBytes; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := io.ReadFull(c, ack); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for _, c := range conns {
		send(c) // warm up: let both connections grow their windows first
	}
	direct, proxied := slices.IndexFunc(paths, isPath("direct")), slices.IndexFunc(paths, isPath("userspace"))
	total := make([]time.Duration, len(paths))
	var ratios []float64
	b.ResetTimer()
	for op := range b.N {
		spent := make([]time.Duration, len(paths))
		for k := range conns {
			i := k
			if op%2 == 1 {
				i = len(conns) - 1 - k
			}
			spent[i] = send(conns[i])
			total[i] += spent[i]
		}
		ratios = append(ratios, spent[direct].Seconds()/spent[proxied].Seconds())
	}
	for i, path := range paths {
		b.ReportMetric(float64(b.N)*bulkBytes/1e6/total[i].Seconds(), path.name+"-MB/s")
	}
	slices.Sort(ratios)
	median := (ratios[(len(ratios)-1)/2] + ratios[len(ratios)/2]) / 2
	b.ReportMetric(median, "userspace/direct")
	b.ReportMetric(total[direct].Seconds()/total[proxied].Seconds(), "mean-userspace/direct")
}

func isPath(name string) func(benchPath) bool {
	return func(p benchPath) bool { return p.name == name }
}

// BenchmarkRequestLatency measures one small request and its answer: on a connection kept
// open, and with a new connection per request (which adds the proxy's accept and dial).
func BenchmarkRequestLatency(b *testing.B) {
	backend := startEchoBackend(b)
	request := make([]byte, 64)
	answer := make([]byte, len(request))
	for _, path := range benchPaths(b, backend) {
		b.Run(path.name+"/kept-connection", func(b *testing.B) {
			c := dialTCP(b, path.addr, netip.Addr{})
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(request); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, answer); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(path.name+"/new-connection", func(b *testing.B) {
			for range b.N {
				c, err := net.Dial("tcp", path.addr.String())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write(request); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, answer); err != nil {
					b.Fatal(err)
				}
				_ = c.Close()
			}
		})
	}
}

type benchPath struct {
	name string
	addr netip.AddrPort
}

// benchPaths returns the backend's own address and a ClusterIP the proxy forwards to it.
func benchPaths(b *testing.B, backend netip.AddrPort) []benchPath {
	p, _ := newTestProxier(b, Options{})
	svc := servicePortSpec(portName("bench", corev1.ProtocolTCP), serviceIP(b), servicePortNumber)
	apply(b, p, oneService(svc, ready(backend)))
	return []benchPath{
		{name: "direct", addr: backend},
		{name: "userspace", addr: netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port))},
	}
}

// startSinkBackend reads blocks of blockSize bytes and acknowledges each with one byte.
func startSinkBackend(b *testing.B, blockSize int) netip.AddrPort {
	return serveBackend(b, func(c *net.TCPConn) {
		buf := make([]byte, 1<<20)
		for {
			for left := blockSize; left > 0; {
				n, err := c.Read(buf[:min(left, len(buf))])
				if err != nil {
					return
				}
				left -= n
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	})
}

// BenchmarkPartialApply measures the Apply of one service port's endpoint change (a partial
// sync) while the proxier serves partialApplyServices service ports, each with its own
// listener on 127.65.0.0/16: its cost should not grow with the number of services.
func BenchmarkPartialApply(b *testing.B) {
	const partialApplyServices = 10000
	p, _ := newTestProxier(b, Options{})
	state := proxy.State{Services: map[proxy.ServicePortName]*proxy.ServicePort{}, Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{}}
	names := make([]proxy.ServicePortName, partialApplyServices)
	for i := range names {
		names[i] = portName(fmt.Sprint("svc-", i), corev1.ProtocolTCP)
		ip := netip.AddrFrom4([4]byte{127, 65, byte(i >> 8), byte(i)})
		state.Services[names[i]] = servicePortSpec(names[i], ip, 80)
		state.Endpoints[names[i]] = ready(netip.AddrPortFrom(backendIP(), 8080))
	}
	apply(b, p, state)
	if n := len(p.listeners); n != partialApplyServices {
		b.Fatalf("%d listeners, want %d", n, partialApplyServices)
	}
	b.ResetTimer()
	for i := range b.N {
		name := names[i%len(names)]
		state.Endpoints[name] = ready(netip.AddrPortFrom(backendIP(), uint16(8000+i%1000)))
		state.Changed = map[proxy.ServicePortName]bool{name: true}
		if err := p.Apply(context.Background(), state); err != nil {
			b.Fatal(err)
		}
	}
}
