package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upPods is how many pods BenchmarkUp starts.
const upPods = 100

// BenchmarkUp measures `kplane up` as a process: time from exec until the API answers and the
// node is Ready, idle RSS, `kubectl apply -f examples/echo.yaml` until its Service answers from
// every pod (and the stages on the way: measureEchoServe), pod startup latency (create → Ready,
// each pod a `sleep` process, all created at once) and RSS with the pods running. Run with
// -benchtime=1x.
func BenchmarkUp(b *testing.B) {
	for range b.N {
		runUpBench(b)
	}
}

func runUpBench(b *testing.B) {
	b.StopTimer()
	up := startUp(b)
	measureEchoServe(b, up.c, up.kubeconfig, up.log)
	lat := podStartup(b, up, func(i int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p-", i)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sleep", Command: []string{"sleep", "3600"}}}}}
	})
	time.Sleep(time.Second)
	b.ReportMetric(float64(up.ready.Milliseconds()), "ms-to-ready")
	b.ReportMetric(up.idleRSS, "idle-RSS-MB")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "pod-startup-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "pod-startup-p99-ms")
	b.ReportMetric(rssMB(up.cmd.Process.Pid), "RSS-100-pods-MB")
}

// upProcess is a `kplane up` started by startUp.
type upProcess struct {
	cmd             *exec.Cmd
	c               *client.Client
	kubeconfig, log string
	// ready is the time from exec until the API answered and the node was Ready; idleRSS the
	// process's RSS a second later.
	ready   time.Duration
	idleRSS float64
}

// startUp runs `kplane up` in a data dir of its own until the benchmark ends and waits for
// its node to be Ready and its default service account to exist.
func startUp(b *testing.B) *upProcess {
	dir := b.TempDir()
	up := &upProcess{kubeconfig: filepath.Join(dir, "kubeconfig"), log: filepath.Join(dir, "up.log")}
	// -v 1: the proxy logs its syncs, one of the stages measureEchoServe reports.
	up.cmd = exec.Command(kplaneBinary(b), "up", "-v", "1", "--secure-port", "0", "--data-dir", dir)
	up.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, _ := os.Create(up.log)
	up.cmd.Stdout, up.cmd.Stderr = logs, logs
	began := time.Now()
	if err := up.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = up.cmd.Process.Signal(syscall.SIGTERM); _ = up.cmd.Wait() })
	for {
		if time.Since(began) > time.Minute {
			b.Fatalf("kplane up not ready after a minute (log: %s)", up.log)
		}
		if up.c == nil {
			up.c, _ = client.FromKubeconfig(up.kubeconfig, -1, 0)
		}
		if up.c != nil && nodeReady(up.c) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	up.ready = time.Since(began)
	time.Sleep(time.Second)
	up.idleRSS = rssMB(up.cmd.Process.Pid)
	// Pods are admitted with the service account's token volume, which needs the account.
	for {
		if _, err := client.Resource[*corev1.ServiceAccount](up.c, "serviceaccounts").Namespace("default").Get(context.Background(), "default"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return up
}

// podStartup creates upPods pods made by pod (named p-<i>) in default all at once and
// returns, sorted, the times from each one's create to its Ready condition; the benchmark's
// timer runs during that. It reports the CPU time `up` spent per pod meanwhile.
func podStartup(b *testing.B, up *upProcess, pod func(i int) *corev1.Pod) []time.Duration {
	c := up.c
	ctx, cancel := context.WithCancel(context.Background())
	f := cache.NewFactory(c, "default")
	pods := cache.For[*corev1.Pod](f, "pods")
	var mu sync.Mutex
	readyAt := map[string]time.Time{}
	allReady := make(chan struct{})
	note := func(p *corev1.Pod) {
		if !strings.HasPrefix(p.Name, "p-") { // the echo pods
			return
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				mu.Lock()
				if _, seen := readyAt[p.Name]; !seen {
					readyAt[p.Name] = time.Now()
					if len(readyAt) == upPods {
						close(allReady)
					}
				}
				mu.Unlock()
			}
		}
	}
	pods.AddHandler(cache.Handler[*corev1.Pod]{OnAdd: func(p *corev1.Pod, _ bool) { note(p) }, OnUpdate: func(_, p *corev1.Pod) { note(p) }}, 0)
	f.Start(ctx)
	f.WaitForCacheSync(ctx)
	defer func() {
		cancel() // the informers end with ctx; Shutdown waits for them
		f.Shutdown()
	}()

	created := make([]time.Time, upPods)
	api := client.Resource[*corev1.Pod](c, "pods").Namespace("default")
	cpuBefore := cpuTime(up.cmd.Process.Pid)
	// KPLANE_BENCH_CPUPROFILE=file: a CPU profile of `up` (its apiserver's /debug/pprof, the
	// whole process) over the first two seconds of the burst.
	profiled := make(chan struct{})
	if path := os.Getenv("KPLANE_BENCH_CPUPROFILE"); path != "" {
		go func() {
			defer close(profiled)
			prof, err := c.Raw(context.Background(), "GET", "/debug/pprof/profile", url.Values{"seconds": {"2"}}, nil)
			if err == nil {
				err = os.WriteFile(path, prof, 0o644)
			}
			if err != nil {
				b.Errorf("CPU profile: %v", err)
			}
		}()
	} else {
		close(profiled)
	}
	defer func() { <-profiled }()
	b.StartTimer()
	parallel(b, upPods, func(i int) error {
		created[i] = time.Now()
		_, err := api.Create(ctx, pod(i))
		return err
	})
	select {
	case <-allReady:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		n := len(readyAt)
		mu.Unlock()
		b.Fatalf("only %d of %d pods ready after 2 minutes", n, upPods)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(up.cmd.Process.Pid)-cpuBefore).Microseconds())/1000/upPods, "up-CPU-ms/pod")
	var lat []time.Duration
	mu.Lock()
	for i := range upPods {
		lat = append(lat, readyAt[fmt.Sprint("p-", i)].Sub(created[i]))
	}
	mu.Unlock()
	slices.Sort(lat)
	return lat
}

// nodeReady reports whether the API answers and some node is Ready.
func nodeReady(c *client.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	nodes, err := client.Resource[*corev1.Node](c, "nodes").List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
	}
	return false
}
