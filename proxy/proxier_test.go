package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/proxy"
	proxyapp "github.com/kplane/kplane/proxy/app"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var srv *testserver.Server

func TestMain(m *testing.M) {
	testserver.Main(m, func(s *testserver.Server, _ *client.Client) { srv = s })
}

func newClient(t *testing.T, transport http.RoundTripper) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Host: srv.URL, QPS: -1, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// recorder is a DataPath that keeps a copy of every State it is given, and fails while told to.
// It reports SCTP service ports as unsupported, as a data path without SCTP would.
type recorder struct {
	mu     sync.Mutex
	states []proxy.State
	fail   error
}

func (r *recorder) Apply(_ context.Context, s proxy.State) error {
	for name := range s.Services {
		if name.Protocol == corev1.ProtocolSCTP {
			s.Report(name, "unsupported-protocol", errors.New("no SCTP here"))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The proxy reuses the maps; the values in them are replaced, never changed.
	r.states = append(r.states, proxy.State{
		Services: maps.Clone(s.Services), Endpoints: maps.Clone(s.Endpoints),
		Changed: maps.Clone(s.Changed), UDPChanged: maps.Clone(s.UDPChanged), NodeName: s.NodeName, Zone: s.Zone,
	})
	return r.fail
}

func (r *recorder) setFail(err error) {
	r.mu.Lock()
	r.fail = err
	r.mu.Unlock()
}

// since returns the states recorded from index i on.
func (r *recorder) since(i int) []proxy.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i > len(r.states) {
		return nil
	}
	return slices.Clone(r.states[i:])
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.states)
}

// describe lists a State's service ports and endpoints of namespace ns, sorted:
// "ns/name:port/PROTO clusterIP:port" and "ns/name:port/PROTO -> ip:port [ready] [local]".
func describe(s proxy.State, ns string) []string {
	var out []string
	for name, sp := range s.Services {
		if name.Namespace == ns {
			out = append(out, fmt.Sprintf("%s %s:%d", name, sp.ClusterIP, sp.Port))
		}
	}
	for name, eps := range s.Endpoints {
		if name.Namespace != ns {
			continue
		}
		for _, e := range eps {
			line := fmt.Sprintf("%s -> %s", name, e.Addr)
			if e.Ready {
				line += " ready"
			}
			if e.IsLocal {
				line += " local"
			}
			out = append(out, line)
		}
	}
	sort.Strings(out)
	return out
}

func names(m map[proxy.ServicePortName]bool, ns string) []string {
	var out []string
	for name := range m {
		if name.Namespace == ns {
			out = append(out, name.String())
		}
	}
	sort.Strings(out)
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testOptions(node string) proxyapp.Options {
	o := proxyapp.DefaultOptions()
	o.HostnameOverride = node
	o.HealthzBindAddress, o.MetricsBindAddress = "127.0.0.1:0", "127.0.0.1:0"
	o.MinSyncPeriod = 0
	o.SyncPeriod = time.Second
	o.IPFamily = corev1.IPv4Protocol
	return o
}

func startProxy(t *testing.T, o proxyapp.Options, c *client.Client, dp proxy.DataPath) *proxyapp.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := proxyapp.Start(ctx, o, c, dp)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = s.Wait()
	})
	return s
}

func svc(name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Ports: ports}}
}

func epSlice(name, service string, ports map[string]int32, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: endpoints,
	}
	for n, p := range ports {
		proto := corev1.ProtocolTCP
		if n == "dns" {
			proto = corev1.ProtocolUDP
		}
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: new(n), Port: new(p), Protocol: &proto})
	}
	return s
}

func endpoint(ip, node string, ready bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: new(ready)}}
	if node != "" {
		e.NodeName = new(node)
	}
	return e
}

func uniqueNode(prefix string) string { return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()) }

// TestProxierProgramsTheDataPath: objects made before the start are in the first (full) State;
// later changes come as partial States naming what changed.
func TestProxierProgramsTheDataPath(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	ns := testserver.Namespace(t, c, "proxy-")
	services := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	epSlices := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns)
	node := uniqueNode("proxy-node")

	web, err := services.Create(ctx, svc("web",
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}))
	if err != nil {
		t.Fatal(err)
	}
	ip := web.Spec.ClusterIP
	if _, err := epSlices.Create(ctx, epSlice("web-1", "web", map[string]int32{"http": 8080, "dns": 5353},
		endpoint("10.1.0.1", node, true), endpoint("10.1.0.2", "elsewhere", false))); err != nil {
		t.Fatal(err)
	}

	dp := &recorder{}
	startProxy(t, testOptions(node), c, dp)

	type step struct {
		name    string
		do      func(t *testing.T)
		want    []string // describe() of the State
		changed []string // nil: a full sync
		udp     []string
	}
	steps := []step{
		{name: "first sync: full, with everything made before",
			want: []string{
				"NS/web:dns/UDP -> 10.1.0.1:5353 ready local", "NS/web:dns/UDP -> 10.1.0.2:5353",
				"NS/web:dns/UDP IP:53",
				"NS/web:http/TCP -> 10.1.0.1:8080 ready local", "NS/web:http/TCP -> 10.1.0.2:8080",
				"NS/web:http/TCP IP:80",
			},
			udp: []string{"NS/web:dns/UDP"}},
		{name: "an endpoint turns ready",
			do: func(t *testing.T) {
				s, err := epSlices.Get(ctx, "web-1")
				if err != nil {
					t.Fatal(err)
				}
				s = s.DeepCopy()
				s.Endpoints[1].Conditions.Ready = new(true)
				if _, err := epSlices.Update(ctx, s); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{
				"NS/web:dns/UDP -> 10.1.0.1:5353 ready local", "NS/web:dns/UDP -> 10.1.0.2:5353 ready",
				"NS/web:dns/UDP IP:53",
				"NS/web:http/TCP -> 10.1.0.1:8080 ready local", "NS/web:http/TCP -> 10.1.0.2:8080 ready",
				"NS/web:http/TCP IP:80",
			},
			changed: []string{"NS/web:dns/UDP", "NS/web:http/TCP"}, udp: []string{"NS/web:dns/UDP"}},
		{name: "a port of the service changes",
			do: func(t *testing.T) {
				s, err := services.Get(ctx, "web")
				if err != nil {
					t.Fatal(err)
				}
				s = s.DeepCopy()
				s.Spec.Ports[0].Port = 81
				if _, err := services.Update(ctx, s); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{
				"NS/web:dns/UDP -> 10.1.0.1:5353 ready local", "NS/web:dns/UDP -> 10.1.0.2:5353 ready",
				"NS/web:dns/UDP IP:53",
				"NS/web:http/TCP -> 10.1.0.1:8080 ready local", "NS/web:http/TCP -> 10.1.0.2:8080 ready",
				"NS/web:http/TCP IP:81",
			},
			changed: []string{"NS/web:http/TCP"}},
		{name: "the slice goes",
			do: func(t *testing.T) {
				if err := epSlices.Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want:    []string{"NS/web:dns/UDP IP:53", "NS/web:http/TCP IP:81"},
			changed: []string{"NS/web:dns/UDP", "NS/web:http/TCP"}, udp: []string{"NS/web:dns/UDP"}},
		{name: "the service goes",
			do: func(t *testing.T) {
				if err := services.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			changed: []string{"NS/web:dns/UDP", "NS/web:http/TCP"}, udp: []string{"NS/web:dns/UDP"}},
	}
	seen := 0
	for i, s := range steps {
		if s.do != nil {
			s.do(t)
		}
		for j := range s.want {
			s.want[j] = strings.ReplaceAll(strings.ReplaceAll(s.want[j], "NS/", ns+"/"), "IP:", ip+":")
		}
		sort.Strings(s.want)
		for j := range s.changed {
			s.changed[j] = strings.ReplaceAll(s.changed[j], "NS/", ns+"/")
		}
		for j := range s.udp {
			s.udp[j] = strings.ReplaceAll(s.udp[j], "NS/", ns+"/")
		}
		var got proxy.State
		eventually(t, s.name, func() bool {
			for k, st := range dp.since(seen) {
				if slices.Equal(describe(st, ns), s.want) {
					got, seen = st, seen+k+1
					return true
				}
			}
			return false
		})
		if got.NodeName != node {
			t.Errorf("step %d: node %q, want %q", i, got.NodeName, node)
		}
		if i == 0 {
			if got.Changed != nil {
				t.Errorf("step %d: a partial first sync: %v", i, got.Changed)
			}
		} else if got.Changed == nil {
			t.Errorf("step %d: a full sync, want a partial one", i)
		} else if g := names(got.Changed, ns); !slices.Equal(g, s.changed) {
			t.Errorf("step %d: changed %v, want %v", i, g, s.changed)
		}
		if g := names(got.UDPChanged, ns); !slices.Equal(g, s.udp) {
			t.Errorf("step %d: UDP changed %v, want %v", i, g, s.udp)
		}
	}
}

// get fetches url and decodes a JSON body into into (if not nil); it returns the status.
func get(t *testing.T, url string, into any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("%s: %v in %s", url, err, body)
		}
	}
	return resp.StatusCode
}

func metricsText(t *testing.T, s *proxyapp.Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// TestHealthz: healthy once synced on an eligible node; unhealthy while changes wait for a data
// path that keeps failing (and the next success is a full sync); /healthz but not /livez
// follows the node.
func TestHealthz(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	ns := testserver.Namespace(t, c, "proxy-health-")
	nodes := client.Resource[*corev1.Node](c, "nodes")
	services := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	node := uniqueNode("proxy-health-node")
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), node, metav1.DeleteOptions{}) })

	o := testOptions(node)
	o.SyncPeriod = 100 * time.Millisecond // unhealthy after 200 ms of failures
	o.IPFamily = ""                       // detected from the node
	dp := &recorder{}
	s := startProxy(t, o, c, dp)
	if s.IPFamily != corev1.IPv4Protocol {
		t.Errorf("IP family %q", s.IPFamily)
	}
	healthz, livez := "http://"+s.HealthzAddr+"/healthz", "http://"+s.HealthzAddr+"/livez"
	status := func(url string) func() int { return func() int { return get(t, url, nil) } }
	waitFor := func(what string, f func() int, want int) {
		t.Helper()
		eventually(t, fmt.Sprintf("%s: %d", what, want), func() bool { return f() == want })
	}

	waitFor("healthz once synced", status(healthz), 200)
	var h proxy.Health
	if get(t, healthz, &h); !h.Healthy || h.NodeEligible == nil || !*h.NodeEligible || h.LastUpdated.IsZero() || h.CurrentTime.IsZero() {
		t.Errorf("health %+v", h)
	}

	dp.setFail(errors.New("broken"))
	if _, err := services.Create(ctx, svc("a", corev1.ServicePort{Port: 80})); err != nil {
		t.Fatal(err)
	}
	waitFor("healthz while failing", status(healthz), 503)
	waitFor("livez while failing", status(livez), 503)
	if get(t, healthz, &h); h.Healthy {
		t.Errorf("health %+v", h)
	}
	failedAt := dp.count()
	dp.setFail(nil)
	waitFor("healthz after recovery", status(healthz), 200)
	eventually(t, "a successful sync", func() bool {
		for _, st := range dp.since(failedAt) {
			if len(describe(st, ns)) == 1 {
				if st.Changed != nil {
					t.Errorf("first sync after a failure is partial: %v", st.Changed)
				}
				return true
			}
		}
		return false
	})

	taint := func(taints []corev1.Taint) {
		n, err := nodes.Get(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		n = n.DeepCopy()
		n.Spec.Taints = taints
		if _, err := nodes.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	taint([]corev1.Taint{{Key: proxy.ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}})
	waitFor("healthz on a node about to go", status(healthz), 503)
	if code := get(t, livez, nil); code != 200 {
		t.Errorf("livez %d on a node about to go", code)
	}
	taint(nil)
	waitFor("healthz on a node back", status(healthz), 200)
	if err := nodes.Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("healthz without a node", status(healthz), 503)
	if code := get(t, livez, nil); code != 200 {
		t.Errorf("livez %d without a node", code)
	}

	m := metricsText(t, s)
	for _, want := range []string{
		`kubeproxy_proxy_healthz_total{code="200"}`, `kubeproxy_proxy_healthz_total{code="503"}`,
		`kubeproxy_proxy_livez_total{code="503"}`, `kubeproxy_kplane_sync_proxy_rules_failures_total`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestMetrics: Kubernetes' names, network programming latency from the trigger time, and
// problems counted once per change however often they are reported.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, nil)
	ns := testserver.Namespace(t, c, "proxy-metrics-")
	services := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	epSlices := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns)
	dp := &recorder{}
	s := startProxy(t, testOptions(uniqueNode("proxy-metrics-node")), c, dp)
	eventually(t, "the first sync", func() bool { return dp.count() > 0 })
	// Other tests' objects may be problems too: count from here.
	const unsupported, ghosts = `kubeproxy_kplane_problems_total{reason="unsupported-protocol"}`, `kubeproxy_kplane_problems_total{reason="endpoints-without-service"}`
	before := metricsText(t, s)

	if _, err := services.Create(ctx, svc("sctp", corev1.ServicePort{Name: "s", Port: 9, Protocol: corev1.ProtocolSCTP},
		corev1.ServicePort{Name: "t", Port: 10, Protocol: corev1.ProtocolTCP})); err != nil {
		t.Fatal(err)
	}
	// Services and EndpointSlices arrive through separate watches: had the slice come first, its
	// port would count as endpoints without a service once, which this test does not mean.
	eventually(t, "the service synced", func() bool {
		for _, st := range dp.since(0) {
			if len(describe(st, ns)) == 2 { // its two ports
				return true
			}
		}
		return false
	})
	triggered := epSlice("sctp-1", "sctp", map[string]int32{"t": 10}, endpoint("10.2.0.1", "", true))
	triggered.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
	if _, err := epSlices.Create(ctx, triggered); err != nil {
		t.Fatal(err)
	}
	if _, err := epSlices.Create(ctx, epSlice("ghost-1", "ghost", map[string]int32{"t": 10}, endpoint("10.2.0.2", "", true))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "service and endpoints synced", func() bool {
		for _, st := range dp.since(0) {
			if len(describe(st, ns)) == 4 { // two ports, the sctp endpoint, the ghost endpoint
				return true
			}
		}
		return false
	})
	// More syncs, which report the SCTP port again.
	for i := range 3 {
		if _, err := services.Create(ctx, svc(fmt.Sprint("more-", i), corev1.ServicePort{Port: 80})); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "more syncs", func() bool {
		st := dp.since(dp.count() - 1)
		return len(st) == 1 && len(describe(st[0], ns)) == 7
	})

	m := metricsText(t, s)
	for _, want := range []string{
		`kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}`,
		`kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} `,
		`kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family="IPv4"} `,
		`kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"} 1`,
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} `,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} `,
		`kubeproxy_sync_proxy_rules_endpoint_changes_total `,
		`kubeproxy_sync_proxy_rules_endpoint_changes_pending `,
		`kubeproxy_sync_proxy_rules_service_changes_total `,
		`kubeproxy_sync_proxy_rules_service_changes_pending `,
		`go_goroutines `,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, name := range []string{unsupported, ghosts} {
		if got := metricValue(m, name) - metricValue(before, name); got != 1 {
			t.Errorf("%s grew by %v, want 1", name, got)
		}
	}
}

// metricValue reads one sample from a text exposition (0 when absent).
func metricValue(text, sample string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func TestStopEndsEveryGoroutine(t *testing.T) {
	transport := &http.Transport{}
	c := newClient(t, transport)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	dp := &recorder{}
	s, err := proxyapp.Start(ctx, testOptions(uniqueNode("proxy-stop-node")), c, dp)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first sync", func() bool { return dp.count() > 0 })
	probe := &http.Client{Transport: transport}
	for _, url := range []string{"http://" + s.HealthzAddr + "/healthz", "http://" + s.MetricsAddr + "/metrics"} {
		resp, err := probe.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	cancel()
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	transport.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before start, %d after stop:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProfiling: --profiling serves Go's profiles on the metrics server only; off (the
// default) there are none.
func TestProfiling(t *testing.T) {
	status := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	c := newClient(t, nil)
	o := testOptions(uniqueNode("proxy-pprof-node"))
	off := startProxy(t, o, c, &recorder{})
	if code := status("http://" + off.MetricsAddr + "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("profiling off: /debug/pprof/heap answered %d", code)
	}
	o.Profiling = true
	on := startProxy(t, o, c, &recorder{})
	if code := status("http://" + on.MetricsAddr + "/debug/pprof/heap"); code != http.StatusOK {
		t.Errorf("profiling on: /debug/pprof/heap on the metrics server answered %d", code)
	}
	if code := status("http://" + on.HealthzAddr + "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("profiling on: /debug/pprof/heap on the health server answered %d", code)
	}
}
