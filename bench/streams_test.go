package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

// streamBenchEnv, in a pod's environment, makes this benchmark binary (as the pod's command)
// the bulk-data peer of BenchmarkPortForward on $POD_IP:streamBenchPort instead of running
// benchmarks.
const (
	streamBenchEnv  = "KPLANE_BENCH_STREAM_PEER"
	streamBenchPort = "9000"
	streamBulk      = 64 << 20
)

func TestMain(m *testing.M) {
	if os.Getenv(streamBenchEnv) != "" {
		serveStreamPeer()
		return
	}
	os.Exit(m.Run())
}

// serveStreamPeer answers each connection's requests, one byte each: 'u' reads streamBulk
// bytes and answers one byte, 'd' writes streamBulk bytes.
func serveStreamPeer() {
	ln, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("POD_IP"), streamBenchPort))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	chunk := bytes.Repeat([]byte("kplane"), 256<<10/6+1)[:256<<10]
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			req := make([]byte, 1)
			for {
				if _, err := io.ReadFull(c, req); err != nil {
					return
				}
				var err error
				switch req[0] {
				case 'u':
					if _, err = io.CopyN(io.Discard, c, streamBulk); err == nil {
						_, err = c.Write(req)
					}
				case 'd':
					for sent := 0; sent < streamBulk && err == nil; sent += len(chunk) {
						_, err = c.Write(chunk)
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// streamBench is `kplane up` as a process with one pod running this binary as the peer.
type streamBench struct {
	up         *upProcess
	pod        *corev1.Pod
	kubeconfig string
}

func startStreamBench(b *testing.B) *streamBench {
	up := startUp(b)
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	pods := client.Resource[*corev1.Pod](up.c, "pods").Namespace("default")
	ctx := context.Background()
	if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "peer"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "bench", Command: []string{exe},
			Env: []corev1.EnvVar{{Name: streamBenchEnv, Value: "1"}}}}}}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := pods.Get(ctx, "peer")
		if err == nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning {
			if c, err := net.Dial("tcp", net.JoinHostPort(p.Status.PodIP, streamBenchPort)); err == nil {
				c.Close()
				return &streamBench{up: up, pod: p, kubeconfig: up.kubeconfig}
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the peer pod is not serving after a minute: %v %+v", err, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kubectl is the kubectl command for this setup; spdy makes it use SPDY instead of WebSocket.
func (s *streamBench) kubectl(ctx context.Context, spdy bool, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	cmd.Env = os.Environ()
	if spdy {
		cmd.Env = append(cmd.Env, "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// BenchmarkExec measures the round trip of `kubectl exec peer -- true` against `kplane up`
// (kubectl's start-up included), and the same exec through client-go's remotecommand in this
// process, which leaves kubectl's own start-up out: p50 and p99 in ms, over WebSocket (what
// kubectl uses first) and SPDY.
func BenchmarkExec(b *testing.B) {
	s := startStreamBench(b)
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(cfg.Host + "/api/v1/namespaces/default/pods/peer/exec?command=true&container=c&stdout=true&stderr=true")
	for _, proto := range []string{"websocket", "spdy"} {
		b.Run("kubectl/"+proto, func(b *testing.B) {
			lat := make([]time.Duration, b.N)
			for i := range b.N {
				start := time.Now()
				if out, err := s.kubectl(context.Background(), proto == "spdy", "exec", "peer", "--", "true").CombinedOutput(); err != nil {
					b.Fatalf("kubectl exec: %v: %s", err, out)
				}
				lat[i] = time.Since(start)
			}
			report(b, lat)
		})
		b.Run("client-go/"+proto, func(b *testing.B) {
			var e remotecommand.Executor
			if proto == "spdy" {
				e, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
			} else {
				e, err = remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
			}
			if err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, b.N)
			for i := range b.N {
				start := time.Now()
				if err := e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
					b.Fatal(err)
				}
				lat[i] = time.Since(start)
			}
			report(b, lat)
		})
	}
}

// BenchmarkPortForward measures bulk throughput through `kubectl port-forward pod/peer`
// (WebSocket tunnel, and SPDY) against a direct connection to the pod, both ways, and, for
// scale, through three plain relays in this process (io.Copy both ways: the three loopback
// hops a forwarded connection takes — to kubectl, to the apiserver, to the agent — without
// anything else): each op moves one 64 MB block over each path in turn (the order reversed
// in odd ops), on connections kept open, after a warm-up block per path; it reports each
// path's MB/s, the medians of the per-op ratios forwarded/direct and relays/direct, and the
// CPU time `kplane up` (apiserver and agent) spent per GB forwarded.
func BenchmarkPortForward(b *testing.B) {
	s := startStreamBench(b)
	for _, proto := range []string{"websocket", "spdy"} {
		b.Run(proto, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cmd := s.kubectl(ctx, proto == "spdy", "port-forward", "pod/peer", ":"+streamBenchPort)
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { cancel(); _ = cmd.Wait() }()
			local := ""
			lines := bufio.NewScanner(stdout)
			forwarding := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> `)
			for local == "" && lines.Scan() {
				if m := forwarding.FindStringSubmatch(lines.Text()); m != nil {
					local = m[1]
				}
			}
			if local == "" {
				b.Fatal("kubectl port-forward did not start")
			}
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			direct := net.JoinHostPort(s.pod.Status.PodIP, streamBenchPort)
			paths := []struct{ name, addr string }{{"direct", direct}, {"forwarded", local}, {"3-relays", relays(b, 3, direct)}}
			conns := make([]net.Conn, len(paths))
			for i, p := range paths {
				c, err := net.Dial("tcp", p.addr)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				conns[i] = c
			}
			for _, dir := range []byte{'u', 'd'} {
				name := map[byte]string{'u': "upload", 'd': "download"}[dir]
				b.Run(name, func(b *testing.B) {
					for _, c := range conns {
						moveBlock(b, c, dir) // warm up
					}
					total := make([]time.Duration, len(conns))
					ratios := make([][]float64, len(conns))
					var kplaneCPU time.Duration // while forwarding
					b.ResetTimer()
					for op := range b.N {
						spent := make([]time.Duration, len(conns))
						for k := range conns {
							i := k
							if op%2 == 1 {
								i = len(conns) - 1 - k
							}
							cpu := cpuTime(s.up.cmd.Process.Pid)
							spent[i] = moveBlock(b, conns[i], dir)
							total[i] += spent[i]
							if paths[i].name == "forwarded" {
								kplaneCPU += cpuTime(s.up.cmd.Process.Pid) - cpu
							}
						}
						for i := range conns {
							ratios[i] = append(ratios[i], spent[0].Seconds()/spent[i].Seconds())
						}
					}
					b.ReportMetric(kplaneCPU.Seconds()/(float64(b.N)*streamBulk/1e9), "kplane-CPU-s/GB")
					for i, p := range paths {
						b.ReportMetric(float64(b.N)*streamBulk/1e6/total[i].Seconds(), p.name+"-MB/s")
						if i > 0 {
							r := ratios[i]
							slices.Sort(r)
							b.ReportMetric((r[(len(r)-1)/2]+r[len(r)/2])/2, p.name+"/direct")
						}
					}
				})
			}
		})
	}
}

// relays starts n relays in a row in front of addr, each copying both ways between a
// connection it accepts and one it opens to the next, and returns the first one's address.
func relays(b *testing.B, n int, addr string) string {
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ln.Close() })
		next := addr
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					u, err := net.Dial("tcp", next)
					if err != nil {
						return
					}
					defer u.Close()
					go func() { _, _ = io.Copy(u, c) }()
					_, _ = io.Copy(c, u)
				}()
			}
		}()
		addr = ln.Addr().String()
	}
	return addr
}

// moveBlock moves one block over c in direction dir ('u' to the pod, 'd' from it) and returns
// how long it took.
func moveBlock(b *testing.B, c net.Conn, dir byte) time.Duration {
	chunk := bytes.Repeat([]byte("kplane"), 256<<10/6+1)[:256<<10]
	start := time.Now()
	if _, err := c.Write([]byte{dir}); err != nil {
		b.Fatal(err)
	}
	var err error
	if dir == 'u' {
		for sent := 0; sent < streamBulk && err == nil; sent += len(chunk) {
			_, err = c.Write(chunk)
		}
		if err == nil {
			_, err = io.ReadFull(c, chunk[:1])
		}
	} else {
		_, err = io.CopyN(io.Discard, c, streamBulk)
	}
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
