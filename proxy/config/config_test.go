package config_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/proxy/config"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var srv *testserver.Server

func TestMain(m *testing.M) {
	testserver.Main(m, func(s *testserver.Server, _ *client.Client) { srv = s })
}

func newClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// recorder implements the three handler interfaces and logs each call as "<id> <call> <name>".
type recorder struct {
	id  string
	mu  *sync.Mutex
	log *[]string
}

func (r recorder) record(call string, obj metav1.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	if obj != nil {
		name = " " + obj.GetName()
	}
	*r.log = append(*r.log, r.id+" "+call+name)
}

func (r recorder) OnServiceAdd(s *corev1.Service)                  { r.record("add", s) }
func (r recorder) OnServiceUpdate(old, s *corev1.Service)          { r.record("update", s) }
func (r recorder) OnServiceDelete(s *corev1.Service)               { r.record("delete", s) }
func (r recorder) OnServiceSynced()                                { r.record("synced", nil) }
func (r recorder) OnEndpointSliceAdd(s *discoveryv1.EndpointSlice) { r.record("add", s) }
func (r recorder) OnEndpointSliceUpdate(old, s *discoveryv1.EndpointSlice) {
	r.record("update", s)
}
func (r recorder) OnEndpointSliceDelete(s *discoveryv1.EndpointSlice) { r.record("delete", s) }
func (r recorder) OnEndpointSliceSynced()                             { r.record("synced", nil) }
func (r recorder) OnNodeAdd(n *corev1.Node)                           { r.record("add", n) }
func (r recorder) OnNodeUpdate(old, n *corev1.Node)                   { r.record("update", n) }
func (r recorder) OnNodeDelete(n *corev1.Node)                        { r.record("delete", n) }
func (r recorder) OnNodeSynced()                                      { r.record("synced", nil) }

// step changes the server and names the calls both handlers must see next, in order (each call
// is expected from handler "1" then handler "2").
type step struct {
	do   func(ctx context.Context, t *testing.T)
	want []string
}

func both(calls ...string) []string {
	var out []string
	for _, c := range calls {
		out = append(out, "1 "+c, "2 "+c)
	}
	return out
}

// runSteps makes a factory (over namespace ns, or all) and the config under test (through mk, which registers both
// recorders), runs them, and checks each step's calls; the initial calls are steps[0].want.
func runSteps(t *testing.T, c *client.Client, ns string, mk func(f *cache.Factory, h1, h2 recorder) func(context.Context), steps []step) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var log []string
	f := cache.NewFactory(c, ns)
	run := mk(f, recorder{"1", &mu, &log}, recorder{"2", &mu, &log})
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		f.Shutdown()
	}()
	seen := 0
	for i, s := range steps {
		if s.do != nil {
			s.do(ctx, t)
		}
		if i == 0 {
			f.Start(ctx)
			wg.Add(1)
			go func() { defer wg.Done(); run(ctx) }()
		}
		want := seen + len(s.want)
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			got := slices.Clone(log)
			mu.Unlock()
			if len(got) >= want || time.Now().After(deadline) {
				if !slices.Equal(got[seen:], s.want) {
					t.Fatalf("step %d: calls\n  %s\nwant\n  %s", i, strings.Join(got[seen:], "\n  "), strings.Join(s.want, "\n  "))
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		seen = want
	}
}

func TestServiceConfig(t *testing.T) {
	c := newClient(t)
	ns := testserver.Namespace(t, c, "proxy-config-")
	svcs := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	svc := func(name string, labels map[string]string, clusterIP string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	create := func(s *corev1.Service) func(context.Context, *testing.T) {
		return func(ctx context.Context, t *testing.T) {
			if _, err := svcs.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	setLabels := func(name string, labels map[string]string) func(context.Context, *testing.T) {
		return func(ctx context.Context, t *testing.T) {
			s, err := svcs.Get(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			s = s.DeepCopy()
			s.Labels = labels
			if _, err := svcs.Update(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	del := func(name string) func(context.Context, *testing.T) {
		return func(ctx context.Context, t *testing.T) {
			if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	other := map[string]string{config.LabelServiceProxyName: "other"}
	runSteps(t, c, ns, func(f *cache.Factory, h1, h2 recorder) func(context.Context) {
		sc := config.NewServiceConfig(f, 0)
		sc.RegisterEventHandler(h1)
		sc.RegisterEventHandler(h2)
		return sc.Run
	}, []step{
		{do: func(ctx context.Context, t *testing.T) {
			create(svc("a", nil, ""))(ctx, t)
			create(svc("headless", nil, corev1.ClusterIPNone))(ctx, t)
			create(svc("theirs", other, ""))(ctx, t)
		}, want: both("add a", "synced")},
		{do: create(svc("b", nil, "")), want: both("add b")},
		{do: setLabels("b", map[string]string{"app": "x"}), want: both("update b")},
		{do: setLabels("b", other), want: both("delete b")},
		{do: setLabels("theirs", nil), want: both("add theirs")},
		{do: setLabels("b", nil), want: both("add b")},
		{do: del("headless")},
		{do: del("a"), want: both("delete a")},
	})
}

func TestEndpointSliceConfig(t *testing.T) {
	c := newClient(t)
	ns := testserver.Namespace(t, c, "proxy-config-")
	slicesAPI := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns)
	slice := func(name string, labels map[string]string, ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}}}
	}
	headless := map[string]string{corev1.IsHeadlessService: ""}
	create := func(s *discoveryv1.EndpointSlice) func(context.Context, *testing.T) {
		return func(ctx context.Context, t *testing.T) {
			if _, err := slicesAPI.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	update := func(name, ip string) func(context.Context, *testing.T) {
		return func(ctx context.Context, t *testing.T) {
			s, err := slicesAPI.Get(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			s = s.DeepCopy()
			s.Endpoints[0].Addresses = []string{ip}
			if _, err := slicesAPI.Update(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	runSteps(t, c, ns, func(f *cache.Factory, h1, h2 recorder) func(context.Context) {
		sc := config.NewEndpointSliceConfig(f, 0)
		sc.RegisterEventHandler(h1)
		sc.RegisterEventHandler(h2)
		return sc.Run
	}, []step{
		{do: func(ctx context.Context, t *testing.T) {
			create(slice("s1", nil, "10.1.0.1"))(ctx, t)
			create(slice("hs", headless, "10.1.0.2"))(ctx, t)
		}, want: both("add s1", "synced")},
		{do: update("hs", "10.1.0.3")},
		{do: update("s1", "10.1.0.4"), want: both("update s1")},
		{do: create(slice("s2", nil, "10.1.0.5")), want: both("add s2")},
		{do: func(ctx context.Context, t *testing.T) {
			if err := slicesAPI.Delete(ctx, "s1", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, want: both("delete s1")},
	})
}

func TestNodeConfig(t *testing.T) {
	c := newClient(t)
	nodes := client.Resource[*corev1.Node](c, "nodes")
	suffix := fmt.Sprint(time.Now().UnixNano())
	ours, theirs := "ours-"+suffix, "theirs-"+suffix
	label := func(name, v string) func(context.Context, *testing.T) {
		return func(ctx context.Context, t *testing.T) {
			n, err := nodes.Get(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			n = n.DeepCopy()
			n.Labels = map[string]string{corev1.LabelTopologyZone: v}
			if _, err := nodes.Update(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		_ = nodes.Delete(context.Background(), theirs, metav1.DeleteOptions{})
	})
	runSteps(t, c, "", func(f *cache.Factory, h1, h2 recorder) func(context.Context) {
		nc := config.NewNodeConfig(f, ours, 0)
		nc.RegisterEventHandler(h1)
		nc.RegisterEventHandler(h2)
		return nc.Run
	}, []step{
		{do: func(ctx context.Context, t *testing.T) {
			for _, name := range []string{ours, theirs} {
				if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
					t.Fatal(err)
				}
			}
		}, want: both("add "+ours, "synced")},
		{do: label(theirs, "a")},
		{do: label(ours, "b"), want: both("update " + ours)},
		{do: func(ctx context.Context, t *testing.T) {
			if err := nodes.Delete(ctx, ours, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, want: both("delete " + ours)},
	})
}

// TestSyncedAfterEmptyList: with nothing to list, Synced still comes, once.
func TestSyncedAfterEmptyList(t *testing.T) {
	c := newClient(t)
	runSteps(t, c, "", func(f *cache.Factory, h1, h2 recorder) func(context.Context) {
		nc := config.NewNodeConfig(f, "no-such-node", 0)
		nc.RegisterEventHandler(h1)
		nc.RegisterEventHandler(h2)
		return nc.Run
	}, []step{{want: both("synced")}})
}
