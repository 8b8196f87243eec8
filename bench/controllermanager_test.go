package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The controller-manager benchmark's fixture: services × pods per service, every pod Ready
// on one of a few nodes. KPLANE_BENCH_SERVICES overrides the number of services.
const (
	podsPerService = 10
	benchNodes     = 10
	readinessFlips = 200
	flipInterval   = 100 * time.Millisecond
)

// controllerManagers are the implementations measured: kplane's, and the reference
// kube-controller-manager when KPLANE_REFERENCE_KCM names its binary. Both run only the
// endpoint and endpointslice controllers, without leader election, with the client QPS and
// burst of KPLANE_BENCH_KCM_QPS / _BURST (default 20 / 30, the controller managers' default).
func controllerManagers(b *testing.B) map[string]func(kubeconfig string) *exec.Cmd {
	qps, burst := envOr("KPLANE_BENCH_KCM_QPS", "20"), envOr("KPLANE_BENCH_KCM_BURST", "30")
	out := map[string]func(string) *exec.Cmd{
		"kplane": func(kubeconfig string) *exec.Cmd {
			return exec.Command(kplaneBinary(b), "controller-manager", "--kubeconfig", kubeconfig,
				"--controllers", "endpoint,endpointslice", "--leader-elect=false", "--secure-port", "0",
				"--kube-api-qps", qps, "--kube-api-burst", burst)
		},
	}
	if bin := os.Getenv("KPLANE_REFERENCE_KCM"); bin != "" {
		out["reference"] = func(kubeconfig string) *exec.Cmd {
			return exec.Command(bin, "--kubeconfig", kubeconfig, "--controllers", "endpoint,endpointslice",
				"--leader-elect=false", "--secure-port", "0", "--kube-api-qps", qps, "--kube-api-burst", burst, "--v", "0")
		}
	}
	return out
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// BenchmarkControllerManager measures, per implementation, on a fresh kplane apiserver holding
// the fixture: the cold start (process start until every service's Endpoints and
// EndpointSlices list all its pods as ready), then single-pod readiness flips (status write
// until both the Endpoints and the EndpointSlice show it), and the process's RSS. Run with
// -benchtime=1x.
func BenchmarkControllerManager(b *testing.B) {
	services, _ := strconv.Atoi(envOr("KPLANE_BENCH_SERVICES", "1000"))
	impls := controllerManagers(b)
	for _, name := range []string{"kplane", "reference"} {
		start, ok := impls[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				runControllerManagerBench(b, services, start)
			}
		})
	}
}

func runControllerManagerBench(b *testing.B, services int, startCM func(string) *exec.Cmd) {
	b.StopTimer()
	api, _ := startKplane(b, b.TempDir())
	defer api.stop()
	c, err := client.FromKubeconfig(api.kubeconfig, -1, 0)
	if err != nil {
		b.Fatal(err)
	}
	ns := "bench-cm"
	pods := controllerFixture(b, c, ns, services)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newEndpointsWatcher(ctx, b, c, ns)

	cmd := startCM(api.kubeconfig)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, _ := os.Create(filepath.Join(b.TempDir(), "cm.log"))
	cmd.Stdout, cmd.Stderr = logs, logs
	b.StartTimer()
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	for w.complete.Load() < int64(services) {
		if time.Since(began) > 10*time.Minute {
			b.Fatalf("only %d of %d services complete after 10 minutes (log: %s)", w.complete.Load(), services, logs.Name())
		}
		select {
		case <-w.changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
	coldStart := time.Since(began)
	b.StopTimer()
	time.Sleep(2 * time.Second) // let it settle before the flips and the memory reading
	rssAfterSync := rssMB(cmd.Process.Pid)

	var flips, writes, epFlips, sliceFlips []time.Duration
	podsAPI := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	for i := range readinessFlips {
		// Flips 100 ms apart: each controller writes 10 times a second, under its client's
		// QPS limit, so the figure is the controllers' latency, not the rate limiter's.
		time.Sleep(flipInterval)
		p := pods[(i/2*37)%len(pods)] // the same pod goes not-ready, then ready again
		ready := i%2 == 1
		setReady(p, ready)
		w.expect(p.Labels["svc"], p.Status.PodIP, ready)
		t0 := time.Now()
		updated, err := podsAPI.UpdateStatus(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		*p = *updated
		writes = append(writes, time.Since(t0))
		epAt, sliceAt, ok := w.waitExpected(30 * time.Second)
		if !ok {
			b.Fatalf("flip %d of pod %s not seen within 30s", i, p.Name)
		}
		flips = append(flips, max(epAt.Sub(t0), sliceAt.Sub(t0)))
		epFlips, sliceFlips = append(epFlips, epAt.Sub(t0)), append(sliceFlips, sliceAt.Sub(t0))
	}
	for _, d := range [][]time.Duration{flips, writes, epFlips, sliceFlips} {
		slices.Sort(d)
	}
	peak := peakRSSMB(cmd.Process.Pid)
	b.ReportMetric(coldStart.Seconds(), "cold-start-s")
	b.ReportMetric(float64(flips[len(flips)/2].Microseconds())/1000, "flip-p50-ms")
	b.ReportMetric(float64(flips[len(flips)*99/100].Microseconds())/1000, "flip-p99-ms")
	b.ReportMetric(float64(epFlips[len(epFlips)/2].Microseconds())/1000, "flip-endpoints-p50-ms")
	b.ReportMetric(float64(sliceFlips[len(sliceFlips)/2].Microseconds())/1000, "flip-slices-p50-ms")
	b.ReportMetric(float64(writes[len(writes)/2].Microseconds())/1000, "status-write-p50-ms")
	b.ReportMetric(rssAfterSync, "RSS-MB")
	b.ReportMetric(peak, "peak-RSS-MB")
}

// controllerFixture creates the nodes, services and Ready pods, and returns the pods.
func controllerFixture(b *testing.B, c *client.Client, ns string, services int) []*corev1.Pod {
	ctx := context.Background()
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	nodes := client.Resource[*corev1.Node](c, "nodes")
	for i := range benchNodes {
		if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("node-", i),
			Labels: map[string]string{corev1.LabelTopologyZone: fmt.Sprint("zone-", i%3)}}}); err != nil {
			b.Fatal(err)
		}
	}
	svcAPI := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	parallel(b, services, func(i int) error {
		_, err := svcAPI.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("svc-", i)},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"svc": fmt.Sprint(i)},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
		})
		return err
	})
	pods := make([]*corev1.Pod, services*podsPerService)
	podAPI := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	parallel(b, len(pods), func(i int) error {
		ip := fmt.Sprintf("10.%d.%d.%d", 1+i>>16, (i>>8)&255, i&255)
		p, err := podAPI.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("pod-", i), Labels: map[string]string{"svc": fmt.Sprint(i / podsPerService)}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprint("node-", i%benchNodes), Containers: []corev1.Container{{
				Name: "app", Image: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		})
		if err != nil {
			return err
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		setReady(p, true)
		pods[i], err = podAPI.UpdateStatus(ctx, p)
		return err
	})
	return pods
}

func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
}

// parallel runs op for 0..n-1 on 16 goroutines and fails b on the first error.
func parallel(b *testing.B, n int, op func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := op(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		b.Fatal(err)
	}
}

// endpointsWatcher follows Endpoints and EndpointSlices of one namespace with kplane informers
// and counts services whose Endpoints and slices both list podsPerService ready addresses.
type endpointsWatcher struct {
	endpoints *cache.Informer[*corev1.Endpoints]
	slices    *cache.Informer[*discoveryv1.EndpointSlice]
	changed   chan struct{}
	complete  atomic.Int64

	mu      sync.Mutex
	counted map[string]bool
	want    struct {
		svc, ip string
		ready   bool
	} // a readiness flip being waited for
	wantSeen chan struct{}
	// when the armed flip was first seen in the Endpoints and in the slices
	epSeen, sliceSeen time.Time
}

func newEndpointsWatcher(ctx context.Context, b *testing.B, c *client.Client, ns string) *endpointsWatcher {
	f := cache.NewFactory(c, ns)
	w := &endpointsWatcher{
		endpoints: cache.For[*corev1.Endpoints](f, "endpoints"),
		slices: cache.For[*discoveryv1.EndpointSlice](f, "endpointslices", cache.WithIndexers(cache.Indexers[*discoveryv1.EndpointSlice]{
			"service": func(s *discoveryv1.EndpointSlice) ([]string, error) {
				return []string{s.Labels[discoveryv1.LabelServiceName]}, nil
			}})),
		changed: make(chan struct{}, 1),
		counted: map[string]bool{},
	}
	w.endpoints.AddHandler(cache.Handler[*corev1.Endpoints]{
		OnAdd:    func(e *corev1.Endpoints, _ bool) { w.check(e.Name) },
		OnUpdate: func(_, e *corev1.Endpoints) { w.check(e.Name) },
	}, 0)
	w.slices.AddHandler(cache.Handler[*discoveryv1.EndpointSlice]{
		OnAdd:    func(s *discoveryv1.EndpointSlice, _ bool) { w.check(s.Labels[discoveryv1.LabelServiceName]) },
		OnUpdate: func(_, s *discoveryv1.EndpointSlice) { w.check(s.Labels[discoveryv1.LabelServiceName]) },
	}, 0)
	f.Start(ctx)
	if !f.WaitForCacheSync(ctx) {
		b.Fatal("watcher caches did not sync")
	}
	return w
}

// state returns, for svc, the ready and not-ready IPs of its Endpoints and of its slices.
func (w *endpointsWatcher) state(svc string) (epReady, epNotReady, slReady, slNotReady map[string]bool) {
	epReady, epNotReady, slReady, slNotReady = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	if ep, ok := w.endpoints.Indexer().Get("bench-cm/" + svc); ok {
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				epReady[a.IP] = true
			}
			for _, a := range s.NotReadyAddresses {
				epNotReady[a.IP] = true
			}
		}
	}
	sls, _ := w.slices.Indexer().ByIndex("service", svc)
	for _, s := range sls {
		for _, e := range s.Endpoints {
			for _, ip := range e.Addresses {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					slReady[ip] = true
				} else {
					slNotReady[ip] = true
				}
			}
		}
	}
	return
}

func (w *endpointsWatcher) check(svc string) {
	epReady, _, slReady, _ := w.state(svc)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.counted[svc] && len(epReady) == podsPerService && len(slReady) == podsPerService {
		w.counted[svc] = true
		w.complete.Add(1)
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	if w.wantSeen != nil && w.want.svc == svc {
		er, enr, sr, snr := w.state(w.want.svc)
		ip, ready := w.want.ip, w.want.ready
		if w.epSeen.IsZero() && ((ready && er[ip] && !enr[ip]) || (!ready && enr[ip] && !er[ip])) {
			w.epSeen = time.Now()
		}
		if w.sliceSeen.IsZero() && ((ready && sr[ip] && !snr[ip]) || (!ready && snr[ip] && !sr[ip])) {
			w.sliceSeen = time.Now()
		}
		if !w.epSeen.IsZero() && !w.sliceSeen.IsZero() {
			close(w.wantSeen)
			w.wantSeen = nil
		}
	}
}

// expect arms the watcher for one flip: pod ip of service label value svcLabel going to ready.
func (w *endpointsWatcher) expect(svcLabel, ip string, ready bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want.svc, w.want.ip, w.want.ready = "svc-"+svcLabel, ip, ready
	w.wantSeen = make(chan struct{})
	w.epSeen, w.sliceSeen = time.Time{}, time.Time{}
}

// waitExpected waits for the flip armed by expect and returns when the Endpoints and the
// slices showed it.
func (w *endpointsWatcher) waitExpected(timeout time.Duration) (ep, slice time.Time, ok bool) {
	w.mu.Lock()
	ch := w.wantSeen
	w.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(timeout):
		return time.Time{}, time.Time{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epSeen, w.sliceSeen, true
}

// peakRSSMB reads a process's peak resident set size.
func peakRSSMB(pid int) float64 { return procStatusMB(pid, "VmHWM:") }
