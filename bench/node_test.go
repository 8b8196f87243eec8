package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// nodePods is how many pods BenchmarkNodeResources runs.
const nodePods = 100

// BenchmarkNodeResources measures `kplane node` as a process (against a `kplane apiserver`
// process) running nodePods sleeping shell pods, each in its cgroup where the machine has
// them: the agent's RSS idle and with the pods running, and the cost of its resource
// endpoints with them: /metrics/resource and /stats/summary (latency, the agent's CPU time per
// scrape, size), and the apiserver's metrics.k8s.io list of all pods (`kubectl top pods -A`),
// which scrapes the node. Run with -benchtime=1x.
func BenchmarkNodeResources(b *testing.B) {
	for range b.N {
		runNodeResourcesBench(b)
	}
}

func runNodeResourcesBench(b *testing.B) {
	b.StopTimer()
	api, _ := startKplane(b, b.TempDir())
	defer api.stop()
	c, err := client.FromKubeconfig(api.kubeconfig, -1, 0)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cmd := exec.Command(kplaneBinary(b), "node", "--kubeconfig", api.kubeconfig, "--hostname-override", "bench-node",
		"--data-dir", filepath.Join(dir, "node"), "--port", "0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, _ := os.Create(filepath.Join(dir, "node.log"))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	ctx := context.Background()
	var port int32
	for began := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if time.Since(began) > time.Minute {
			b.Fatalf("node not ready after a minute (log: %s)", logs.Name())
		}
		if n, err := client.Resource[*corev1.Node](c, "nodes").Get(ctx, "bench-node"); err == nil && n.Status.DaemonEndpoints.KubeletEndpoint.Port != 0 {
			port = n.Status.DaemonEndpoints.KubeletEndpoint.Port
			break
		}
	}
	time.Sleep(time.Second)
	idle := rssMB(cmd.Process.Pid)

	pods := client.Resource[*corev1.Pod](c, "pods").Namespace("default")
	parallel(b, nodePods, func(i int) error {
		_, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("s-", i)},
			Spec: corev1.PodSpec{NodeName: "bench-node", Containers: []corev1.Container{{Name: "c", Image: "sh",
				Command:   []string{"/bin/sh", "-c", "while :; do sleep 3600; done"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}}}}}})
		return err
	})
	for began := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		running := 0
		if err == nil {
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
		}
		if running == nodePods {
			break
		}
		if time.Since(began) > 2*time.Minute {
			b.Fatalf("only %d of %d pods running after 2 minutes (log: %s)", running, nodePods, logs.Name())
		}
	}
	time.Sleep(2 * time.Second)
	withPods := rssMB(cmd.Process.Pid)

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	const scrapes = 200
	b.StartTimer()
	resLat, resCPU, resSize := scrapeCost(b, cmd.Process.Pid, base+"/metrics/resource", scrapes, "container_cpu_usage_seconds_total")
	sumLat, sumCPU, sumSize := scrapeCost(b, cmd.Process.Pid, base+"/stats/summary", scrapes, `"podRef"`)
	b.StopTimer()
	// The metrics API: the first list waits for a second scrape, the next ones do not.
	cfg, err := clientcmd.BuildConfigFromFlags("", api.kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	apiURL := strings.TrimSuffix(cfg.Host, "/") + "/apis/metrics.k8s.io/v1beta1/pods"
	get(b, hc, apiURL, "")
	var apiLat []time.Duration
	for range 20 {
		start := time.Now()
		get(b, hc, apiURL, `"name":"s-99"`)
		apiLat = append(apiLat, time.Since(start))
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(apiLat)

	b.ReportMetric(idle, "idle-RSS-MB")
	b.ReportMetric(withPods, "RSS-100-pods-MB")
	b.ReportMetric(ms(resLat[len(resLat)/2]), "metrics-resource-p50-ms")
	b.ReportMetric(ms(resLat[len(resLat)*99/100]), "metrics-resource-p99-ms")
	b.ReportMetric(resCPU, "metrics-resource-cpu-ms")
	b.ReportMetric(float64(resSize)/1024, "metrics-resource-KB")
	b.ReportMetric(ms(sumLat[len(sumLat)/2]), "stats-summary-p50-ms")
	b.ReportMetric(sumCPU, "stats-summary-cpu-ms")
	b.ReportMetric(float64(sumSize)/1024, "stats-summary-KB")
	b.ReportMetric(ms(apiLat[len(apiLat)/2]), "metrics-api-pods-p50-ms")
	b.ReportMetric(ms(apiLat[len(apiLat)-1]), "metrics-api-pods-max-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// scrapeCost GETs url n times in a row and returns the sorted latencies, the agent's CPU time
// per request in ms (from /proc/<pid>/stat) and the size of the last answer, which must
// contain want.
func scrapeCost(b *testing.B, pid int, url string, n int, want string) ([]time.Duration, float64, int) {
	hc := &http.Client{Timeout: 10 * time.Second}
	cpu0 := cpuTicks(pid)
	var lat []time.Duration
	size := 0
	for range n {
		start := time.Now()
		size = len(get(b, hc, url, want))
		lat = append(lat, time.Since(start))
	}
	used := float64(cpuTicks(pid)-cpu0) * 10 / float64(n) // ticks are 10 ms
	slices.Sort(lat)
	return lat, used, size
}

func get(b *testing.B, hc *http.Client, url, want string) []byte {
	resp, err := hc.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		b.Fatalf("GET %s: %v %s: %.300s", url, err, resp.Status, body)
	}
	return body
}

// cpuTicks is a process's user+system CPU time in clock ticks.
func cpuTicks(pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
}
