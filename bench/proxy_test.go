package bench

import (
	"context"
	"fmt"
	"io"
	"net"
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
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The proxy benchmark's fixture: services, each with one EndpointSlice of endpointsPerService
// ready endpoints. KPLANE_BENCH_PROXY_SERVICES overrides the number of services.
const (
	endpointsPerService = 10
	proxyChanges        = 20
	// The churn: churnChanges slice updates of different services, one every churnEvery.
	churnChanges = 200
	churnEvery   = 10 * time.Millisecond
)

// BenchmarkProxySync measures `kplane proxy` (as a process) on a kplane apiserver holding 10k
// services with 100k endpoints: the first full sync (its duration, from the proxy's
// kubeproxy_sync_full_proxy_rules_duration_seconds, and the wall time from exec until it is
// done), the partial sync after one service's endpoints are replaced and after one endpoint
// of a service turns not ready (p50/max of 20 changes each), the proxy's RSS, and its CPU
// time and sync count under a churn of 100 endpoint changes a second for 2 s (with the mean
// time from each change to the sync that programmed it). Mode from KPLANE_BENCH_PROXY_MODE
// (default userspace: ClusterIPs from 127.64.0.0/16 are bound as listeners, 10k of them);
// KPLANE_BENCH_PROXY_MIN_SYNC_PERIOD sets --iptables-min-sync-period (default kube-proxy's
// 1s). In nftables mode, KPLANE_REFERENCE_KUBE_PROXY names the reference kube-proxy's binary
// to measure the same way, on an apiserver of its own, after kplane's (its tables, ip and ip6
// kube-proxy, are deleted afterwards). Run with -benchtime=1x.
func BenchmarkProxySync(b *testing.B) {
	services, _ := strconv.Atoi(envOr("KPLANE_BENCH_PROXY_SERVICES", "10000"))
	mode := envOr("KPLANE_BENCH_PROXY_MODE", "userspace")
	minSync := envOr("KPLANE_BENCH_PROXY_MIN_SYNC_PERIOD", "1s")
	flags := func(kubeconfig string, metricsPort int) []string {
		return []string{"--kubeconfig", kubeconfig, "--proxy-mode", mode, "--hostname-override", "bench-node",
			"--healthz-bind-address", fmt.Sprintf("127.0.0.1:%d", freeTCPPort(b)),
			"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metricsPort),
			"--iptables-min-sync-period", minSync} // kube-proxy's name, for its nftables mode too
	}
	type proxyUnderTest struct {
		name    string
		start   func(kubeconfig string, metricsPort int) *exec.Cmd
		cleanup func()
	}
	proxies := []proxyUnderTest{{name: "kplane", start: func(kubeconfig string, metricsPort int) *exec.Cmd {
		return exec.Command(kplaneBinary(b), append([]string{"proxy", "--kube-api-qps", "-1"}, flags(kubeconfig, metricsPort)...)...)
	}}}
	if bin := os.Getenv("KPLANE_REFERENCE_KUBE_PROXY"); bin != "" && mode == "nftables" {
		proxies = append(proxies, proxyUnderTest{name: "reference",
			start: func(kubeconfig string, metricsPort int) *exec.Cmd {
				// No client rate limit to speak of, and the host's conntrack settings left as
				// they are.
				return exec.Command(bin, append([]string{"--kube-api-qps", "100000", "--kube-api-burst", "100000",
					"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "0",
					"--conntrack-tcp-timeout-close-wait", "0", "--v", "0"}, flags(kubeconfig, metricsPort)...)...)
			},
			cleanup: func() {
				for _, family := range []string{"ip", "ip6"} {
					_ = exec.Command("nft", "delete", "table", family, "kube-proxy").Run()
				}
			}})
	}
	for _, px := range proxies {
		b.Run(px.name, func(b *testing.B) {
			if px.cleanup != nil {
				defer px.cleanup()
			}
			for range b.N {
				runProxySync(b, services, px.start)
			}
		})
	}
}

func runProxySync(b *testing.B, services int, start func(kubeconfig string, metricsPort int) *exec.Cmd) {
	b.StopTimer()
	api, _ := startKplane(b, b.TempDir(), "--service-cluster-ip-range", "127.64.0.0/16")
	defer api.stop()
	c, err := client.FromKubeconfig(api.kubeconfig, -1, 0)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ns := "bench-proxy"
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	svcAPI := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	sliceAPI := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns)
	parallel(b, services, func(i int) error {
		if _, err := svcAPI.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("svc-", i)},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"svc": fmt.Sprint(i)},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}); err != nil {
			return err
		}
		_, err := sliceAPI.Create(ctx, proxyBenchSlice(i, 0))
		return err
	})

	// The proxy's Node, with an address: kube-proxy waits up to 30 s for one at start.
	node, err := client.Resource[*corev1.Node](c, "nodes").Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bench-node"}})
	if err != nil {
		b.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}}
	if _, err := client.Resource[*corev1.Node](c, "nodes").UpdateStatus(ctx, node); err != nil {
		b.Fatal(err)
	}

	metricsPort := freeTCPPort(b)
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	cmd := start(api.kubeconfig, metricsPort)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, _ := os.Create(filepath.Join(b.TempDir(), "proxy.log"))
	cmd.Stdout, cmd.Stderr = logs, logs
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	full := waitMetric(b, metricsURL, "kubeproxy_sync_full_proxy_rules_duration_seconds", 1, logs.Name())
	toProgrammed := time.Since(began)

	// partialSyncs makes proxyChanges changes, one slice at a time (change returns the next
	// state of service svc's slice), and returns the partial sync time each took, sorted.
	partialSyncs := func(first int, change func(svc int, cur *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice) []time.Duration {
		var took []time.Duration
		for i := range proxyChanges {
			cur, err := sliceAPI.Get(ctx, fmt.Sprint("svc-", first+i))
			if err != nil {
				b.Fatal(err)
			}
			next := change(first+i, cur)
			next.ResourceVersion = cur.ResourceVersion
			before := readMetric(b, metricsURL, "kubeproxy_sync_partial_proxy_rules_duration_seconds")
			if _, err := sliceAPI.Update(ctx, next); err != nil {
				b.Fatal(err)
			}
			after := waitMetric(b, metricsURL, "kubeproxy_sync_partial_proxy_rules_duration_seconds", before.count+1, logs.Name())
			took = append(took, time.Duration((after.sum-before.sum)*float64(time.Second)))
		}
		slices.Sort(took)
		return took
	}
	// One service's endpoints all replaced by others, as many.
	partials := partialSyncs(0, func(svc int, _ *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
		return proxyBenchSlice(svc, svc+1)
	})
	// One endpoint of a service turns not ready: one endpoint fewer to pick from.
	notReady := partialSyncs(proxyChanges+churnChanges, func(_ int, cur *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
		next := cur.DeepCopy()
		next.Endpoints[0].Conditions.Ready = new(false)
		return next
	})

	// The churn, against the same length of idle time just before it.
	syncs := "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	programming := "kubeproxy_network_programming_duration_seconds"
	window := churnChanges*churnEvery + 2*time.Second // the last change's sync comes within 1s
	idleCPU := cpuTime(cmd.Process.Pid)
	time.Sleep(window)
	idleCPU = cpuTime(cmd.Process.Pid) - idleCPU
	syncsBefore, programmedBefore := readMetric(b, metricsURL, syncs), readMetric(b, metricsURL, programming)
	churnCPU := cpuTime(cmd.Process.Pid)
	churnStart := time.Now()
	tick := time.NewTicker(churnEvery)
	for i := range churnChanges {
		<-tick.C
		svc := proxyChanges + i
		cur, err := sliceAPI.Get(ctx, fmt.Sprint("svc-", svc))
		if err != nil {
			b.Fatal(err)
		}
		next := proxyBenchSlice(svc, 1)
		next.ResourceVersion = cur.ResourceVersion
		// The proxy measures from this annotation to the sync that programs the change.
		next.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
		if _, err := sliceAPI.Update(ctx, next); err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	time.Sleep(window - time.Since(churnStart))
	churnCPU = cpuTime(cmd.Process.Pid) - churnCPU
	programmed := waitMetric(b, metricsURL, programming, programmedBefore.count+churnChanges, logs.Name())
	syncsAfter := readMetric(b, metricsURL, syncs)
	b.ReportMetric(full.sum*1000, "full-sync-ms")
	b.ReportMetric(toProgrammed.Seconds(), "start-to-programmed-s")
	b.ReportMetric(float64(partials[len(partials)/2].Microseconds())/1000, "partial-sync-p50-ms")
	b.ReportMetric(float64(partials[len(partials)-1].Microseconds())/1000, "partial-sync-max-ms")
	b.ReportMetric(float64(notReady[len(notReady)/2].Microseconds())/1000, "not-ready-sync-p50-ms")
	b.ReportMetric(float64(notReady[len(notReady)-1].Microseconds())/1000, "not-ready-sync-max-ms")
	b.ReportMetric(rssMB(cmd.Process.Pid), "RSS-MB")
	b.ReportMetric(float64(syncsAfter.count-syncsBefore.count), "churn-syncs")
	b.ReportMetric(float64((churnCPU - idleCPU).Milliseconds()), "churn-cpu-ms")
	b.ReportMetric(float64(idleCPU.Milliseconds()), "idle-cpu-ms")
	b.ReportMetric((syncsAfter.sum-syncsBefore.sum)*1000, "churn-sync-time-ms")
	b.ReportMetric((programmed.sum-programmedBefore.sum)*1000/float64(programmed.count-programmedBefore.count), "churn-programming-mean-ms")
}

// cpuTime is the user and system CPU time a process has used (/proc/<pid>/stat), to the
// kernel's clock tick.
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}

// proxyBenchSlice is service i's slice; generation g shifts its endpoint addresses.
func proxyBenchSlice(i, g int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprint("svc-", i), Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprint("svc-", i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
	}
	for e := range endpointsPerService {
		n := i*endpointsPerService + e + g
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 100+n>>16, (n>>8)&255, n&255)},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
		})
	}
	return s
}

func freeTCPPort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// histogram is one Prometheus histogram's sum and count.
type histogram struct {
	sum   float64
	count int
}

// readMetric reads a histogram (summed over its labels) from a /metrics page; zero when absent.
func readMetric(b *testing.B, url, name string) histogram {
	resp, err := http.Get(url)
	if err != nil {
		return histogram{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var h histogram
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || strings.Contains(f[0], `ip_family="IPv6"`) { // kube-proxy's other family: idle here
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch {
		case strings.HasPrefix(f[0], name+"_sum"):
			h.sum += v
		case strings.HasPrefix(f[0], name+"_count"):
			h.count += int(v)
		}
	}
	return h
}

// waitMetric waits until the histogram has counted at least n observations.
func waitMetric(b *testing.B, url, name string, n int, logName string) histogram {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if h := readMetric(b, url, name); h.count >= n {
			return h
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logName)
			b.Fatalf("%s never reached %d observations; the proxy's log ends:\n%s", name, n, log[max(0, len(log)-4000):])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
