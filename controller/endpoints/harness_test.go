package endpoints

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The integration tests share one real apiserver (embedded etcd, real HTTP). The apiserver
// runs no controllers: pods get their status from the tests (UpdateStatus), and a deleted
// namespace stays Terminating. Each test works in its own namespace, and its controller's
// informers watch only that namespace, so tests cannot see each other's objects.

var server *testserver.Server

func TestMain(m *testing.M) {
	var err error
	if server, err = testserver.Start(nil); err != nil {
		fmt.Fprintln(os.Stderr, "start apiserver:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = server.Stop()
	os.Exit(code)
}

const waitTimeout = 10 * time.Second

func newTestClient(t *testing.T, transport http.RoundTripper) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Host: server.URL, QPS: -1, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// harness is one controller running against the test server, limited to namespace ns.
type harness struct {
	t    *testing.T
	c    *client.Client
	ns   string
	reg  *prometheus.Registry
	stop func()
}

// start runs a controller the way the manager does: build it on a Context, start the shared
// informers and the event recorder, then Run. It is stopped (and waited for) when the test ends.
// tune, when not nil, changes the settings (the Context's shared ones, the controller's
// Options, at their defaults) before the controller is built.
func start(t *testing.T, c *client.Client, ns string, tune func(*controller.Context, *Options)) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	cc, err := controller.NewContext(c, reg)
	if err != nil {
		t.Fatal(err)
	}
	cc.Informers = cache.NewFactory(c, ns)
	o := DefaultOptions()
	if tune != nil {
		tune(cc, o)
	}
	ctl, err := Entry.New(cc, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cc.Informers.Start(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); cc.Recorder.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := ctl.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			cc.Informers.Shutdown()
		})
	}
	t.Cleanup(stop)
	return &harness{t: t, c: c, ns: ns, reg: reg, stop: stop}
}

// syncs reads the controller's sync counter for one result (success, error, dropped).
func (h *harness) syncs(result string) float64 {
	h.t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "kplane_controller_syncs_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var ctl, res string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "controller":
					ctl = l.GetValue()
				case "result":
					res = l.GetValue()
				}
			}
			if ctl == "endpoint" && res == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// eventually polls cond until it reports true or the deadline passes; cond's message says
// what it saw last, for the failure.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v; last seen: %s", what, waitTimeout, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func endpointsAPI(c *client.Client, ns string) *client.Typed[*corev1.Endpoints] {
	return client.Resource[*corev1.Endpoints](c, "endpoints").Namespace(ns)
}

func servicesAPI(c *client.Client, ns string) *client.Typed[*corev1.Service] {
	return client.Resource[*corev1.Service](c, "services").Namespace(ns)
}

func podsAPI(c *client.Client, ns string) *client.Typed[*corev1.Pod] {
	return client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
}

// waitSubsets waits until the Endpoints name in ns mean want and returns them.
func waitSubsets(t *testing.T, c *client.Client, ns, name string, want []corev1.EndpointSubset) *corev1.Endpoints {
	t.Helper()
	var got *corev1.Endpoints
	eventually(t, "endpoints "+name+" converge", func() (bool, string) {
		ep, err := endpointsAPI(c, ns).Get(context.Background(), name)
		if err != nil {
			return false, err.Error()
		}
		got = ep
		return equalSubsets(ep.Subsets, want), dump(ep.Subsets)
	})
	return got
}

func waitGone(t *testing.T, c *client.Client, ns, name string) {
	t.Helper()
	eventually(t, "endpoints "+name+" deleted", func() (bool, string) {
		ep, err := endpointsAPI(c, ns).Get(context.Background(), name)
		if client.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprint(dump(ep), err)
	})
}

func createService(t *testing.T, c *client.Client, ns string, svc *corev1.Service) *corev1.Service {
	t.Helper()
	svc = svc.DeepCopy()
	svc.Namespace, svc.UID, svc.ResourceVersion, svc.CreationTimestamp = ns, "", "", metav1.Time{}
	out, err := servicesAPI(c, ns).Create(context.Background(), svc)
	if err != nil {
		t.Fatalf("create service %s: %v", svc.Name, err)
	}
	return out
}

// livePod makes a pod for the server: bound to node-1, one container listening on 8080 as
// "http", labelled app=web.
func livePod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{Name: "main", Image: "nginx", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
			}}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// createPod creates p and, when ip is not empty, gives it a Running status with that IP and
// the given readiness.
func createPod(t *testing.T, c *client.Client, ns string, p *corev1.Pod, ip string, ready bool) *corev1.Pod {
	t.Helper()
	out, err := podsAPI(c, ns).Create(context.Background(), p)
	if err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
	if ip == "" {
		return out
	}
	return setStatus(t, c, out, ip, ready, corev1.PodRunning)
}

func setStatus(t *testing.T, c *client.Client, p *corev1.Pod, ip string, ready bool, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p.Status.Phase = phase
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.Now()}}
	out, err := podsAPI(c, p.Namespace).UpdateStatus(context.Background(), p)
	if err != nil {
		t.Fatalf("status of pod %s: %v", p.Name, err)
	}
	return out
}

// liveAddr is the address a pod created by livePod in ns gets.
func liveAddr(p *corev1.Pod, ip string) corev1.EndpointAddress {
	node := "node-1"
	return corev1.EndpointAddress{IP: ip, NodeName: &node, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}}
}

func namedHTTPService() *corev1.Service {
	return service(withPorts(tcpPort("http", 80, intstr.FromString("http"))), withClusterIP(""), withFamilies())
}

// failingEndpointWrites fails the first n creates of Endpoints with a 500, passing everything
// else to the real server.
type failingEndpointWrites struct {
	next http.RoundTripper
	left atomic.Int32
}

func (f *failingEndpointWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/endpoints") && f.left.Add(-1) >= 0 {
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("injected failure")), Request: r}, nil
	}
	return f.next.RoundTrip(r)
}
