package nftables

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A lab is a small network of namespaces, one per host:
//
//	client 10.99.1.2 ── 10.99.1.1 node 10.99.1x.1 ── 10.99.1x.2 backend x (x = 1…n)
//
// The node routes between its links, with a default route towards the client (so that
// packets to service IPs it does not DNAT reach its forward hook, as on a real node); the
// proxier programs the node. Backends run servers in this process: sockets belong to the
// namespace of the thread that opened them.
type lab struct {
	client, node *nsWorker
	nodeNS       string // path, for Options.NetNS
	clientIP     netip.Addr
	nodeIP       netip.Addr // the node's address on the client's link
	backends     []*backend
}

// Test namespaces are named after the test process, so that a later run can remove what a
// killed one left behind.
const nsPrefix = "kpnft"

func nsName(role string) string { return fmt.Sprintf("%s%d-%s", nsPrefix, os.Getpid(), role) }

func TestMain(m *testing.M) {
	sweepNamespaces()
	before := runtime.NumGoroutine()
	code := m.Run()
	// Every goroutine the tests started (servers, namespace threads, nft commands) is gone.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before && code == 0 {
		buf := make([]byte, 1<<20)
		fmt.Fprintf(os.Stderr, "%d goroutines leaked:\n%s\n", n-before, buf[:runtime.Stack(buf, true)])
		code = 1
	}
	os.Exit(code)
}

// sweepNamespaces deletes the namespaces of test processes that no longer run.
func sweepNamespaces() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = exec.Command("ip", "netns", "del", name).Run()
	}
}

// needLab skips the test where the machine cannot run it: not root, no ip or nft, or
// namespaces forbidden.
func needLab(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates network namespaces and nftables rules")
	}
	for _, bin := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Skipf("needs the %s binary (apt-get install iproute2 nftables): %v", bin, err)
		}
	}
	probe := nsName("probe")
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		tb.Skipf("this machine forbids network namespaces: ip netns add: %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
}

func sh(tb testing.TB, args ...string) {
	tb.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newLab builds a lab with n backends; everything is removed when the test ends, whatever
// its outcome.
func newLab(tb testing.TB, n int) *lab {
	tb.Helper()
	needLab(tb)
	var names []string
	tb.Cleanup(func() {
		for _, name := range names {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				tb.Errorf("removing namespace %s: %v: %s", name, err, out)
			}
		}
	})
	addNS := func(role string) string {
		name := nsName(role)
		sh(tb, "ip", "netns", "add", name)
		names = append(names, name)
		sh(tb, "ip", "-n", name, "link", "set", "lo", "up")
		return name
	}
	client, node := addNS("client"), addNS("node")
	sh(tb, "ip", "link", "add", "c0", "netns", client, "type", "veth", "peer", "name", "n0", "netns", node)
	sh(tb, "ip", "-n", client, "addr", "add", "10.99.1.2/24", "dev", "c0")
	sh(tb, "ip", "-n", client, "link", "set", "c0", "up")
	sh(tb, "ip", "-n", client, "route", "add", "default", "via", "10.99.1.1")
	sh(tb, "ip", "-n", node, "addr", "add", "10.99.1.1/24", "dev", "n0")
	sh(tb, "ip", "-n", node, "link", "set", "n0", "up")
	sh(tb, "ip", "-n", node, "route", "add", "default", "via", "10.99.1.2")
	// No ICMP redirects for what it routes back out of n0 (service IPs without
	// endpoints): a redirect uses up the per-host ICMP rate limit that the reject's ICMP
	// port unreachable needs next.
	sh(tb, "ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.ip_forward=1",
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.n0.send_redirects=0")

	l := &lab{nodeNS: "/run/netns/" + node, clientIP: netip.MustParseAddr("10.99.1.2"), nodeIP: netip.MustParseAddr("10.99.1.1")}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("b%d", i)
		ns := addNS(name)
		nodeSide := fmt.Sprintf("10.99.%d.1", 10+i)
		ip := fmt.Sprintf("10.99.%d.2", 10+i)
		sh(tb, "ip", "link", "add", "b0", "netns", ns, "type", "veth", "peer", "name", "nb"+strconv.Itoa(i), "netns", node)
		sh(tb, "ip", "-n", ns, "addr", "add", ip+"/24", "dev", "b0")
		sh(tb, "ip", "-n", ns, "link", "set", "b0", "up")
		sh(tb, "ip", "-n", ns, "route", "add", "default", "via", nodeSide)
		sh(tb, "ip", "-n", node, "addr", "add", nodeSide+"/24", "dev", "nb"+strconv.Itoa(i))
		sh(tb, "ip", "-n", node, "link", "set", "nb"+strconv.Itoa(i), "up")
		b, err := startBackend(name, "/run/netns/"+ns, netip.MustParseAddr(ip))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(b.close)
		l.backends = append(l.backends, b)
	}
	var err error
	if l.client, err = newNSWorker("/run/netns/" + client); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(l.client.close)
	if l.node, err = newNSWorker(l.nodeNS); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(l.node.close)
	return l
}

// nsWorker runs functions on one thread inside a namespace (cheaper than inNetNS's thread
// per call, for benchmarks).
type nsWorker struct {
	work chan func()
	once sync.Once
}

func newNSWorker(path string) (*nsWorker, error) {
	w := &nsWorker{work: make(chan func())}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range w.work {
			f()
		}
	}()
	return w, <-ready
}

func (w *nsWorker) do(f func()) {
	done := make(chan struct{})
	w.work <- func() { f(); close(done) }
	<-done
}

func (w *nsWorker) close() { w.once.Do(func() { close(w.work) }) }

// Backend servers.
const (
	whoPort  = 8080 // TCP: says "<backend> <client address>\n", then echoes
	sinkPort = 8081 // TCP: reads 8-byte length, then that many bytes, answers one byte; repeats
	udpPort  = 8053 // UDP: answers each datagram with "<backend> <client address>"
)

type backend struct {
	name      string
	ip        netip.Addr
	who, sink net.Listener
	udp       net.PacketConn
	mu        sync.Mutex
	conns     map[net.Conn]bool
	wg        sync.WaitGroup
}

func startBackend(name, ns string, ip netip.Addr) (*backend, error) {
	b := &backend{name: name, ip: ip, conns: map[net.Conn]bool{}}
	err := inNetNS(ns, func() error {
		var err error
		if b.who, err = net.Listen("tcp", netip.AddrPortFrom(ip, whoPort).String()); err != nil {
			return err
		}
		if b.sink, err = net.Listen("tcp", netip.AddrPortFrom(ip, sinkPort).String()); err != nil {
			return err
		}
		b.udp, err = net.ListenPacket("udp", netip.AddrPortFrom(ip, udpPort).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", name, err)
	}
	b.serve(b.who, func(c net.Conn) {
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		fmt.Fprintf(c, "%s %s\n", name, host)
		_, _ = io.Copy(c, c)
	})
	b.serve(b.sink, func(c net.Conn) {
		var hdr [8]byte
		for {
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint64(hdr[:]))); err != nil {
				return
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	})
	b.wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := b.udp.ReadFrom(buf)
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(from.String())
			_, _ = b.udp.WriteTo([]byte(name+" "+host), from)
		}
	})
	return b, nil
}

func (b *backend) serve(ln net.Listener, handle func(net.Conn)) {
	b.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns[c] = true
			b.mu.Unlock()
			b.wg.Go(func() {
				defer func() {
					b.mu.Lock()
					delete(b.conns, c)
					b.mu.Unlock()
					c.Close()
				}()
				handle(c)
			})
		}
	})
}

func (b *backend) close() {
	b.who.Close()
	b.sink.Close()
	b.udp.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// dial connects from the client host.
func (l *lab) dial(addr netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	var err error
	l.client.do(func() { c, err = net.DialTimeout("tcp", addr.String(), 3*time.Second) })
	return c, err
}

// who connects to addr from the client and returns the connection, the backend that
// answered and the client address the backend saw.
func (l *lab) who(addr netip.AddrPort) (c net.Conn, backend, seen string, err error) {
	if c, err = l.dial(addr); err != nil {
		return nil, "", "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return nil, "", "", fmt.Errorf("reading greeting from %s: %w", addr, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	backend, seen, _ = strings.Cut(strings.TrimSpace(line), " ")
	return c, backend, seen, nil
}

// udpConn opens a UDP socket on the client, connected to addr (one conntrack flow).
func (l *lab) udpConn(addr netip.AddrPort) (*net.UDPConn, error) {
	var c *net.UDPConn
	var err error
	l.client.do(func() { c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr)) })
	return c, err
}

// ask sends a datagram and returns the answering backend's name.
func ask(c *net.UDPConn) (string, error) {
	if _, err := c.Write([]byte("?")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	name, _, _ := strings.Cut(string(buf[:n]), " ")
	return name, nil
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
