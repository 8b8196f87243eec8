package nftables

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proxy"
)

// A plan is everything one service port puts into the table: its own chains and affinity
// sets, the shared chains it uses, and its elements in the shared maps and sets. Plans are
// pure data, computed from the State alone, so that a sync is a diff between the previous
// plan and the next one.
type plan struct {
	chains []chain
	sets   []affinitySet
	// shared chains are named after what they do (pick-tcp-3: DNAT to one of 3 endpoints
	// listed for the packet's destination) and used by every service port needing them.
	shared []chain
	elems  []elem
	status status
	// udp is set for UDP service ports: what the conntrack cleanup needs.
	udp *udpFrontends
}

type chain struct {
	name  string
	rules []string
}

type affinitySet struct {
	name    string
	timeout time.Duration
}

// elem is one element of a shared map or set; value is "" in sets.
type elem struct {
	container string
	key       string // key parts joined by " . "
	value     string
}

// status is what the plan tells about the service port, for logs and metrics.
type status struct {
	// skipped says why the service port is not programmed at all ("" when it is).
	skipped string
	// badEndpoints counts endpoints left out (IPv6, invalid port).
	badEndpoints int
	// noEndpoints: rejected, no usable endpoint anywhere. noLocalInternal/External: a
	// Local policy with no endpoint on this node (dropped).
	noEndpoints, noLocalInternal, noLocalExternal bool
}

type udpFrontends struct {
	vips     []netip.AddrPort
	nodePort uint16
	serving  map[netip.AddrPort]bool
}

// Reasons a service port is skipped.
const (
	skipNoClusterIP = "no-cluster-ip"
	skipIPv6        = "ipv6"
	skipProtocol    = "protocol"
	skipPort        = "port"
)

// Names of per-service chains and sets; they all hold a "/", which no fixed or shared object
// name has.
const (
	clusterChainPrefix  = "svc-"
	localChainPrefix    = "local-"
	externalChainPrefix = "ext-"
	endpointChainPrefix = "ep-"
	affinitySetPrefix   = "aff-"
)

// serviceBase names a service port's objects: "namespace/name/protocol/port". Names in
// nftables may hold letters, digits and "/._-"; anything else (no valid Kubernetes name has
// it) is replaced by a hash.
func serviceBase(n proxy.ServicePortName) string {
	base := n.Namespace + "/" + n.Name + "/" + strings.ToLower(string(n.Protocol)) + "/" + n.Port
	for _, r := range base {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '/') {
			h := fnv.New64a()
			h.Write([]byte(base))
			return fmt.Sprintf("x%016x/", h.Sum64())
		}
	}
	return base
}

func endpointBase(svcBase string, ep netip.AddrPort) string {
	return svcBase + "__" + ep.Addr().String() + "/" + strconv.Itoa(int(ep.Port()))
}

// planner computes plans; it holds what is fixed for the proxier's lifetime or one State.
type planner struct {
	masqRule    string // marks a packet for masquerading
	clusterCIDR netip.Prefix
	nodeName    string
	zone        string
	noSCTP      bool // the kernel cannot NAT SCTP
}

func protocolName(p corev1.Protocol) (string, bool) {
	switch p {
	case corev1.ProtocolTCP:
		return "tcp", true
	case corev1.ProtocolUDP:
		return "udp", true
	case corev1.ProtocolSCTP:
		return "sctp", true
	}
	return "", false
}

func validPort(p int) bool { return p > 0 && p < 65536 }

// plan computes the plan of one service port.
//
// Most service ports need no chain of their own: their frontends (ClusterIP, external IPs,
// NodePort) jump to a shared chain that DNATs to entry (destination, port, random index) of
// an endpoints map, where the service port lists its endpoints; external traffic first goes
// through a shared chain marking it for masquerading. Only ClientIP affinity and
// externalTrafficPolicy Local (whose traffic from this node and its pods takes other
// endpoints than external traffic to the same frontend) get chains of their own.
func (pl *planner) plan(name proxy.ServicePortName, svc *proxy.ServicePort, all []proxy.Endpoint) *plan {
	out := &plan{}
	clusterIP := svc.ClusterIP.Unmap()
	proto, protoOK := protocolName(svc.Protocol)
	switch {
	case !clusterIP.IsValid():
		out.status.skipped = skipNoClusterIP
	case !clusterIP.Is4():
		out.status.skipped = skipIPv6
	case !protoOK || proto == "sctp" && pl.noSCTP:
		out.status.skipped = skipProtocol
	case !validPort(svc.Port) || svc.NodePort != 0 && !validPort(svc.NodePort):
		out.status.skipped = skipPort
	}
	if out.status.skipped != "" {
		return out
	}

	// Keep the endpoints this proxier can reach: IPv4 addresses and real ports.
	endpoints := make([]proxy.Endpoint, 0, len(all))
	for _, ep := range all {
		addr := ep.Addr.Addr().Unmap()
		if !addr.Is4() || !validPort(int(ep.Addr.Port())) {
			out.status.badEndpoints++
			continue
		}
		ep.Addr = netip.AddrPortFrom(addr, ep.Addr.Port())
		endpoints = append(endpoints, ep)
	}
	sv := &svcView{name: name, svc: svc, proto: proto, port: strconv.Itoa(svc.Port), clusterIP: clusterIP, out: out}
	for _, ip := range slices.Concat(svc.ExternalIPs, svc.LoadBalancerIPs) {
		if ip = ip.Unmap(); ip.Is4() && !slices.Contains(sv.externalIPs, ip) {
			sv.externalIPs = append(sv.externalIPs, ip)
		}
	}
	sv.external = svc.NodePort != 0 || len(sv.externalIPs) > 0
	sv.cluster, sv.local, sv.reachable, sv.hasAny = proxy.CategorizeEndpoints(endpoints, svc, pl.nodeName, pl.zone)
	// Without external access, externalTrafficPolicy does not matter: only the set the
	// internal policy picks is used.
	if !sv.external && svc.InternalLocal {
		sv.cluster, sv.reachable = nil, sv.local
	}
	if !sv.external && !svc.InternalLocal {
		sv.local, sv.reachable = nil, sv.cluster
	}

	// Where traffic goes: the internal (ClusterIP) and external sets of endpoints.
	sv.internal, sv.externalSet = sv.cluster, sv.cluster
	if svc.InternalLocal {
		sv.internal = sv.local
	}
	if svc.ExternalLocal {
		sv.externalSet = sv.local
	}
	out.status.noEndpoints = !sv.hasAny
	out.status.noLocalInternal = sv.hasAny && svc.InternalLocal && len(sv.local) == 0
	out.status.noLocalExternal = sv.hasAny && sv.external && svc.ExternalLocal && len(sv.local) == 0

	if svc.AffinityTimeout > 0 || svc.ExternalLocal && sv.external {
		pl.ownChains(sv)
	} else {
		pl.sharedChains(sv)
		slices.SortFunc(out.shared, func(a, b chain) int { return strings.Compare(a.name, b.name) })
		out.shared = slices.CompactFunc(out.shared, func(a, b chain) bool { return a.name == b.name })
	}

	// Service ports without endpoints for some traffic: rejected (none anywhere) or
	// dropped (none for its Local policy), from the filter hooks.
	noneVerdict := "drop"
	if !sv.hasAny {
		noneVerdict = "goto " + rejectChain
	}
	sv.add(clusterIPsSet, "", clusterIP.String())
	if len(sv.internal) == 0 {
		sv.add(noEndpointServicesMap, noneVerdict, clusterIP.String(), proto, sv.port)
	}
	if len(sv.externalSet) == 0 {
		for _, ip := range sv.externalIPs {
			sv.add(noEndpointServicesMap, noneVerdict, ip.String(), proto, sv.port)
		}
		if svc.NodePort != 0 {
			sv.add(noEndpointNodePortsMap, noneVerdict, proto, strconv.Itoa(svc.NodePort))
		}
	}
	for _, ep := range sv.reachable {
		if ep.IsLocal {
			ip := ep.Addr.Addr().String()
			sv.add(hairpinSet, "", ip, ip, proto, strconv.Itoa(int(ep.Addr.Port())))
		}
	}

	if svc.Protocol == corev1.ProtocolUDP {
		u := &udpFrontends{serving: map[netip.AddrPort]bool{}, nodePort: uint16(svc.NodePort)}
		u.vips = append(u.vips, netip.AddrPortFrom(clusterIP, uint16(svc.Port)))
		for _, ip := range sv.externalIPs {
			u.vips = append(u.vips, netip.AddrPortFrom(ip, uint16(svc.Port)))
		}
		// Every serving endpoint counts, whatever the traffic policy or topology: a
		// change of policy must not break flows that work.
		for _, ep := range endpoints {
			if ep.Serving {
				u.serving[ep.Addr] = true
			}
		}
		out.udp = u
	}
	return out
}

// svcView is what plan works out about a service port, shared by its two ways of building
// chains.
type svcView struct {
	name                      proxy.ServicePortName
	svc                       *proxy.ServicePort
	proto, port               string
	clusterIP                 netip.Addr
	externalIPs               []netip.Addr
	external, hasAny          bool
	cluster, local, reachable []proxy.Endpoint
	internal, externalSet     []proxy.Endpoint
	out                       *plan
}

func (sv *svcView) add(container, value string, key ...string) {
	sv.out.elems = append(sv.out.elems, elem{container: container, key: strings.Join(key, " . "), value: value})
}

// sharedChains routes the service port's frontends through shared chains: the endpoints
// are elements of the endpoints maps.
func (pl *planner) sharedChains(sv *svcView) {
	ipMap, npMap := endpointsMap(sv.proto), nodePortEndpointsMap(sv.proto)
	if n := len(sv.internal); n > 0 {
		sv.out.shared = append(sv.out.shared, pickChain(sv.proto, n))
		sv.add(serviceIPsMap, "goto "+pickChainName(sv.proto, n), sv.clusterIP.String(), sv.proto, sv.port)
		for i, ep := range sv.internal {
			sv.add(ipMap, endpointValue(ep), sv.clusterIP.String(), sv.port, strconv.Itoa(i))
		}
	}
	// Here external traffic is under the Cluster policy: masqueraded, then like internal.
	n := len(sv.externalSet)
	if n == 0 || !sv.external {
		return
	}
	if len(sv.externalIPs) > 0 {
		sv.out.shared = append(sv.out.shared, pickChain(sv.proto, n), pl.externalChain(sv.proto, n, false))
	}
	for _, ip := range sv.externalIPs {
		sv.add(serviceIPsMap, "goto "+externalChainName(sv.proto, n, false), ip.String(), sv.proto, sv.port)
		for i, ep := range sv.externalSet {
			sv.add(ipMap, endpointValue(ep), ip.String(), sv.port, strconv.Itoa(i))
		}
	}
	if sv.svc.NodePort != 0 {
		np := strconv.Itoa(sv.svc.NodePort)
		sv.out.shared = append(sv.out.shared, pickNodePortChain(sv.proto, n), pl.externalChain(sv.proto, n, true))
		sv.add(serviceNodePortsMap, "goto "+externalChainName(sv.proto, n, true), sv.proto, np)
		for i, ep := range sv.externalSet {
			sv.add(npMap, endpointValue(ep), np, strconv.Itoa(i))
		}
	}
}

func endpointValue(ep proxy.Endpoint) string {
	return ep.Addr.Addr().String() + " . " + strconv.Itoa(int(ep.Addr.Port()))
}

// Shared chains. pick-<proto>-<n> DNATs to one of the n endpoints listed in endpoints-<proto>
// for the packet's destination address and port; pick-nodeport-<proto>-<n> likewise by
// destination port, in nodeport-endpoints-<proto>; external-[nodeport-]<proto>-<n> marks the
// packet for masquerading first.
func pickChainName(proto string, n int) string { return pickChainPrefix(proto) + strconv.Itoa(n) }

// pickChainPrefix is what the names of proto's pick chains begin with.
func pickChainPrefix(proto string) string { return "pick-" + proto + "-" }

func pickNodePortChainName(proto string, n int) string {
	return fmt.Sprintf("pick-nodeport-%s-%d", proto, n)
}

func externalChainName(proto string, n int, nodePort bool) string {
	if nodePort {
		return fmt.Sprintf("external-nodeport-%s-%d", proto, n)
	}
	return fmt.Sprintf("external-%s-%d", proto, n)
}

func pickChain(proto string, n int) chain {
	return chain{name: pickChainName(proto, n), rules: []string{fmt.Sprintf(
		"meta l4proto %s dnat ip addr . port to ip daddr . %s dport . numgen random mod %d map @%s", proto, proto, n, endpointsMap(proto))}}
}

func pickNodePortChain(proto string, n int) chain {
	return chain{name: pickNodePortChainName(proto, n), rules: []string{fmt.Sprintf(
		"meta l4proto %s dnat ip addr . port to %s dport . numgen random mod %d map @%s", proto, proto, n, nodePortEndpointsMap(proto))}}
}

func (pl *planner) externalChain(proto string, n int, nodePort bool) chain {
	next := pickChainName(proto, n)
	if nodePort {
		next = pickNodePortChainName(proto, n)
	}
	return chain{name: externalChainName(proto, n, nodePort), rules: []string{pl.masqRule, "goto " + next}}
}

// ownChains gives the service port chains of its own, choosing among its endpoints with
// rules of its own: for ClientIP affinity, and for externalTrafficPolicy Local.
func (pl *planner) ownChains(sv *svcView) {
	out, svc, proto := sv.out, sv.svc, sv.proto
	base := serviceBase(sv.name)
	clusterChain := clusterChainPrefix + base
	localChain := localChainPrefix + base
	externalChain := externalChainPrefix + base
	affinity := svc.AffinityTimeout > 0
	timeout := max(svc.AffinityTimeout.Round(time.Second), time.Second)

	// Per-endpoint chains and affinity sets, only for ClientIP affinity.
	if affinity {
		for _, ep := range sv.reachable {
			eb := endpointBase(base, ep.Addr)
			out.sets = append(out.sets, affinitySet{name: affinitySetPrefix + eb, timeout: timeout})
			out.chains = append(out.chains, chain{name: endpointChainPrefix + eb, rules: []string{
				fmt.Sprintf("update @%s%s { ip saddr }", affinitySetPrefix, eb),
				fmt.Sprintf("meta l4proto %s dnat to %s", proto, ep.Addr),
			}})
		}
	}
	if len(sv.cluster) > 0 {
		out.chains = append(out.chains, chain{name: clusterChain, rules: pickRules(base, proto, sv.cluster, affinity)})
	}
	if len(sv.local) > 0 {
		out.chains = append(out.chains, chain{name: localChain, rules: pickRules(base, proto, sv.local, affinity)})
	}
	internalChain := clusterChain
	if svc.InternalLocal {
		internalChain = localChain
	}
	if len(sv.internal) > 0 {
		sv.add(serviceIPsMap, "goto "+internalChain, sv.clusterIP.String(), proto, sv.port)
	}
	if !sv.hasAny || !sv.external {
		return
	}

	var rules []string
	if !svc.ExternalLocal {
		// Cluster policy: the endpoint may be on another node, so the reply must come
		// back through this one.
		rules = append(rules, pl.masqRule)
		if len(sv.cluster) > 0 {
			rules = append(rules, "goto "+clusterChain)
		}
	} else {
		// Local policy keeps the client's address. Traffic from this node or from its
		// pods is not "external": it goes to any endpoint, and this node's own traffic is
		// masqueraded (its source is the address it is sending to).
		shortcut := clusterChain
		if len(sv.cluster) == 0 {
			shortcut = localChain
		}
		if len(sv.cluster) > 0 || len(sv.local) > 0 {
			if pl.clusterCIDR.IsValid() {
				rules = append(rules, fmt.Sprintf("ip saddr %s goto %s", pl.clusterCIDR, shortcut))
			}
			rules = append(rules, "fib saddr type local "+pl.masqRule, "fib saddr type local goto "+shortcut)
		}
		if len(sv.local) > 0 {
			rules = append(rules, "goto "+localChain)
		}
	}
	out.chains = append(out.chains, chain{name: externalChain, rules: rules})
	for _, ip := range sv.externalIPs {
		sv.add(serviceIPsMap, "goto "+externalChain, ip.String(), proto, sv.port)
	}
	if svc.NodePort != 0 {
		sv.add(serviceNodePortsMap, "goto "+externalChain, proto, strconv.Itoa(svc.NodePort))
	}
}

// pickRules are the rules of a chain choosing among endpoints at random: one DNAT through a
// numgen map, or, with affinity, first the endpoint this client used recently.
func pickRules(base, proto string, endpoints []proxy.Endpoint, affinity bool) []string {
	var rules, entries []string
	for i, ep := range endpoints {
		if affinity {
			eb := endpointBase(base, ep.Addr)
			rules = append(rules, fmt.Sprintf("ip saddr @%s%s goto %s%s", affinitySetPrefix, eb, endpointChainPrefix, eb))
			entries = append(entries, fmt.Sprintf("%d : goto %s%s", i, endpointChainPrefix, eb))
		} else {
			entries = append(entries, fmt.Sprintf("%d : %s . %d", i, ep.Addr.Addr(), ep.Addr.Port()))
		}
	}
	if affinity {
		return append(rules, fmt.Sprintf("numgen random mod %d vmap { %s }", len(endpoints), strings.Join(entries, " , ")))
	}
	return []string{fmt.Sprintf("meta l4proto %s dnat ip addr . port to numgen random mod %d map { %s }",
		proto, len(endpoints), strings.Join(entries, " , "))}
}
