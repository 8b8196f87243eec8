package userspace_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

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

// backend is a TCP and UDP server on one loopback address, answering with its name.
func backend(t *testing.T, ip string) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":8080")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ip+":8081")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(conn, ip)
			conn.Close()
		}
	}()
	go func() {
		buf := make([]byte, 512)
		for {
			_, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(ip+"\n"), addr)
		}
	}()
}

// askTCP connects to addr from the local address from (empty: any) and returns the answer.
func askTCP(addr, from string) (string, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

func askUDP(addr string) (string, error) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("hi")); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	return strings.TrimSpace(string(buf[:n])), err
}

func eventually(t *testing.T, what string, cond func() error) {
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

// answers collects the distinct answers of n TCP requests.
func answers(addr, from string, n int) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		a, err := askTCP(addr, from)
		if err != nil {
			return seen, err
		}
		seen[a]++
	}
	return seen, nil
}

func slice(ready map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)},
			{Name: new("dns"), Port: new(int32(8081)), Protocol: new(corev1.ProtocolUDP)},
		},
	}
	for _, ip := range []string{"127.0.20.1", "127.0.20.2", "127.0.20.3"} {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: new(ready[ip]), Serving: new(ready[ip])}})
	}
	return s
}

// TestThroughTheAPIServer runs the proxy with this data path against a real apiserver whose
// ClusterIPs come from 127.0.10.0/24, so services are reachable without root or setup.
func TestThroughTheAPIServer(t *testing.T) {
	srv, err := testserver.Start(func(o *apiserver.Options) { o.ServiceClusterIPRange = "127.0.10.0/24" })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := client.New(client.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	ns := testserver.Namespace(t, c, "proxy-")
	for _, ip := range []string{"127.0.20.1", "127.0.20.2", "127.0.20.3"} {
		backend(t, ip)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	services := client.Resource[*corev1.Service](c, "services").Namespace(ns)
	svc, err := services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
			{Name: "dns", Port: 81, TargetPort: intstr.FromInt32(8081), Protocol: corev1.ProtocolUDP},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	slices := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns)
	all := map[string]bool{"127.0.20.1": true, "127.0.20.2": true, "127.0.20.3": true}
	if _, err := slices.Create(ctx, slice(all)); err != nil {
		t.Fatal(err)
	}

	dp := userspace.New(userspace.Options{NodeAddresses: nil})
	go func() { _ = dp.Run(ctx) }()
	o := proxyapp.DefaultOptions()
	o.HostnameOverride, o.MinSyncPeriod = "node-1", 0
	o.HealthzBindAddress, o.MetricsBindAddress = "127.0.0.1:0", "127.0.0.1:0"
	p, err := proxyapp.Start(ctx, o, c, dp)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = p.Wait() }()

	vip := svc.Spec.ClusterIP
	tcpAddr, udpAddr := vip+":80", vip+":81"
	nodePort := fmt.Sprintf("127.0.0.1:%d", svc.Spec.Ports[0].NodePort)

	t.Run("load spreads over the backends", func(t *testing.T) {
		eventually(t, "TCP through the ClusterIP", func() error {
			seen, err := answers(tcpAddr, "", 30)
			if err == nil && len(seen) != 3 {
				err = fmt.Errorf("answers %v, want all three backends", seen)
			}
			return err
		})
	})
	t.Run("UDP", func(t *testing.T) {
		eventually(t, "UDP through the ClusterIP", func() error {
			a, err := askUDP(udpAddr)
			if err == nil && !all[a] {
				err = fmt.Errorf("answer %q", a)
			}
			return err
		})
	})
	t.Run("NodePort", func(t *testing.T) {
		eventually(t, "TCP through the NodePort", func() error { _, err := askTCP(nodePort, ""); return err })
	})
	t.Run("failover when an endpoint turns not ready", func(t *testing.T) {
		cur, err := slices.Get(ctx, "web-1")
		if err != nil {
			t.Fatal(err)
		}
		next := slice(map[string]bool{"127.0.20.2": true, "127.0.20.3": true})
		next.ResourceVersion = cur.ResourceVersion
		if _, err := slices.Update(ctx, next); err != nil {
			t.Fatal(err)
		}
		eventually(t, "127.0.20.1 left out", func() error {
			seen, err := answers(tcpAddr, "", 20)
			if err == nil && (seen["127.0.20.1"] > 0 || len(seen) != 2) {
				err = fmt.Errorf("answers %v", seen)
			}
			return err
		})
	})
	t.Run("ClientIP affinity", func(t *testing.T) {
		cur, err := services.Get(ctx, "web")
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if _, err := services.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		eventually(t, "one backend per client", func() error {
			for _, client := range []string{"127.0.30.1", "127.0.30.2"} {
				seen, err := answers(tcpAddr, client, 10)
				if err == nil && len(seen) != 1 {
					err = fmt.Errorf("client %s got %v", client, seen)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	t.Run("deleted service: listener gone", func(t *testing.T) {
		if err := services.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "connection refused", func() error {
			if _, err := askTCP(tcpAddr, ""); err == nil || !strings.Contains(err.Error(), "refused") {
				return fmt.Errorf("still answered or another error: %v", err)
			}
			return nil
		})
	})
}
