package endpointslice

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	utildump "k8s.io/utils/dump"
)

// endpointKey is an endpoint's identity: its addresses (in any order), hostname and the
// namespace/name of the object it points at. An existing endpoint with the same key as a desired
// one is the same endpoint, possibly in an older state (see sameEndpointState).
func endpointKey(ep *discoveryv1.Endpoint) string {
	addrs := slices.Clone(ep.Addresses)
	slices.Sort(addrs)
	var b strings.Builder
	for _, a := range addrs {
		b.WriteString(a)
		b.WriteByte(',')
	}
	b.WriteByte('|')
	if ep.Hostname != nil {
		b.WriteString(*ep.Hostname)
	}
	b.WriteByte('|')
	if ep.TargetRef != nil {
		b.WriteString(ep.TargetRef.Namespace)
		b.WriteByte('/')
		b.WriteString(ep.TargetRef.Name)
	}
	return b.String()
}

// sameEndpointState reports whether two endpoints of the same identity need no rewrite: node,
// zone, conditions and target are equal. Hints are not compared here; they are the hint step's
// business (hints.go).
func sameEndpointState(a, b *discoveryv1.Endpoint) bool {
	return equalPtr(a.NodeName, b.NodeName) &&
		equalPtr(a.Zone, b.Zone) &&
		equalPtr(a.Conditions.Ready, b.Conditions.Ready) &&
		equalPtr(a.Conditions.Serving, b.Conditions.Serving) &&
		equalPtr(a.Conditions.Terminating, b.Conditions.Terminating) &&
		sameTarget(a.TargetRef, b.TargetRef)
}

// sameTarget compares object references ignoring resourceVersion, which endpoints never carry
// but an older writer may have set.
func sameTarget(a, b *corev1.ObjectReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.ResourceVersion, y.ResourceVersion = "", ""
	return x == y
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// portKey identifies a set of ports, whatever their order; nil and empty are the same set.
func portKey(ports []discoveryv1.EndpointPort) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		port := "-"
		if p.Port != nil {
			port = strconv.Itoa(int(*p.Port))
		}
		parts[i] = quotePtr(p.Name) + " " + quotePtr(p.Protocol) + " " + port + " " + quotePtr(p.AppProtocol)
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

// quotePtr renders an optional string so that nil, "" and any value differ.
func quotePtr[S ~string](s *S) string {
	if s == nil {
		return "-"
	}
	return strconv.Quote(string(*s))
}

// inKubernetesOrder sorts ports, in place, into the order kube-controller-manager v1.36 writes
// a slice's ports in: ascending by the hex-encoded FNV-128a hash of each port's
// k8s.io/utils/dump.ForHash rendering. Readers treat the list as a set, so the order means
// nothing, but Kubernetes' order is deterministic and shows (kubectl's PORTS column, diffs
// between clusters), so slices written here list their ports the same way. It returns ports.
func inKubernetesOrder(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	if len(ports) < 2 {
		return ports
	}
	type hashed struct {
		hash string
		port discoveryv1.EndpointPort
	}
	hs := make([]hashed, len(ports))
	for i, p := range ports {
		h := fnv.New128a()
		fmt.Fprint(h, utildump.ForHash(p))
		hs[i] = hashed{hex.EncodeToString(h.Sum(nil)), p}
	}
	slices.SortStableFunc(hs, func(a, b hashed) int { return cmp.Compare(a.hash, b.hash) })
	for i := range hs {
		ports[i] = hs[i].port
	}
	return ports
}
