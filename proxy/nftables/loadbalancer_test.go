package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

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

// TestLoadBalancerIngress runs the whole proxy against a real apiserver, programming the lab's
// node: the addresses a LoadBalancer Service's status shows in ipMode VIP (as a load-balancer
// controller writes them) take traffic from the client host to the endpoints, masqueraded as
// external traffic under the Cluster policy is; an address in ipMode Proxy is not programmed;
// an address the status no longer shows loses its rules while the ClusterIP keeps working.
func TestLoadBalancerIngress(t *testing.T) {
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
	ns := testserver.Namespace(t, c, "nft-lb-")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	services := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	svc, err := services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(whoPort), Protocol: corev1.ProtocolTCP}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	const vipIP, proxyIP = "192.0.2.10", "192.0.2.11"
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
		{IP: vipIP, IPMode: new(corev1.LoadBalancerIPModeVIP)},
		{IP: proxyIP, IPMode: new(corev1.LoadBalancerIPModeProxy)},
	}
	if svc, err = services.UpdateStatus(ctx, svc); err != nil {
		t.Fatal(err)
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(whoPort)), Protocol: new(corev1.ProtocolTCP)}},
	}
	for _, b := range l.backends {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{b.ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true), Serving: new(true)}})
	}
	if _, err := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns).Create(ctx, s); err != nil {
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

	table := func() string {
		out, err := exec.Command("ip", "netns", "exec", nsName("node"), "nft", "list", "table", "ip", TableName).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list: %v: %s", err, out)
		}
		return string(out)
	}
	lb := netip.AddrPortFrom(netip.MustParseAddr(vipIP), 80)
	within(t, "every backend through the load-balancer address, masqueraded", func() error {
		seen := map[string]int{}
		for range 60 {
			conn, b, from, err := l.who(lb)
			if err != nil {
				return err
			}
			conn.Close()
			seen[b]++
			// The node's own address on that backend's link: external traffic under the
			// Cluster policy is masqueraded, so that the answer comes back through the node.
			for _, be := range l.backends {
				if want := strings.TrimSuffix(be.ip.String(), ".2") + ".1"; be.name == b && from != want {
					return fmt.Errorf("backend %s saw %s, want the node's %s", b, from, want)
				}
			}
		}
		if len(seen) != 3 {
			return fmt.Errorf("connections per backend: %v, want all three", seen)
		}
		return nil
	})
	if strings.Contains(table(), proxyIP) {
		t.Errorf("the ipMode Proxy address is programmed:\n%s", table())
	}

	svc.Status.LoadBalancer.Ingress = nil
	if _, err := services.UpdateStatus(ctx, svc); err != nil {
		t.Fatal(err)
	}
	within(t, "the load-balancer address' rules removed", func() error {
		if tab := table(); strings.Contains(tab, vipIP) {
			return fmt.Errorf("the table still mentions %s:\n%s", vipIP, tab)
		}
		return nil
	})
	conn, b, _, err := l.who(netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80))
	if err != nil {
		t.Fatalf("ClusterIP after the address went: %v", err)
	}
	conn.Close()
	t.Logf("ClusterIP still answered by %s", b)
}
