package userspace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kplane/kplane/proxy"
)

// Addresses: services on 127.0.10.x, backends on 127.0.20.x, extra client addresses on
// 127.0.30.x, load-balancer addresses of the tests through the API server on 127.0.40.x. Every test takes fresh service addresses so that a test never meets a socket
// of an earlier one (with -count=N they come round again, long after their tests ended).
var lastServiceIP atomic.Uint32

func serviceIP(t testing.TB) netip.Addr {
	t.Helper()
	n := lastServiceIP.Add(1)
	return netip.AddrFrom4([4]byte{127, 0, 10, byte(1 + (n-1)%250)})
}

var lastBackendIP atomic.Uint32

func backendIP() netip.Addr {
	n := lastBackendIP.Add(1)
	return netip.AddrFrom4([4]byte{127, 0, 20, byte(1 + n%250)})
}

const servicePortNumber = 8080

// freePort returns a port that was free on every address a moment ago, for NodePorts.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// newTestProxier starts a Proxier with its own metrics registry and a captured log. Closing
// it, and checking that none of its goroutines outlive Close, is left to cleanup.
func newTestProxier(t testing.TB, opts Options) (*Proxier, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Registerer = prometheus.NewRegistry()
	p := New(opts)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		noProxierGoroutines(t)
		if t.Failed() {
			t.Logf("proxier log:\n%s", logs.String())
		}
	})
	return p, logs
}

func apply(t testing.TB, p *Proxier, s proxy.State) {
	t.Helper()
	if err := p.Apply(context.Background(), s); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	checkSocketIndex(t, p)
}

// checkSocketIndex fails the test unless p.socketsOf indexes exactly p.listeners and p.failing
// by their owners.
func checkSocketIndex(t testing.TB, p *Proxier) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	want := map[proxy.ServicePortName]map[listenerKey]bool{}
	own := func(name proxy.ServicePortName, key listenerKey) {
		if want[name] == nil {
			want[name] = map[listenerKey]bool{}
		}
		want[name][key] = true
	}
	for key, l := range p.listeners {
		own(l.route.sp.name, key)
	}
	for key, f := range p.failing {
		own(f.owner, key)
	}
	if !reflect.DeepEqual(p.socketsOf, want) {
		t.Fatalf("socket index %v, want %v", p.socketsOf, want)
	}
}

// logBuffer collects log output from many goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) count(substr string) int { return strings.Count(l.String(), substr) }

// proxierGoroutines returns the stacks of live goroutines running this package's non-test
// code.
func proxierGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.Contains(line, "/proxy/userspace/") && !strings.Contains(line, "_test.go:") {
				ours = append(ours, g)
				break
			}
		}
	}
	return ours
}

// noProxierGoroutines fails the test if goroutines of the proxier are still alive shortly
// after Close returned (a goroutine past wg.Done may need a moment to be gone).
func noProxierGoroutines(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := proxierGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d proxier goroutines still running after Close:\n%s", len(left), strings.Join(left, "\n\n"))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counter reads one counter or gauge of the proxier's metrics (summed, if given a vector).
func counter(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			panic(err)
		}
		sum += d.GetCounter().GetValue() + d.GetGauge().GetValue()
	}
	return sum
}

// --- service state ---

func portName(name string, protocol corev1.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: "test", Name: name},
		Port:           strings.ToLower(string(protocol)),
		Protocol:       protocol,
	}
}

func servicePortSpec(name proxy.ServicePortName, ip netip.Addr, port int) *proxy.ServicePort {
	return &proxy.ServicePort{Name: name, ClusterIP: ip, Port: port, Protocol: name.Protocol}
}

func ready(addrs ...netip.AddrPort) []proxy.Endpoint {
	eps := make([]proxy.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = proxy.Endpoint{Addr: a, Ready: true, Serving: true}
	}
	return eps
}

// oneService is the full state with a single service port.
func oneService(spec *proxy.ServicePort, eps []proxy.Endpoint) proxy.State {
	return proxy.State{
		Services:  map[proxy.ServicePortName]*proxy.ServicePort{spec.Name: spec},
		Endpoints: map[proxy.ServicePortName][]proxy.Endpoint{spec.Name: eps},
	}
}

// --- backends ---

// tcpBackend answers every line it reads with its name, on every connection.
type tcpBackend struct {
	name string
	addr netip.AddrPort
	ln   net.Listener
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
}

func startTCPBackend(t *testing.T, name string) *tcpBackend {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(backendIP(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	b := &tcpBackend{name: name, addr: ln.Addr().(*net.TCPAddr).AddrPort(), ln: ln, conns: make(map[net.Conn]bool)}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns[c] = true
			b.mu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := io.WriteString(c, b.name+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(b.stop)
	return b
}

// stop closes the listener and every connection, like a process that exits.
func (b *tcpBackend) stop() {
	_ = b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// serveBackend listens on a fresh backend address and serves each connection with serve,
// until the test ends (the cleanup waits for every connection's serve to return).
func serveBackend(t testing.TB, serve func(*net.TCPConn)) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(backendIP(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c.(*net.TCPConn))
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// startEchoBackend sends back everything it reads and half-closes when the client does.
func startEchoBackend(t testing.TB) netip.AddrPort {
	t.Helper()
	return serveBackend(t, func(c *net.TCPConn) {
		_, _ = io.Copy(c, c)
		_ = c.CloseWrite()
	})
}

// udpBackend answers every datagram with its name.
type udpBackend struct {
	name string
	addr netip.AddrPort
	conn *net.UDPConn
	done chan struct{}
}

func startUDPBackend(t *testing.T, name string) *udpBackend {
	t.Helper()
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(backendIP(), 0)))
	if err != nil {
		t.Fatal(err)
	}
	b := &udpBackend{name: name, addr: conn.LocalAddr().(*net.UDPAddr).AddrPort(), conn: conn, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		buf := make([]byte, 2048)
		for {
			_, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			_, _ = conn.WriteToUDPAddrPort([]byte(b.name), from)
		}
	}()
	t.Cleanup(func() { _ = conn.Close(); <-b.done })
	return b
}

// --- clients ---

const ioTimeout = 5 * time.Second

// dialTCP connects to addr, from the local address from when it is valid.
func dialTCP(t testing.TB, addr netip.AddrPort, from netip.Addr) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: ioTimeout}
	if from.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
	}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// ask sends one line on c and returns the backend's name from the answer.
func ask(c net.Conn) (string, error) {
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(c, "who\n"); err != nil {
		return "", err
	}
	// One byte at a time, so that nothing past the line is consumed from the connection.
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			return "", err
		}
		if b[0] == '\n' {
			return string(line), nil
		}
		line = append(line, b[0])
	}
}

// whoAnswers opens a new connection to addr and returns the name of the backend behind it.
func whoAnswers(t *testing.T, addr netip.AddrPort, from netip.Addr) string {
	t.Helper()
	c := dialTCP(t, addr, from)
	defer c.Close()
	name, err := ask(c)
	if err != nil {
		t.Fatalf("ask %s: %v", addr, err)
	}
	return name
}

// askUDP sends one datagram from conn and returns the answer.
func askUDP(conn *net.UDPConn) (string, error) {
	_ = conn.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := conn.Write([]byte("who")); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func dialUDP(t *testing.T, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// eventually retries check until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countNames(names []string) map[string]int {
	m := make(map[string]int)
	for _, n := range names {
		m[n]++
	}
	return m
}

func mustEqualCounts(t *testing.T, got map[string]int, want map[string]int) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers per backend = %v, want %v", got, want)
	}
}
