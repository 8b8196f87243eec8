package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ServicePortMap is every service port the proxy handles, by name: State.Services.
type ServicePortMap map[ServicePortName]*ServicePort

// Problem is an input the proxy cannot serve as asked (in whole or in part). The rest keeps
// working; the proxy logs it and counts it by Reason.
type Problem struct {
	// Subject names what the problem is about: a Service ("ns/name"), an EndpointSlice
	// ("ns/name"), or a service port (ServicePortName.String()).
	Subject string
	// Reason is short and stable, a metric label: "ip-family", "invalid-address", ...
	Reason string
	Err    error
}

func (p Problem) String() string { return fmt.Sprintf("%s: %s: %v", p.Subject, p.Reason, p.Err) }

// ServiceChangeTracker accumulates Service changes between syncs. It keeps, per Service, the
// service ports last applied and the ones to apply next; a change that brings a Service back
// to what was applied vanishes. It does no I/O; it is safe for concurrent use.
type ServiceChangeTracker struct {
	family corev1.IPFamily
	// OnProblem, if set, is called (synchronously, from Update) when a Service cannot be
	// served as asked, once per change of that verdict.
	OnProblem func(Problem)

	mu      sync.Mutex
	applied map[types.NamespacedName]ServicePortMap
	pending map[types.NamespacedName]ServicePortMap // nil map: the Service has no ports now
}

// NewServiceChangeTracker makes a tracker for a proxy of one IP family.
func NewServiceChangeTracker(family corev1.IPFamily) *ServiceChangeTracker {
	return &ServiceChangeTracker{
		family:  family,
		applied: map[types.NamespacedName]ServicePortMap{},
		pending: map[types.NamespacedName]ServicePortMap{},
	}
}

// Update records that a Service changed from previous to current (nil previous: created; nil
// current: deleted) and reports whether any change is pending now.
func (t *ServiceChangeTracker) Update(previous, current *corev1.Service) bool {
	svc := current
	if svc == nil {
		svc = previous
	}
	if svc == nil {
		return t.Pending() > 0
	}
	nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	ports, problem := ServicePortsOf(current, t.family)
	if problem != nil && t.OnProblem != nil {
		if _, before := ServicePortsOf(previous, t.family); before == nil || before.Err.Error() != problem.Err.Error() {
			t.OnProblem(*problem)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if servicePortMapsEqual(ports, t.applied[nn]) {
		delete(t.pending, nn)
	} else {
		t.pending[nn] = ports
	}
	return len(t.pending) > 0
}

// Pending is the number of Services with changes not applied yet.
func (t *ServiceChangeTracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// Apply brings m (the map earlier Applies have brought up to date; empty at first) to the
// current state and returns the service ports that were added, removed or changed.
func (t *ServiceChangeTracker) Apply(m ServicePortMap) map[ServicePortName]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := map[ServicePortName]bool{}
	for nn, cur := range t.pending {
		prev := t.applied[nn]
		for name := range prev {
			if _, ok := cur[name]; !ok {
				delete(m, name)
				changed[name] = true
			}
		}
		for name, sp := range cur {
			if old, ok := prev[name]; !ok || !old.Equal(sp) {
				changed[name] = true
			}
			m[name] = sp
		}
		if len(cur) == 0 {
			delete(t.applied, nn)
		} else {
			t.applied[nn] = cur
		}
	}
	clear(t.pending)
	return changed
}

// Equal reports whether a and b are the same service port.
func (s *ServicePort) Equal(o *ServicePort) bool {
	return s.Name == o.Name && s.ClusterIP == o.ClusterIP && s.Port == o.Port && s.Protocol == o.Protocol &&
		s.NodePort == o.NodePort && slices.Equal(s.ExternalIPs, o.ExternalIPs) &&
		slices.Equal(s.LoadBalancerIPs, o.LoadBalancerIPs) && s.AffinityTimeout == o.AffinityTimeout &&
		s.InternalLocal == o.InternalLocal && s.ExternalLocal == o.ExternalLocal &&
		s.HealthCheckNodePort == o.HealthCheckNodePort
}

func servicePortMapsEqual(a, b ServicePortMap) bool {
	if len(a) != len(b) {
		return false
	}
	for name, sp := range a {
		o, ok := b[name]
		if !ok || !sp.Equal(o) {
			return false
		}
	}
	return true
}

// DefaultAffinityTimeout is sessionAffinity ClientIP's timeout when the Service gives none.
const DefaultAffinityTimeout = time.Duration(corev1.DefaultClientIPServiceAffinitySeconds) * time.Second

// ServicePortsOf converts svc into the service ports a proxy of family serves: none for a nil,
// headless or ExternalName Service or one without a ClusterIP of that family. The problem, when
// not nil, says what of svc is not served and why (the ports returned are still right).
func ServicePortsOf(svc *corev1.Service, family corev1.IPFamily) (ServicePortMap, *Problem) {
	if svc == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, nil
	}
	sp := &svc.Spec
	subject := svc.Namespace + "/" + svc.Name
	problem := func(reason string, format string, args ...any) *Problem {
		return &Problem{Subject: subject, Reason: reason, Err: fmt.Errorf(format, args...)}
	}
	ips := sp.ClusterIPs
	if len(ips) == 0 && sp.ClusterIP != "" {
		ips = []string{sp.ClusterIP}
	}
	if len(ips) == 0 || ips[0] == corev1.ClusterIPNone {
		return nil, nil
	}
	var clusterIP netip.Addr
	var others []string
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, problem("invalid-address", "invalid ClusterIP %q", s)
		}
		if familyOf(ip) == family && !clusterIP.IsValid() {
			clusterIP = ip.Unmap()
		} else {
			others = append(others, s)
		}
	}
	var p *Problem
	if !clusterIP.IsValid() {
		return nil, problem("ip-family", "no %s ClusterIP (has %v); this proxy serves %s only", family, ips, family)
	} else if len(others) > 0 {
		p = problem("ip-family", "ClusterIPs %v not served; this proxy serves %s only", others, family)
	}

	var externalIPs, lbIPs []netip.Addr
	for _, s := range sp.ExternalIPs {
		if ip, err := netip.ParseAddr(s); err == nil && familyOf(ip) == family {
			externalIPs = append(externalIPs, ip.Unmap())
		}
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" || (ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy) {
			continue
		}
		if ip, err := netip.ParseAddr(ing.IP); err == nil && familyOf(ip) == family {
			lbIPs = append(lbIPs, ip.Unmap())
		}
	}
	var affinity time.Duration
	if sp.SessionAffinity == corev1.ServiceAffinityClientIP {
		affinity = DefaultAffinityTimeout
		if c := sp.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			affinity = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	externallyAccessible := sp.Type == corev1.ServiceTypeLoadBalancer || sp.Type == corev1.ServiceTypeNodePort ||
		len(sp.ExternalIPs) > 0
	externalLocal := externallyAccessible && sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	internalLocal := sp.InternalTrafficPolicy != nil && *sp.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	healthCheckNodePort := 0
	if sp.Type == corev1.ServiceTypeLoadBalancer && externalLocal {
		healthCheckNodePort = int(sp.HealthCheckNodePort)
	}

	nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	out := make(ServicePortMap, len(sp.Ports))
	for i := range sp.Ports {
		port := &sp.Ports[i]
		protocol := port.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		name := ServicePortName{NamespacedName: nn, Port: port.Name, Protocol: protocol}
		out[name] = &ServicePort{
			Name:                name,
			ClusterIP:           clusterIP,
			Port:                int(port.Port),
			Protocol:            protocol,
			NodePort:            int(port.NodePort),
			ExternalIPs:         externalIPs,
			LoadBalancerIPs:     lbIPs,
			AffinityTimeout:     affinity,
			InternalLocal:       internalLocal,
			ExternalLocal:       externalLocal,
			HealthCheckNodePort: healthCheckNodePort,
		}
	}
	return out, p
}

// familyOf is ip's family (an IPv4-mapped IPv6 address counts as IPv4).
func familyOf(ip netip.Addr) corev1.IPFamily {
	if ip.Unmap().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}
