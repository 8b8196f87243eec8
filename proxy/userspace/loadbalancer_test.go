package userspace

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestLoadBalancerIPs: a Service's load-balancer addresses (its status.loadBalancer.ingress in
// VIP mode) answer at the service port like its ClusterIP, as external traffic: under
// externalTrafficPolicy Local only this node's endpoints serve them. An address taken out of
// the status closes its listener; the ClusterIP goes on.
func TestLoadBalancerIPs(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	a := startTCPBackend(t, "a")
	b := startTCPBackend(t, "b")
	name := portName("web", corev1.ProtocolTCP)
	svc := servicePortSpec(name, serviceIP(t), servicePortNumber)
	lb1, lb2 := serviceIP(t), serviceIP(t)
	svc.LoadBalancerIPs = []netip.Addr{lb1, lb2}
	apply(t, p, oneService(svc, ready(a.addr, b.addr)))

	for _, lb := range []netip.Addr{lb1, lb2} {
		seen := map[string]int{}
		for range 4 {
			seen[whoAnswers(t, netip.AddrPortFrom(lb, servicePortNumber), netip.Addr{})]++
		}
		if seen["a"] != 2 || seen["b"] != 2 {
			t.Errorf("%s: answers %v, want a and b in turn", lb, seen)
		}
	}

	local := *svc
	local.ExternalLocal = true
	eps := ready(a.addr, b.addr)
	eps[0].NodeName, eps[1].NodeName, eps[1].IsLocal = "other", "this", true
	apply(t, p, oneService(&local, eps))
	for range 3 {
		if got := whoAnswers(t, netip.AddrPortFrom(lb1, servicePortNumber), netip.Addr{}); got != "b" {
			t.Fatalf("Local policy: the load-balancer address answered by %s, want the local b", got)
		}
	}

	one := *svc
	one.LoadBalancerIPs = []netip.Addr{lb2}
	apply(t, p, oneService(&one, ready(a.addr)))
	assertRefused(t, netip.AddrPortFrom(lb1, servicePortNumber))
	for _, addr := range []netip.AddrPort{netip.AddrPortFrom(lb2, servicePortNumber), netip.AddrPortFrom(svc.ClusterIP, servicePortNumber)} {
		if got := whoAnswers(t, addr, netip.Addr{}); got != "a" {
			t.Errorf("%s answered by %s, want a", addr, got)
		}
	}
}
