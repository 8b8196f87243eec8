package userspace_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	proxyapp "github.com/kplane/kplane/proxy/app"
	"github.com/kplane/kplane/proxy/userspace"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestLoadBalancerIngressThroughTheAPIServer: the proxy serves the addresses a LoadBalancer
// Service's status shows (on 127.0.40.x here, as a load-balancer controller would write them)
// like its ClusterIP, except those in ipMode Proxy (a load balancer that forwards to the
// nodes itself); when the status no longer shows an address, it stops answering there.
func TestLoadBalancerIngressThroughTheAPIServer(t *testing.T) {
	srv, err := testserver.Start(func(o *apiserver.Options) { o.ServiceClusterIPRange = "127.0.10.0/24" })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := client.New(client.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	ns := testserver.Namespace(t, c, "proxy-lb-")
	all := map[string]bool{"127.0.20.1": true, "127.0.20.2": true, "127.0.20.3": true}
	for ip := range all {
		backend(t, ip)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	services := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	svc, err := services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
		{IP: "127.0.40.1", IPMode: new(corev1.LoadBalancerIPModeVIP)},
		{IP: "127.0.40.2", IPMode: new(corev1.LoadBalancerIPModeProxy)},
	}
	if svc, err = services.UpdateStatus(ctx, svc); err != nil {
		t.Fatal(err)
	}
	slices := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns)
	if _, err := slices.Create(ctx, slice(all)); err != nil {
		t.Fatal(err)
	}

	dp := userspace.New(userspace.Options{})
	go func() { _ = dp.Run(ctx) }()
	o := proxyapp.DefaultOptions()
	o.HostnameOverride, o.MinSyncPeriod = "node-1", 0
	o.HealthzBindAddress, o.MetricsBindAddress = "127.0.0.1:0", "127.0.0.1:0"
	p, err := proxyapp.Start(ctx, o, c, dp)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = p.Wait() }()

	clusterIP := svc.Spec.ClusterIP + ":80"
	refused := func(addr string) func() error {
		return func() error {
			if _, err := askTCP(addr, ""); err == nil || !strings.Contains(err.Error(), "refused") {
				return fmt.Errorf("%s: still answered or another error: %v", addr, err)
			}
			return nil
		}
	}
	eventually(t, "every backend through the load-balancer address", func() error {
		seen, err := answers("127.0.40.1:80", "", 30)
		if err == nil && len(seen) != 3 {
			err = fmt.Errorf("answers %v, want all three backends", seen)
		}
		return err
	})
	// The proxy has synced the Service by now: a Proxy-mode address is not its to serve.
	if err := refused("127.0.40.2:80")(); err != nil {
		t.Error(err)
	}

	svc.Status.LoadBalancer.Ingress = nil
	if _, err := services.UpdateStatus(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the load-balancer address closed", refused("127.0.40.1:80"))
	if a, err := askTCP(clusterIP, ""); err != nil || !all[a] {
		t.Errorf("ClusterIP after the address went: %q, %v", a, err)
	}
}
