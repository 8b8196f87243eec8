// Package bench measures kplane against the reference Kubernetes under the same load. See
// README.md in this directory for how to run it and the figures measured.
package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// clients is the number of concurrent clients in the latency benchmarks.
const clients = 16

// target is an API server under test.
type target struct {
	name string
	cs   *kubernetes.Clientset
	cfg  *rest.Config
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error

	kplaneOnce sync.Once
	kplane     *target
	kplaneErr  error
)

// kplaneBinary builds cmd/kplane once, or is $KPLANE_BENCH_BINARY.
func kplaneBinary(b testing.TB) string {
	if path := os.Getenv("KPLANE_BENCH_BINARY"); path != "" {
		return path // a build of another commit, to compare two in one sitting
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kplane-bench-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "kplane")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/kplane/kplane/cmd/kplane").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return binary
}

// process is a started kplane apiserver.
type process struct {
	cmd        *exec.Cmd
	kubeconfig string
}

// startKplane starts `kplane apiserver` on dataDir and waits for /readyz; it returns the time
// that took. KPLANE_BENCH_ETCD (endpoints) makes it use that etcd instead of an embedded one.
func startKplane(b testing.TB, dataDir string, extraArgs ...string) (*process, time.Duration) {
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	os.Remove(kubeconfig)
	args := append([]string{"apiserver", "--secure-port", "0", "--data-dir", dataDir, "--write-kubeconfig", kubeconfig}, extraArgs...)
	if e := os.Getenv("KPLANE_BENCH_ETCD"); e != "" {
		args = append(args, "--etcd-servers", e)
	}
	if os.Getenv("KPLANE_BENCH_TLS") != "" {
		// Off loopback: HTTPS with token authentication, as the reference is measured.
		args = append(args, "--bind-address", "0.0.0.0")
	}
	start := time.Now()
	cmd := exec.Command(kplaneBinary(b), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &process{cmd: cmd, kubeconfig: kubeconfig}
	for {
		if cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
			if hc, err := rest.HTTPClientFor(cfg); err == nil {
				if resp, err := hc.Get(cfg.Host + "/readyz"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						return p, time.Since(start)
					}
				}
			}
		}
		if time.Since(start) > 60*time.Second {
			p.stop()
			b.Fatal("kplane did not become ready in 60s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
}

// rssMB reads a process's resident set size.
func rssMB(pid int) float64 { return procStatusMB(pid, "VmRSS:") }

// procStatusMB reads one memory field (in kB) of /proc/<pid>/status, in MB.
func procStatusMB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkStartup restarts kplane on an existing data dir and reports the time to /readyz 200
// and the resident memory after it has idled for a second.
func BenchmarkStartup(b *testing.B) {
	dir := b.TempDir()
	p, _ := startKplane(b, dir) // first start creates the data dir
	p.stop()
	var total time.Duration
	var rss float64
	for i := 0; i < b.N; i++ {
		p, took := startKplane(b, dir)
		total += took
		b.StopTimer()
		time.Sleep(time.Second)
		rss = rssMB(p.cmd.Process.Pid)
		p.stop()
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-ready")
	b.ReportMetric(rss, "idle-RSS-MB")
}

func clientFor(b *testing.B, cfg *rest.Config) *kubernetes.Clientset {
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit: measure the server
	cfg.Timeout = 60 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// targets is kplane (started once for all latency benchmarks) and, when
// KPLANE_REFERENCE_KUBECONFIG names one, the reference kube-apiserver.
func targets(b *testing.B) []*target {
	kplaneOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kplane-bench-data")
		if err != nil {
			kplaneErr = err
			return
		}
		p, _ := startKplane(b, dir)
		cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig)
		if err != nil {
			kplaneErr = err
			return
		}
		kplane = &target{name: "kplane", cs: clientFor(b, cfg), cfg: cfg}
	})
	if kplaneErr != nil {
		b.Fatal(kplaneErr)
	}
	out := []*target{kplane}
	if path := os.Getenv("KPLANE_REFERENCE_KUBECONFIG"); path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, &target{name: "reference", cs: clientFor(b, cfg), cfg: cfg})
	}
	return out
}

func ensureNamespace(b *testing.B, t *target, name string) {
	_, err := t.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		b.Fatal(err)
	}
}

// latencies runs n operations on `clients` goroutines and reports p50 and p99 in ms.
func latencies(b *testing.B, n int, op func(i int) error) {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	b.ResetTimer()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				start := time.Now()
				if err := op(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := firstErr.Load(); err != nil {
		b.Fatal(err)
	}
	report(b, lat)
}

func report(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

var runID = strconv.FormatInt(time.Now().UnixNano()%1e9, 36)

func benchPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bench", "tier": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1.0",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "bench"}},
		}}},
	}
}

func BenchmarkCreate(b *testing.B) {
	for _, t := range targets(b) {
		b.Run(t.name, func(b *testing.B) {
			ns := "bench-create-" + runID
			ensureNamespace(b, t, ns)
			prefix := fmt.Sprint("p-", b.N, "-")
			latencies(b, b.N, func(i int) error {
				_, err := t.cs.CoreV1().Pods(ns).Create(context.Background(), benchPod(prefix+strconv.Itoa(i)), metav1.CreateOptions{})
				return err
			})
		})
	}
}

func BenchmarkGet(b *testing.B) {
	for _, t := range targets(b) {
		b.Run(t.name, func(b *testing.B) {
			ns := "bench-get-" + runID
			ensureNamespace(b, t, ns)
			_, _ = t.cs.CoreV1().Pods(ns).Create(context.Background(), benchPod("target"), metav1.CreateOptions{})
			latencies(b, b.N, func(int) error {
				_, err := t.cs.CoreV1().Pods(ns).Get(context.Background(), "target", metav1.GetOptions{})
				return err
			})
		})
	}
}

// fill makes sure ns holds n pods.
func fill(b *testing.B, t *target, ns string, n int) {
	ensureNamespace(b, t, ns)
	list, err := t.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	have := len(list.Items)
	if have >= n {
		return
	}
	latencies(b, n-have, func(i int) error {
		_, err := t.cs.CoreV1().Pods(ns).Create(context.Background(), benchPod(fmt.Sprint("fill-", have+i)), metav1.CreateOptions{})
		return err
	})
}

// BenchmarkList lists 10k pods, from the watch cache (resourceVersion=0) and consistently.
func BenchmarkList(b *testing.B) {
	for _, t := range targets(b) {
		ns := "bench-list"
		for _, mode := range []struct{ name, rv string }{{"cache", "0"}, {"consistent", ""}} {
			b.Run(t.name+"/"+mode.name, func(b *testing.B) {
				fill(b, t, ns, 10000)
				latencies(b, b.N, func(int) error {
					list, err := t.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{ResourceVersion: mode.rv})
					if err == nil && len(list.Items) < 10000 {
						err = fmt.Errorf("listed %d pods", len(list.Items))
					}
					return err
				})
			})
		}
	}
}

// BenchmarkWatchLatency: 16 clients watch a namespace; one writer creates pods; the latency is
// from the start of each create to the event's arrival at each watcher.
func BenchmarkWatchLatency(b *testing.B) {
	for _, t := range targets(b) {
		b.Run(t.name, func(b *testing.B) {
			ns := fmt.Sprint("bench-watch-", runID, "-", b.N)
			ensureNamespace(b, t, ns)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var started sync.Map // name → time the create began
			lat := make(chan time.Duration, b.N*clients)
			var ready, done sync.WaitGroup
			for c := 0; c < clients; c++ {
				w, err := t.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
				if err != nil {
					b.Fatal(err)
				}
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					defer w.Stop()
					ready.Done()
					seen := 0
					for ev := range w.ResultChan() {
						if ev.Type != watch.Added {
							continue
						}
						if t0, ok := started.Load(ev.Object.(*corev1.Pod).Name); ok {
							lat <- time.Since(t0.(time.Time))
						}
						if seen++; seen == b.N {
							return
						}
					}
				}()
			}
			ready.Wait()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprint("w-", i)
				started.Store(name, time.Now())
				if _, err := t.cs.CoreV1().Pods(ns).Create(ctx, benchPod(name), metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			done.Wait()
			b.StopTimer()
			close(lat)
			var all []time.Duration
			for d := range lat {
				all = append(all, d)
			}
			report(b, all)
		})
	}
}
