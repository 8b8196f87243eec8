package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	proxyapp "github.com/kplane/kplane/proxy/app"
)

// TestThroughTheAPIServer runs the whole proxy (informers, trackers, runner) with this data
// path against a real apiserver, programming the lab's node; traffic comes from the lab's
// client host, which routes everything through the node, so any ClusterIP range works.
func TestThroughTheAPIServer(t *testing.T) {
	l := newLab(t, 3)
	srv, err := testserver.Start(func(o *apiserver.Options) { o.ServiceClusterIPRange = "10.96.0.0/24" })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	c, err := client.New(client.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	ns := testserver.Namespace(t, c, "nft-")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	services := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	svc, err := services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(whoPort), Protocol: corev1.ProtocolTCP}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// slice lists every backend, ready unless named in notReady.
	slice := func(notReady ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(whoPort)), Protocol: new(corev1.ProtocolTCP)}},
		}
		for _, b := range l.backends {
			ok := true
			for _, n := range notReady {
				ok = ok && n != b.name
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{b.ip.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: new(ok), Serving: new(ok)}})
		}
		return s
	}
	slices := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns)
	if _, err := slices.Create(ctx, slice()); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	dp, err := New(Options{NetNS: l.nodeNS, Registerer: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dp.Cleanup(context.Background()); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
	})
	o := proxyapp.DefaultOptions()
	o.HostnameOverride, o.MinSyncPeriod, o.Registry = "node-1", 0, reg
	o.HealthzBindAddress, o.MetricsBindAddress = "127.0.0.1:0", "127.0.0.1:0"
	p, err := proxyapp.Start(ctx, o, c, dp)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after Cleanup's, so it runs first: the proxy stops before the table goes.
	t.Cleanup(func() {
		cancel()
		if err := p.Wait(); err != nil {
			t.Errorf("proxy: %v", err)
		}
	})

	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	nodePort := netip.AddrPortFrom(l.nodeIP, uint16(svc.Spec.Ports[0].NodePort))
	// answers opens n connections to addr from the client and counts them per backend.
	answers := func(addr netip.AddrPort, n int) (map[string]int, error) {
		seen := map[string]int{}
		for range n {
			conn, b, _, err := l.who(addr)
			if err != nil {
				return seen, err
			}
			conn.Close()
			seen[b]++
		}
		return seen, nil
	}

	t.Run("ClusterIP reaches all backends", func(t *testing.T) {
		within(t, "every backend through the ClusterIP", func() error {
			seen, err := answers(vip, 60)
			if err == nil && len(seen) != 3 {
				err = fmt.Errorf("connections per backend: %v, want all three", seen)
			}
			return err
		})
	})
	t.Run("NodePort", func(t *testing.T) {
		within(t, "the NodePort", func() error { _, err := answers(nodePort, 3); return err })
	})
	t.Run("an endpoint turned not ready gets no new connections", func(t *testing.T) {
		cur, err := slices.Get(ctx, "web-1")
		if err != nil {
			t.Fatal(err)
		}
		next := slice("b1")
		next.ResourceVersion = cur.ResourceVersion
		if _, err := slices.Update(ctx, next); err != nil {
			t.Fatal(err)
		}
		within(t, "b1 left out", func() error {
			seen, err := answers(vip, 30)
			if err == nil && (seen["b1"] > 0 || len(seen) != 2) {
				err = fmt.Errorf("connections per backend: %v, want b2 and b3", seen)
			}
			return err
		})
	})
	t.Run("no endpoints: refused", func(t *testing.T) {
		if err := slices.Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		within(t, "connection refused", func() error {
			conn, err := l.dial(vip)
			if err == nil {
				conn.Close()
				return fmt.Errorf("connected")
			}
			if !isRefused(err) {
				return err
			}
			return nil
		})
	})
	t.Run("deleted service: rules gone", func(t *testing.T) {
		if err := services.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Without a rule for it, the ClusterIP is routed back towards the client, which
		// drops it: no answer (the proxier rejects only ports of ClusterIPs it knows).
		within(t, "the service's rules removed", func() error {
			out, err := exec.Command("ip", "netns", "exec", nsName("node"), "nft", "list", "table", "ip", TableName).CombinedOutput()
			if err != nil {
				return fmt.Errorf("nft list: %v: %s", err, out)
			}
			if strings.Contains(string(out), ns) || strings.Contains(string(out), vip.Addr().String()) {
				return fmt.Errorf("the table still mentions the service:\n%s", out)
			}
			return nil
		})
		conn, err := l.dial(vip)
		if err == nil {
			conn.Close()
			t.Fatal("connected to a deleted service")
		}
		t.Logf("connecting to the deleted service's ClusterIP: %v", err)
	})
}

// within retries cond until it succeeds, failing the test after 10 seconds.
func within(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
