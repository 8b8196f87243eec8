package endpoints

import (
	"net"
	"strings"

	"github.com/kplane/kplane/controller"
	corev1 "k8s.io/api/core/v1"
)

// includePod reports whether pod may appear in a service's Endpoints at all. Pods that have
// finished (Succeeded or Failed) never do, nor pods without any IP yet. A pod that is being
// deleted still serves its open connections, so it is listed only when the service asked for
// not-ready addresses too (publishNotReadyAddresses).
func includePod(pod *corev1.Pod, publishNotReady bool) bool {
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return false
	}
	if pod.Status.PodIP == "" && len(pod.Status.PodIPs) == 0 {
		return false
	}
	return publishNotReady || pod.DeletionTimestamp == nil
}

// podReady reports Ready=True. The phase does not matter: a Pending or Unknown pod that says
// it is ready is believed.
func podReady(pod *corev1.Pod) bool {
	c := controller.PodReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// wantsIPv6 decides which address family of the pod the service lists. The apiserver fills
// spec.ipFamilies, but an object can reach a controller without it (an older server, a
// hand-made cache entry); then the family is guessed from the service's ClusterIP, and for a
// headless service or one without an IP from the pod's primary IP. An unknown family name
// counts as IPv4, as in Kubernetes.
func wantsIPv6(svc *corev1.Service, pod *corev1.Pod) bool {
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies[0] == corev1.IPv6Protocol
	}
	if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return isIPv6(parseIPSloppy(svc.Spec.ClusterIP))
	}
	return isIPv6(parseIPSloppy(pod.Status.PodIP))
}

func isIPv6(ip net.IP) bool { return ip != nil && ip.To4() == nil }

// parseIPSloppy parses an IP the way Kubernetes' legacy fields are read: besides what the
// standard library accepts, IPv4 parts with leading zeros ("010.1.2.03") are decimal, and
// IPv6 groups may carry extra leading zeros. Older versions of Go accepted those, so objects
// written back then may still hold them. It returns nil for anything else.
func parseIPSloppy(s string) net.IP {
	if ip := net.ParseIP(s); ip != nil {
		return ip
	}
	if s == "" || strings.ContainsAny(s, "%/") {
		return nil
	}
	var b strings.Builder
	head, tail := "", s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		head, tail = s[:i+1], s[i+1:]
	}
	for i, group := range strings.Split(head, ":") {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(trimLeadingZeros(group))
	}
	if strings.Contains(tail, ".") {
		for i, part := range strings.Split(tail, ".") {
			if i > 0 {
				b.WriteByte('.')
			}
			if strings.Trim(part, "0123456789") != "" {
				return nil // not a decimal number: let it fail rather than guess
			}
			b.WriteString(trimLeadingZeros(part))
		}
	} else {
		b.WriteString(trimLeadingZeros(tail))
	}
	return net.ParseIP(b.String())
}

// trimLeadingZeros drops leading zeros but keeps one digit: "007" → "7", "000" → "0".
func trimLeadingZeros(s string) string {
	t := strings.TrimLeft(s, "0")
	if t == "" && s != "" {
		return "0"
	}
	return t
}

// podIP picks the pod's address of the wanted family from status.podIPs, printed in canonical
// form ("01.2.3.4" → "1.2.3.4", IPv6 compressed and lower case). status.podIP alone does not
// count, as in Kubernetes, whose API server fills podIPs from podIP on every write, so that
// only an object that bypassed it lacks them. Entries that do not parse are passed over
// (Kubernetes would list them as "<nil>").
func podIP(pod *corev1.Pod, ipv6 bool) (string, bool) {
	for _, p := range pod.Status.PodIPs {
		ip := parseIPSloppy(p.IP)
		if ip != nil && isIPv6(ip) == ipv6 {
			return ip.String(), true
		}
	}
	return "", false
}

// podAddress is the address under which pod appears in svc's Endpoints, or false when the pod
// has no IP of the service's family.
//
// The target reference carries no resourceVersion: the pod's resourceVersion changes with
// every status heartbeat and would make every such change an Endpoints write. The node name
// is set whenever the pod is bound to a node; Kubernetes also writes an empty one for an
// unbound pod, which Endpoints validation rejects, so here it is left out instead.
func podAddress(svc *corev1.Service, pod *corev1.Pod) (corev1.EndpointAddress, bool) {
	ip, ok := podIP(pod, wantsIPv6(svc, pod))
	if !ok {
		return corev1.EndpointAddress{}, false
	}
	a := corev1.EndpointAddress{
		IP: ip,
		TargetRef: &corev1.ObjectReference{
			Kind:      "Pod",
			Namespace: pod.Namespace,
			Name:      pod.Name,
			UID:       pod.UID,
		},
	}
	if pod.Spec.NodeName != "" {
		nodeName := pod.Spec.NodeName
		a.NodeName = &nodeName
	}
	if usesServiceHostname(pod, svc) {
		a.Hostname = pod.Spec.Hostname
	}
	return a, true
}

// usesServiceHostname: a pod gets a DNS name under a service (hostname.service.ns.svc) when it
// names a hostname and that service, in its own namespace, as its subdomain.
func usesServiceHostname(pod *corev1.Pod, svc *corev1.Service) bool {
	return pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace
}
