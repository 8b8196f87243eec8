package userspace

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kplane/kplane/proxy"
)

// servicePort is the proxier's live state for one service port: its spec and the endpoint
// choice for its two kinds of traffic. Listeners hold a pointer to it, so an Apply that changes
// only endpoints or policies takes effect for the next connection without touching sockets.
type servicePort struct {
	name proxy.ServicePortName

	mu   sync.Mutex
	spec proxy.ServicePort
	// cluster serves traffic under the Cluster policy, local traffic under a Local policy
	// (proxy.CategorizeEndpoints' two sets); each has its own round robin and affinity.
	cluster, local balancer

	// generation grows whenever an endpoint set or a traffic policy changes, so UDP sessions can tell with one
	// atomic load that the endpoint they were given is still current.
	generation atomic.Uint64
}

func newServicePort(name proxy.ServicePortName) *servicePort {
	return &servicePort{name: name}
}

// update takes a new spec and endpoint list (copying both: the State's maps are reused by the
// caller after Apply).
func (sp *servicePort) update(spec *proxy.ServicePort, endpoints []proxy.Endpoint, nodeName, zone string) {
	cluster, local, _, _ := proxy.CategorizeEndpoints(endpoints, spec, nodeName, zone)
	clusterAddrs, localAddrs := addrsOf(cluster), addrsOf(local)

	sp.mu.Lock()
	defer sp.mu.Unlock()
	policyChanged := sp.spec.InternalLocal != spec.InternalLocal || sp.spec.ExternalLocal != spec.ExternalLocal
	sp.spec = *spec
	sp.spec.ExternalIPs = slices.Clone(spec.ExternalIPs)
	sp.spec.LoadBalancerIPs = slices.Clone(spec.LoadBalancerIPs)
	sp.cluster.setAffinityTimeout(spec.AffinityTimeout)
	sp.local.setAffinityTimeout(spec.AffinityTimeout)
	changedCluster := sp.cluster.setEndpoints(clusterAddrs)
	changedLocal := sp.local.setEndpoints(localAddrs)
	if changedCluster || changedLocal || policyChanged {
		sp.generation.Add(1)
	}
}

// specCopy returns the current spec (its slices are never modified in place, so sharing
// them is safe).
func (sp *servicePort) specCopy() proxy.ServicePort {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.spec
}

// balancerFor returns the endpoint set that traffic of the given kind uses. Callers hold mu.
func (sp *servicePort) balancerFor(external bool) *balancer {
	if (external && sp.spec.ExternalLocal) || (!external && sp.spec.InternalLocal) {
		return &sp.local
	}
	return &sp.cluster
}

// candidates returns the endpoints a new connection from client should try, in order, at most
// max of them; none when the service port has no usable endpoint for this kind of traffic.
func (sp *servicePort) candidates(external bool, client netip.Addr, max int) []netip.AddrPort {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.balancerFor(external).candidates(client, time.Now(), max)
}

// connected records where client's connection went, for affinity.
func (sp *servicePort) connected(external bool, client netip.Addr, endpoint netip.AddrPort) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.balancerFor(external).connected(client, endpoint, time.Now())
}

// stillCurrent reports whether endpoint, chosen when the generation was gen, may still take
// traffic, and the generation this answer holds for.
func (sp *servicePort) stillCurrent(external bool, endpoint netip.AddrPort, gen uint64) (bool, uint64) {
	if now := sp.generation.Load(); now == gen {
		return true, gen
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return slices.Contains(sp.balancerFor(external).endpoints, endpoint), sp.generation.Load()
}

func addrsOf(endpoints []proxy.Endpoint) []netip.AddrPort {
	if len(endpoints) == 0 {
		return nil
	}
	out := make([]netip.AddrPort, len(endpoints))
	for i, ep := range endpoints {
		out[i] = ep.Addr
	}
	return out
}
