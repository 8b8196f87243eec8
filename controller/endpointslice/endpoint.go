package endpointslice

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/kplane/kplane/controller"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// addressTypesFor returns the address types a Service gets slices for, IPv4 first. The Service's
// ipFamilies decide; a Service without them (written by an apiserver older than dual-stack) gets
// its ClusterIP's family, and a headless one both, so that no traffic is lost until the apiserver
// fills the field in.
func addressTypesFor(svc *corev1.Service) []discoveryv1.AddressType {
	var v4, v6 bool
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			v4 = true
		case corev1.IPv6Protocol:
			v6 = true
		}
	}
	if !v4 && !v6 {
		if hasClusterIP(svc) {
			ip := net.ParseIP(svc.Spec.ClusterIP)
			v6 = ip != nil && ip.To4() == nil
			v4 = !v6
		} else {
			v4, v6 = true, true
		}
	}
	var types []discoveryv1.AddressType
	if v4 {
		types = append(types, discoveryv1.AddressTypeIPv4)
	}
	if v6 {
		types = append(types, discoveryv1.AddressTypeIPv6)
	}
	return types
}

// hasClusterIP reports whether the Service has a virtual IP (is neither headless nor without one).
func hasClusterIP(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

// includePod reports whether a pod is an endpoint candidate at all: finished pods never are,
// nor are pods that have no IP yet. Terminating pods are, so that proxies can drain them.
func includePod(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false
	}
	return pod.Status.PodIP != "" || len(pod.Status.PodIPs) > 0
}

// podReady reports whether the pod's Ready condition is True.
func podReady(pod *corev1.Pod) bool {
	c := controller.PodReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// podEndpoint builds the Endpoint a pod contributes to slices of address type at. node may be
// nil (unknown), which leaves the zone out. The addresses may come out empty: the pod has no IP
// of that family and contributes nothing.
func podEndpoint(pod *corev1.Pod, node *corev1.Node, svc *corev1.Service, at discoveryv1.AddressType, probs problems) discoveryv1.Endpoint {
	serving := podReady(pod)
	terminating := pod.DeletionTimestamp != nil
	// A terminating pod is never "ready" unless the Service publishes every address it has:
	// that is what clients reading only the ready condition have always been told.
	ready := svc.Spec.PublishNotReadyAddresses || (serving && !terminating)
	ep := discoveryv1.Endpoint{
		Addresses: podAddresses(pod, at, probs),
		Conditions: discoveryv1.EndpointConditions{
			Ready:       new(ready),
			Serving:     new(serving),
			Terminating: new(terminating),
		},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	if pod.Spec.NodeName != "" {
		ep.NodeName = new(pod.Spec.NodeName)
	}
	if node != nil {
		if zone := node.Labels[corev1.LabelTopologyZone]; zone != "" {
			ep.Zone = new(zone)
		}
	}
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace {
		ep.Hostname = new(pod.Spec.Hostname)
	}
	return ep
}

// podAddresses returns every IP in the pod's status.podIPs of address type at, in canonical
// form (leading zeros dropped, IPv6 compressed). status.podIP alone is not enough: it is only
// ever set together with podIPs.
func podAddresses(pod *corev1.Pod, at discoveryv1.AddressType, probs problems) []string {
	var addrs []string
	for _, pip := range pod.Status.PodIPs {
		ip := parseIPSloppy(pip.IP)
		if ip == nil {
			// Kubernetes would write the unparsable string as "<nil>" and have every write of the
			// slice refused; leaving the address out keeps the rest of the Service working.
			probs.add("ip/"+pod.Namespace+"/"+pod.Name+"/"+pip.IP,
				fmt.Sprintf("pod %s/%s has an invalid IP %q in status.podIPs; leaving it out", pod.Namespace, pod.Name, pip.IP))
			continue
		}
		if (ip.To4() != nil) == (at == discoveryv1.AddressTypeIPv4) {
			addrs = append(addrs, ip.String())
		}
	}
	return addrs
}

// parseIPSloppy parses an IP address like net.ParseIP, but also accepts IPv4 octets with leading
// zeros ("010.0.0.1", read as decimal), which older Go versions accepted and so old objects may
// hold.
func parseIPSloppy(s string) net.IP {
	if ip := net.ParseIP(s); ip != nil {
		return ip
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return nil
	}
	var b [4]byte
	for i, p := range parts {
		if p == "" || len(p) > 3 || strings.TrimLeft(p, "0123456789") != "" {
			return nil
		}
		n, err := strconv.Atoi(p)
		if err != nil || n > 255 {
			return nil
		}
		b[i] = byte(n)
	}
	return net.IPv4(b[0], b[1], b[2], b[3])
}

// endpointPorts resolves the Service's ports against one pod. A port whose named targetPort the
// pod does not declare is left out for that pod (so pods resolving differently end up in
// different slices). A headless Service without ports gives endpoints without ports.
func endpointPorts(svc *corev1.Service, pod *corev1.Pod, probs problems) []discoveryv1.EndpointPort {
	ports := []discoveryv1.EndpointPort{}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		port, ok := controller.FindPort(pod, sp)
		if !ok {
			probs.add("port/"+svc.Namespace+"/"+svc.Name+"/"+sp.Name,
				fmt.Sprintf("service %s/%s port %q: targetPort %s (%s) is not a container port of pod %s (and maybe others); the port is left out for such pods",
					svc.Namespace, svc.Name, sp.Name, sp.TargetPort.String(), sp.Protocol, pod.Name))
			continue
		}
		ep := discoveryv1.EndpointPort{Name: new(sp.Name), Port: new(port), Protocol: new(sp.Protocol)}
		if sp.AppProtocol != nil {
			ep.AppProtocol = new(*sp.AppProtocol)
		}
		ports = append(ports, ep)
	}
	return ports
}

// portGroup is the desired state of one set of ports of one address type: every endpoint that
// serves exactly these ports, by identity key.
type portGroup struct {
	key       string
	ports     []discoveryv1.EndpointPort // in Kubernetes' order (inKubernetesOrder)
	endpoints map[string]discoveryv1.Endpoint
}

// missingNode records a pod left out because the Node it runs on is not known.
type missingNode struct{ pod, node string }

// nodeLookup returns a Node by name, or false when it is not known.
type nodeLookup func(name string) (*corev1.Node, bool)

// desiredGroups computes the desired endpoints of address type at, grouped by port set. A group
// exists as soon as a candidate pod resolves to its ports, even when no endpoint ends up in it
// (the pod has no IP of that family, or its Node is missing): such a group still keeps existing
// empty slices of its ports, as Kubernetes does.
//
// A pod whose Node is missing is left out, and reported, unless the Service publishes not-ready
// addresses: then the user asked for every address and gets it, without a zone.
func desiredGroups(svc *corev1.Service, pods []*corev1.Pod, nodes nodeLookup, at discoveryv1.AddressType, probs problems) (map[string]*portGroup, []missingNode) {
	groups := map[string]*portGroup{}
	var missing []missingNode
	for _, pod := range pods {
		if !includePod(pod) {
			continue
		}
		ports := endpointPorts(svc, pod, probs)
		key := portKey(ports)
		g := groups[key]
		if g == nil {
			g = &portGroup{key: key, ports: inKubernetesOrder(ports), endpoints: map[string]discoveryv1.Endpoint{}}
			groups[key] = g
		}
		node, ok := nodes(pod.Spec.NodeName)
		if !ok {
			node = nil
			if !svc.Spec.PublishNotReadyAddresses {
				missing = append(missing, missingNode{pod: pod.Name, node: pod.Spec.NodeName})
				continue
			}
		}
		ep := podEndpoint(pod, node, svc, at, probs)
		if len(ep.Addresses) > 0 {
			g.endpoints[endpointKey(&ep)] = ep
		}
	}
	return groups, missing
}

// problems collects the bad input one reconciliation met, by cause, so that the controller can
// log each cause once however often it is met. A nil problems records nothing.
type problems map[string]string

func (p problems) add(cause, msg string) {
	if p == nil {
		return
	}
	if _, ok := p[cause]; !ok {
		p[cause] = msg
	}
}
