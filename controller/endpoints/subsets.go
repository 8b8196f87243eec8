package endpoints

import (
	"fmt"

	"github.com/kplane/kplane/controller"
	corev1 "k8s.io/api/core/v1"
)

// desiredSubsets is what a service's Endpoints should list, before truncation.
type desiredSubsets struct {
	// Subsets in canonical form (repackSubsets); an empty, non-nil list when no pod counts.
	Subsets []corev1.EndpointSubset
	// Problems says, one sentence each, why a pod or one of its ports was left out for a
	// reason its owner may want to fix (no IP of the service's family, a named port that
	// does not resolve). Pods left out by design (finished, deleted, no IP yet) are not
	// problems. The sentences are stable from sync to sync, so that a caller can log each
	// one once.
	Problems []string
}

// computeSubsets computes the subsets of svc's Endpoints from the pods its selector matched.
//
// Each included pod contributes one single-address subset per service port its targetPort
// resolves on, in addresses when the pod is ready (or the service publishes not-ready
// addresses), else in notReadyAddresses; repacking then merges them. A port that does not
// resolve on a pod leaves out only that port for that pod. A service without ports lists
// addresses only if it is headless (clusterIP None): it exists for DNS, where an address
// without a port still means something; a service with a virtual IP and no ports has nothing
// to route, so it gets no addresses at all.
func computeSubsets(svc *corev1.Service, pods []*corev1.Pod) desiredSubsets {
	var out desiredSubsets
	var pieces []corev1.EndpointSubset
	publishNotReady := svc.Spec.PublishNotReadyAddresses
	for _, pod := range pods {
		if !includePod(pod, publishNotReady) {
			continue
		}
		addr, ok := podAddress(svc, pod)
		if !ok {
			out.Problems = append(out.Problems, fmt.Sprintf("pod %s has no %s address in status.podIPs", pod.Name, familyName(wantsIPv6(svc, pod))))
			continue
		}
		ready := publishNotReady || podReady(pod)
		if len(svc.Spec.Ports) == 0 {
			if svc.Spec.ClusterIP == corev1.ClusterIPNone {
				pieces = append(pieces, singleAddressSubset(addr, ready, nil))
			}
			continue
		}
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			port, ok := controller.FindPort(pod, sp)
			if !ok {
				out.Problems = append(out.Problems, fmt.Sprintf("pod %s has no %s container port named %q for service port %q", pod.Name, sp.Protocol, sp.TargetPort.StrVal, sp.Name))
				continue
			}
			if port < 1 || port > 65535 {
				// Kubernetes' packing silently drops such a port; an Endpoints object holding
				// one would fail validation on every write.
				out.Problems = append(out.Problems, fmt.Sprintf("pod %s: service port %q resolves to invalid port number %d", pod.Name, sp.Name, port))
				continue
			}
			ep := corev1.EndpointPort{Name: sp.Name, Port: port, Protocol: sp.Protocol, AppProtocol: sp.AppProtocol}
			pieces = append(pieces, singleAddressSubset(addr, ready, &ep))
		}
	}
	out.Subsets = repackSubsets(pieces)
	return out
}

func singleAddressSubset(addr corev1.EndpointAddress, ready bool, port *corev1.EndpointPort) corev1.EndpointSubset {
	var s corev1.EndpointSubset
	if ready {
		s.Addresses = []corev1.EndpointAddress{addr}
	} else {
		s.NotReadyAddresses = []corev1.EndpointAddress{addr}
	}
	if port != nil {
		s.Ports = []corev1.EndpointPort{*port}
	}
	return s
}

func familyName(ipv6 bool) string {
	if ipv6 {
		return "IPv6"
	}
	return "IPv4"
}
