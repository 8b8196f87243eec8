package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
// node is Ready, idle RSS, pod startup latency (create → Ready, each pod a `sleep` process,
// all created at once) and RSS with the pods running. Run with -benchtime=1x.
func BenchmarkUp(b *testing.B) {
	for range b.N {
		runUpBench(b)
	}
}

// upProcess is `kplane up` running as a process.
type upProcess struct {
	cmd        *exec.Cmd
	kubeconfig string
	client     *client.Client
	// ready is the time from exec until the API answered and the node was Ready.
	ready time.Duration
}

// startUp starts `kplane up` on a new data dir and waits until the API answers and the node
// is Ready.
func startUp(b *testing.B) *upProcess {
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cmd := exec.Command(kplaneBinary(b), "up", "--secure-port", "0", "--data-dir", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, _ := os.Create(filepath.Join(dir, "up.log"))
	cmd.Stdout, cmd.Stderr = logs, logs
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	up := &upProcess{cmd: cmd, kubeconfig: kubeconfig}
	for {
		if time.Since(began) > time.Minute {
			up.stop()
			b.Fatalf("kplane up not ready after a minute (log: %s)", logs.Name())
		}
		if up.client == nil {
			up.client, _ = client.FromKubeconfig(kubeconfig, -1, 0)
		}
		if up.client != nil && nodeReady(up.client) {
			up.ready = time.Since(began)
			return up
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (u *upProcess) stop() {
	_ = u.cmd.Process.Signal(syscall.SIGTERM)
	_ = u.cmd.Wait()
}

func runUpBench(b *testing.B) {
	b.StopTimer()
	up := startUp(b)
	defer up.stop()
	cmd, c, ready := up.cmd, up.client, up.ready
	time.Sleep(time.Second)
	idle := rssMB(cmd.Process.Pid)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := cache.NewFactory(c, "default")
	pods := cache.For[*corev1.Pod](f, "pods")
	var mu sync.Mutex
	readyAt := map[string]time.Time{}
	allReady := make(chan struct{})
	note := func(p *corev1.Pod) {
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

	created := make([]time.Time, upPods)
	api := client.Resource[*corev1.Pod](c, "pods").Namespace("default")
	b.StartTimer()
	parallel(b, upPods, func(i int) error {
		created[i] = time.Now()
		_, err := api.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p-", i)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sleep", Command: []string{"sleep", "3600"}}}}})
		return err
	})
	select {
	case <-allReady:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d pods ready after 2 minutes", len(readyAt), upPods)
	}
	b.StopTimer()
	var lat []time.Duration
	mu.Lock()
	for i := range upPods {
		lat = append(lat, readyAt[fmt.Sprint("p-", i)].Sub(created[i]))
	}
	mu.Unlock()
	slices.Sort(lat)
	time.Sleep(time.Second)
	b.ReportMetric(float64(ready.Milliseconds()), "ms-to-ready")
	b.ReportMetric(idle, "idle-RSS-MB")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "pod-startup-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "pod-startup-p99-ms")
	b.ReportMetric(rssMB(cmd.Process.Pid), "RSS-100-pods-MB")
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
