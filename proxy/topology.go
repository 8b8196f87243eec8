package proxy

import "slices"

// ExternallyAccessible: the service port takes traffic from outside the cluster (a NodePort,
// external or load-balancer IPs).
func (s *ServicePort) ExternallyAccessible() bool {
	return s.NodePort != 0 || len(s.ExternalIPs) > 0 || len(s.LoadBalancerIPs) > 0
}

// UsesClusterEndpoints: some traffic to the service port may go to any node's endpoints. An
// externally accessible port always does: with externalTrafficPolicy Local, traffic from pods
// and the node itself to its external addresses still goes to the whole cluster.
func (s *ServicePort) UsesClusterEndpoints() bool {
	return !s.InternalLocal || s.ExternallyAccessible()
}

// UsesLocalEndpoints: some traffic to the service port goes only to this node's endpoints.
func (s *ServicePort) UsesLocalEndpoints() bool {
	return s.InternalLocal || (s.ExternalLocal && s.ExternallyAccessible())
}

// CategorizeEndpoints chooses, as kube-proxy does, the endpoints traffic may go to:
//
//   - cluster: for traffic under the Cluster policy (ClusterIP traffic unless InternalLocal,
//     external traffic unless ExternalLocal): the ready endpoints, narrowed by topology hints
//     when every ready endpoint has hints and some name this node (PreferSameNode) or zone
//     (PreferSameZone); when none is ready, the serving and terminating ones, so that
//     connections keep working through a rollout. nil when no traffic uses the Cluster policy.
//   - local: for traffic under a Local policy: this node's ready endpoints, else its serving
//     and terminating ones; nil when the service has no Local policy.
//   - reachable: every endpoint either set may pick (for health checks, conntrack cleanup).
//   - hasAny: the service has some usable endpoint anywhere; when false, connections are
//     rejected rather than dropped.
func CategorizeEndpoints(endpoints []Endpoint, svc *ServicePort, nodeName, zone string) (cluster, local, reachable []Endpoint, hasAny bool) {
	if len(endpoints) == 0 {
		return nil, nil, nil, false
	}
	servingTerminating := func(ep Endpoint) bool { return ep.Serving && ep.Terminating }
	fellBack := false
	topology := false
	if svc.UsesClusterEndpoints() {
		onTopology := hintFilter(endpoints, nodeName, zone)
		topology = onTopology != nil
		cluster = filter(endpoints, func(ep Endpoint) bool { return ep.Ready && (onTopology == nil || onTopology(ep)) })
		if len(cluster) == 0 {
			cluster = filter(endpoints, servingTerminating)
		}
		hasAny = len(cluster) > 0
	}
	if !svc.UsesLocalEndpoints() {
		return cluster, nil, cluster, hasAny
	}
	if slices.ContainsFunc(endpoints, func(ep Endpoint) bool { return ep.Ready || servingTerminating(ep) }) {
		hasAny = true
	}
	local = filter(endpoints, func(ep Endpoint) bool { return ep.IsLocal && ep.Ready })
	if len(local) == 0 {
		local = filter(endpoints, func(ep Endpoint) bool { return ep.IsLocal && servingTerminating(ep) })
		fellBack = len(local) > 0
	}
	if !svc.UsesClusterEndpoints() {
		return nil, local, local, hasAny
	}
	if !topology && !fellBack {
		// Every local endpoint is a ready endpoint, so it is in cluster already.
		return cluster, local, cluster, hasAny
	}
	reachable = slices.Clone(cluster)
	for _, ep := range local {
		if !slices.ContainsFunc(reachable, func(c Endpoint) bool { return c.Addr == ep.Addr }) {
			reachable = append(reachable, ep)
		}
	}
	return cluster, local, reachable, hasAny
}

// hintFilter returns the test topology hints impose, or nil when they do not apply: they apply
// only when every ready endpoint carries hints of a kind and one of them names this node
// (node hints, preferred) or this zone.
func hintFilter(endpoints []Endpoint, nodeName, zone string) func(Endpoint) bool {
	anyReady, allNode, forNode, allZone, forZone := false, true, false, true, false
	for _, ep := range endpoints {
		if !ep.Ready {
			continue
		}
		anyReady = true
		if len(ep.NodeHints()) == 0 {
			allNode = false
		} else if slices.Contains(ep.NodeHints(), nodeName) {
			forNode = true
		}
		if len(ep.ZoneHints()) == 0 {
			allZone = false
		} else if slices.Contains(ep.ZoneHints(), zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return nil
	case allNode && forNode:
		return func(ep Endpoint) bool { return slices.Contains(ep.NodeHints(), nodeName) }
	case allZone && forZone:
		return func(ep Endpoint) bool { return slices.Contains(ep.ZoneHints(), zone) }
	}
	return nil
}

func filter(endpoints []Endpoint, keep func(Endpoint) bool) []Endpoint {
	var out []Endpoint
	for _, ep := range endpoints {
		if keep(ep) {
			out = append(out, ep)
		}
	}
	return out
}
