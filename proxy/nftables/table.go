package nftables

import (
	"fmt"
	"net/netip"
	"strings"

	"sigs.k8s.io/knftables"
)

// TableName is the nftables table (family ip) the proxier owns.
const TableName = "kplane"

// The fixed objects of the table. Packets reach a service through two verdict maps looked up
// from the nat hooks; what has no endpoints is rejected (or dropped) from the filter hooks,
// where reject is allowed.
const (
	// nat: dispatch to per-service chains.
	servicesChain = "services"
	// overridesChain holds rules shadowing service-ips for service ports whose endpoints
	// changed in a partial sync, until the maps catch up (see Proxier.overrideChanges).
	overridesChain      = "service-overrides"
	serviceIPsMap       = "service-ips"       // ip . proto . port : goto svc-/local-/ext- chain
	serviceNodePortsMap = "service-nodeports" // proto . port : goto ext- chain
	nodePortIPsSet      = "nodeport-ips"      // only when Options.NodePortAddresses is set
	clusterIPsSet       = "cluster-ips"

	// endpoints-<proto> (ip . port . index : endpoint ip . port) and
	// nodeport-endpoints-<proto> (port . index : endpoint ip . port), per protocol because
	// nft ties a map's port type to one protocol.
	endpointsMapPrefix         = "endpoints-"
	nodePortEndpointsMapPrefix = "nodeport-endpoints-"

	// nat postrouting: masquerade what was marked, and hairpin connections.
	masqueradingChain = "masquerading"
	hairpinSet        = "hairpin-connections" // ip . ip . proto . port of local endpoints

	// filter: services without (usable) endpoints, and unknown ports of ClusterIPs.
	serviceEndpointsCheckChain  = "service-endpoints-check"
	nodePortEndpointsCheckChain = "nodeport-endpoints-check"
	clusterIPsCheckChain        = "cluster-ips-check"
	noEndpointServicesMap       = "no-endpoint-services"  // ip . proto . port : verdict
	noEndpointNodePortsMap      = "no-endpoint-nodeports" // proto . port : verdict
	rejectChain                 = "reject-chain"
)

type baseChain struct {
	name     string
	typ      knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
	rules    []string
}

// layout is the fixed part of the table: what a full sync writes before the services.
type layout struct {
	baseChains []baseChain
	chains     []chain // regular chains with fixed rules
	sets       []*knftables.Set
	maps       []*knftables.Map
	elements   []*knftables.Element
}

// newLayout builds the fixed part of the table for the proxier's options.
func newLayout(masqMark string, masqueradeAll bool, clusterCIDR netip.Prefix, nodePortIPs []netip.Addr) *layout {
	masq := "mark set mark or " + masqMark
	nodePortMatch := "fib daddr type local ip daddr != 127.0.0.0/8"
	nodePortCheckMatch := "ip daddr != 127.0.0.0/8"
	if len(nodePortIPs) > 0 {
		nodePortMatch = "ip daddr @" + nodePortIPsSet
		nodePortCheckMatch = nodePortMatch
	}
	newCheck := "ct state new jump "

	l := &layout{
		baseChains: []baseChain{
			{"filter-input", knftables.FilterType, knftables.InputHook, knftables.FilterPriority, []string{
				newCheck + nodePortEndpointsCheckChain,
				newCheck + serviceEndpointsCheckChain,
			}},
			{"filter-forward", knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority, []string{
				newCheck + serviceEndpointsCheckChain,
				newCheck + clusterIPsCheckChain,
			}},
			{"filter-output", knftables.FilterType, knftables.OutputHook, knftables.FilterPriority, []string{
				newCheck + serviceEndpointsCheckChain,
				newCheck + clusterIPsCheckChain,
			}},
			{"nat-prerouting", knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority, []string{"jump " + servicesChain}},
			{"nat-output", knftables.NATType, knftables.OutputHook, knftables.DNATPriority, []string{"jump " + servicesChain}},
			{"nat-postrouting", knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority, []string{"jump " + masqueradingChain}},
		},
		sets: []*knftables.Set{
			{Name: clusterIPsSet, Type: "ipv4_addr", Comment: knftables.PtrTo("ClusterIPs in use")},
			{Name: hairpinSet, Type: "ipv4_addr . ipv4_addr . inet_proto . inet_service", Comment: knftables.PtrTo("endpoints on this node, reaching themselves through a service")},
		},
		maps: []*knftables.Map{
			{Name: serviceIPsMap, Type: "ipv4_addr . inet_proto . inet_service : verdict", Comment: knftables.PtrTo("ClusterIP, external and load-balancer IP traffic")},
			{Name: serviceNodePortsMap, Type: "inet_proto . inet_service : verdict", Comment: knftables.PtrTo("NodePort traffic")},
			{Name: noEndpointServicesMap, Type: "ipv4_addr . inet_proto . inet_service : verdict", Comment: knftables.PtrTo("service IPs without usable endpoints")},
			{Name: noEndpointNodePortsMap, Type: "inet_proto . inet_service : verdict", Comment: knftables.PtrTo("NodePorts without usable endpoints")},
		},
	}
	for _, proto := range []string{"tcp", "udp", "sctp"} {
		l.maps = append(l.maps,
			&knftables.Map{Name: endpointsMap(proto),
				TypeOf:  fmt.Sprintf("ip daddr . %s dport . numgen random mod 1 : ip daddr . %s dport", proto, proto),
				Comment: knftables.PtrTo(proto + " service IP, port and random index: endpoint")},
			&knftables.Map{Name: nodePortEndpointsMap(proto),
				TypeOf:  fmt.Sprintf("%s dport . numgen random mod 1 : ip daddr . %s dport", proto, proto),
				Comment: knftables.PtrTo(proto + " NodePort and random index: endpoint")},
		)
	}

	var services []string
	switch {
	case masqueradeAll:
		services = append(services, "ip daddr @"+clusterIPsSet+" "+masq)
	case clusterCIDR.IsValid():
		services = append(services, fmt.Sprintf("ip daddr @%s ip saddr != %s %s", clusterIPsSet, clusterCIDR, masq))
	}
	services = append(services,
		"jump "+overridesChain,
		"ip daddr . meta l4proto . th dport vmap @"+serviceIPsMap,
		nodePortMatch+" meta l4proto . th dport vmap @"+serviceNodePortsMap,
	)
	l.chains = []chain{
		{overridesChain, nil},
		{servicesChain, services},
		{masqueradingChain, []string{
			fmt.Sprintf("mark and %s != 0 mark set mark xor %s masquerade fully-random", masqMark, masqMark),
			"ct status dnat ip saddr . ip daddr . meta l4proto . th dport @" + hairpinSet + " masquerade fully-random",
		}},
		{serviceEndpointsCheckChain, []string{"ip daddr . meta l4proto . th dport vmap @" + noEndpointServicesMap}},
		{nodePortEndpointsCheckChain, []string{nodePortCheckMatch + " meta l4proto . th dport vmap @" + noEndpointNodePortsMap}},
		{clusterIPsCheckChain, []string{"ip daddr @" + clusterIPsSet + " reject"}},
		{rejectChain, []string{"meta l4proto tcp reject with tcp reset", "reject"}},
	}

	if len(nodePortIPs) > 0 {
		l.sets = append(l.sets, &knftables.Set{Name: nodePortIPsSet, Type: "ipv4_addr", Comment: knftables.PtrTo("IPs accepting NodePort traffic")})
		for _, ip := range nodePortIPs {
			l.elements = append(l.elements, &knftables.Element{Set: nodePortIPsSet, Key: []string{ip.String()}})
		}
	}
	return l
}

func endpointsMap(proto string) string         { return endpointsMapPrefix + proto }
func nodePortEndpointsMap(proto string) string { return nodePortEndpointsMapPrefix + proto }

// isMap tells a shared container's kind, for building elements.
func isMap(container string) bool {
	switch container {
	case serviceIPsMap, serviceNodePortsMap, noEndpointServicesMap, noEndpointNodePortsMap:
		return true
	}
	return strings.HasPrefix(container, endpointsMapPrefix) || strings.HasPrefix(container, nodePortEndpointsMapPrefix)
}
