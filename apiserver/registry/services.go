package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// services is a function of the allocation ranges: ClusterIPs and NodePorts are assigned here,
// at write time, and held as claims the storage layer commits with the Service itself.
func services(a *ServiceAllocation) *Def[*corev1.Service] {
	return &Def[*corev1.Service]{
		Info: Info{GroupVersion: coreV1, Resource: "services", Singular: "service", Kind: "Service", ShortNames: []string{"svc"},
			Categories: []string{"all"}, Namespaced: true, Status: true},
		NewList:        func() runtime.Object { return &corev1.ServiceList{} },
		NameValidation: apimachineryvalidation.NameIsDNS1035Label,
		Defaults:       defaultService,
		Validate:       validateService,
		ValidateUpdate: validateServiceUpdate,
		Allocate:       a.allocate,
		Claims:         serviceClaims,
		Fields: func(s *corev1.Service) fields.Set {
			return fields.Set{"spec.clusterIP": s.Spec.ClusterIP, "spec.type": string(s.Spec.Type)}
		},
		Columns: columns(
			Column("Type", "string", 0, "The type of the service."),
			Column("Cluster-IP", "string", 0, "The IP address of the service inside the cluster."),
			Column("External-IP", "string", 0, "The IP addresses (or name) the service is reachable at from outside."),
			Column("Port(s)", "string", 0, "The ports the service exposes."),
			AgeColumn,
			Column("Selector", "string", 1, "The labels of the pods this service routes to."),
		),
		Row: serviceRow,
	}
}

// maxClientIPAffinitySeconds caps sessionAffinityConfig.clientIP.timeoutSeconds (one day).
const maxClientIPAffinitySeconds = 86400

func needsNodePorts(t corev1.ServiceType) bool {
	return t == corev1.ServiceTypeNodePort || t == corev1.ServiceTypeLoadBalancer
}

func externallyAccessible(s *corev1.ServiceSpec) bool {
	return needsNodePorts(s.Type) || s.Type == corev1.ServiceTypeClusterIP && len(s.ExternalIPs) > 0
}

func needsHealthCheck(s *corev1.ServiceSpec) bool {
	return s.Type == corev1.ServiceTypeLoadBalancer && s.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func defaultService(s *corev1.Service) {
	sp := &s.Spec
	sp.SessionAffinity = or(sp.SessionAffinity, corev1.ServiceAffinityNone)
	switch sp.SessionAffinity {
	case corev1.ServiceAffinityNone:
		sp.SessionAffinityConfig = nil
	case corev1.ServiceAffinityClientIP:
		if c := sp.SessionAffinityConfig; c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
			sp.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{
				TimeoutSeconds: new(int32(corev1.DefaultClientIPServiceAffinitySeconds))}}
		}
	}
	sp.Type = or(sp.Type, corev1.ServiceTypeClusterIP)
	for i := range sp.Ports {
		p := &sp.Ports[i]
		p.Protocol = or(p.Protocol, corev1.ProtocolTCP)
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if externallyAccessible(sp) && sp.ExternalTrafficPolicy == "" {
		sp.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if sp.Type != corev1.ServiceTypeExternalName {
		if sp.InternalTrafficPolicy == nil {
			sp.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicyCluster)
		}
		if sp.IPFamilyPolicy == nil {
			sp.IPFamilyPolicy = new(corev1.IPFamilyPolicySingleStack)
		}
	}
	if sp.Type == corev1.ServiceTypeLoadBalancer && sp.AllocateLoadBalancerNodePorts == nil {
		sp.AllocateLoadBalancerNodePorts = new(true)
	}
	// clusterIP and clusterIPs are two views of one value; a client may send either.
	if sp.ClusterIP == "" && len(sp.ClusterIPs) > 0 {
		sp.ClusterIP = sp.ClusterIPs[0]
	}
	if sp.ClusterIP != "" && len(sp.ClusterIPs) == 0 {
		sp.ClusterIPs = []string{sp.ClusterIP}
	}
	for i := range s.Status.LoadBalancer.Ingress {
		if ing := &s.Status.LoadBalancer.Ingress[i]; ing.IP != "" && ing.IPMode == nil {
			ing.IPMode = new(corev1.LoadBalancerIPModeVIP)
		}
	}
}

func validateService(s *corev1.Service) field.ErrorList {
	sp, p := &s.Spec, field.NewPath("spec")
	headless := sp.ClusterIP == corev1.ClusterIPNone
	errs := oneOf(sp.Type, p.Child("type"), corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort)
	if len(sp.Ports) == 0 && !headless && sp.Type != corev1.ServiceTypeExternalName {
		errs = append(errs, field.Required(p.Child("ports"), ""))
	}
	switch sp.Type {
	case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
		if headless {
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), sp.ClusterIP, fmt.Sprintf("may not be set to 'None' for %s services", sp.Type)))
		}
	case corev1.ServiceTypeExternalName:
		if sp.ClusterIP != "" || len(sp.ClusterIPs) > 0 {
			errs = append(errs, field.Forbidden(p.Child("clusterIPs"), "may not be set for ExternalName services"))
		}
		if len(sp.IPFamilies) > 0 {
			errs = append(errs, field.Forbidden(p.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if sp.IPFamilyPolicy != nil {
			errs = append(errs, field.Forbidden(p.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
		// A trailing dot marks the name fully qualified.
		if name := strings.TrimSuffix(sp.ExternalName, "."); name == "" {
			errs = append(errs, field.Required(p.Child("externalName"), ""))
		} else {
			errs = append(errs, dnsSubdomain(name, p.Child("externalName"))...)
		}
	}

	names, nodePorts, ports := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i, port := range sp.Ports {
		pp := p.Child("ports").Index(i)
		if port.Name == "" && len(sp.Ports) > 1 {
			errs = append(errs, field.Required(pp.Child("name"), ""))
		} else if port.Name != "" {
			errs = append(errs, dnsLabel(port.Name, pp.Child("name"))...)
			errs = append(errs, unique(names, port.Name, pp.Child("name"), port.Name)...)
		}
		errs = append(errs, portNum(port.Port, pp.Child("port"))...)
		errs = append(errs, protocol(port.Protocol, pp.Child("protocol"))...)
		errs = append(errs, portNumOrName(port.TargetPort, pp.Child("targetPort"))...)
		if port.NodePort != 0 {
			if !needsNodePorts(sp.Type) {
				errs = append(errs, field.Forbidden(pp.Child("nodePort"), fmt.Sprintf("may not be used when `type` is '%s'", sp.Type)))
			}
			errs = append(errs, portNum(port.NodePort, pp.Child("nodePort"))...)
			errs = append(errs, unique(nodePorts, fmt.Sprintf("%d/%s", port.NodePort, port.Protocol), pp.Child("nodePort"), port.NodePort)...)
		}
		key := fmt.Sprintf("%d/%s", port.Port, port.Protocol)
		errs = append(errs, unique(ports, key, pp, key)...)
	}

	errs = append(errs, metav1validation.ValidateLabels(sp.Selector, p.Child("selector"))...)
	errs = append(errs, oneOf(sp.SessionAffinity, p.Child("sessionAffinity"), corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone)...)
	if c := sp.SessionAffinityConfig; c != nil {
		cp := p.Child("sessionAffinityConfig")
		if sp.SessionAffinity != corev1.ServiceAffinityClientIP {
			errs = append(errs, field.Forbidden(cp, fmt.Sprintf("must not be set when session affinity is %s", sp.SessionAffinity)))
		} else if c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && (*c.ClientIP.TimeoutSeconds <= 0 || *c.ClientIP.TimeoutSeconds > maxClientIPAffinitySeconds) {
			errs = append(errs, field.Invalid(cp.Child("clientIP", "timeoutSeconds"), *c.ClientIP.TimeoutSeconds,
				fmt.Sprintf("must be greater than 0 and less than %d", maxClientIPAffinitySeconds)))
		}
	}

	if sp.ClusterIP != "" && !headless {
		errs = append(errs, ipAddr(sp.ClusterIP, p.Child("clusterIPs").Index(0))...)
	}
	if len(sp.ClusterIPs) > 0 && sp.ClusterIPs[0] != sp.ClusterIP {
		errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), sp.ClusterIPs[0], "must match `clusterIP`"))
	}
	for i, f := range sp.IPFamilies {
		errs = append(errs, oneOf(f, p.Child("ipFamilies").Index(i), corev1.IPv4Protocol, corev1.IPv6Protocol)...)
	}
	if sp.IPFamilyPolicy != nil {
		errs = append(errs, oneOf(*sp.IPFamilyPolicy, p.Child("ipFamilyPolicy"), corev1.IPFamilyPolicySingleStack,
			corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack)...)
	}
	errs = append(errs, ipList(sp.ExternalIPs, p.Child("externalIPs"))...)

	if !externallyAccessible(sp) {
		if sp.ExternalTrafficPolicy != "" {
			errs = append(errs, field.Invalid(p.Child("externalTrafficPolicy"), sp.ExternalTrafficPolicy, "may only be set for externally-accessible services"))
		}
	} else {
		errs = append(errs, oneOf(sp.ExternalTrafficPolicy, p.Child("externalTrafficPolicy"),
			corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal)...)
	}
	if sp.HealthCheckNodePort != 0 && !needsHealthCheck(sp) {
		errs = append(errs, field.Invalid(p.Child("healthCheckNodePort"), sp.HealthCheckNodePort,
			"may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
	}
	if sp.InternalTrafficPolicy != nil {
		errs = append(errs, oneOf(*sp.InternalTrafficPolicy, p.Child("internalTrafficPolicy"),
			corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal)...)
	}
	if sp.Type != corev1.ServiceTypeLoadBalancer {
		if sp.AllocateLoadBalancerNodePorts != nil {
			errs = append(errs, field.Forbidden(p.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
		}
		if len(sp.LoadBalancerSourceRanges) > 0 {
			errs = append(errs, field.Forbidden(p.Child("loadBalancerSourceRanges"), "may only be used when `type` is 'LoadBalancer'"))
		}
	}
	return errs
}

// validateServiceUpdate keeps a ClusterIP for the service's life; only a switch to or from
// ExternalName, which has none, may drop or gain one.
func validateServiceUpdate(s, old *corev1.Service) field.ErrorList {
	if s.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.ClusterIP == "" {
		return nil
	}
	// An empty clusterIP is not a change: allocation fills it from the stored service.
	if s.Spec.ClusterIP != "" && s.Spec.ClusterIP != old.Spec.ClusterIP {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), s.Spec.ClusterIPs, "may not change once set")}
	}
	return nil
}

// allocate assigns the ClusterIP and NodePorts of a service being written. On update it first
// carries over what the stored service holds, so a client that omits them keeps them.
func (a *ServiceAllocation) allocate(ctx context.Context, h Hooks, s, old *corev1.Service, creating bool) field.ErrorList {
	var op *corev1.ServiceSpec
	if !creating {
		op = &old.Spec
		inheritService(&s.Spec, op)
	}
	taken := func(key string) (bool, error) {
		if h == nil {
			return false, nil
		}
		return h.Taken(ctx, key)
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if errs := a.allocateClusterIP(s, op, taken); len(errs) > 0 {
		return errs
	}
	return a.allocateNodePorts(&s.Spec, op, taken)
}

// inheritService fills an updated spec from the stored one and drops what its new type cannot have.
func inheritService(sp, op *corev1.ServiceSpec) {
	if sp.Type == corev1.ServiceTypeExternalName {
		if op.Type != corev1.ServiceTypeExternalName {
			sp.ClusterIP, sp.ClusterIPs, sp.IPFamilies, sp.IPFamilyPolicy, sp.InternalTrafficPolicy = "", nil, nil, nil, nil
		}
	} else {
		if sp.ClusterIP == "" && len(sp.ClusterIPs) == 0 {
			sp.ClusterIP, sp.ClusterIPs = op.ClusterIP, slices.Clone(op.ClusterIPs)
		}
		// An edit of clusterIP alone leaves clusterIPs stale; the edited field wins.
		if sp.ClusterIP != "" && len(sp.ClusterIPs) > 0 && sp.ClusterIP != sp.ClusterIPs[0] && slices.Equal(sp.ClusterIPs, op.ClusterIPs) {
			sp.ClusterIPs = []string{sp.ClusterIP}
		}
		if len(sp.IPFamilies) == 0 {
			sp.IPFamilies = slices.Clone(op.IPFamilies)
		}
	}
	switch {
	case !needsNodePorts(sp.Type) && needsNodePorts(op.Type):
		for i := range sp.Ports {
			sp.Ports[i].NodePort = 0
		}
	case needsNodePorts(sp.Type):
		for i := range sp.Ports {
			p := &sp.Ports[i]
			if p.NodePort != 0 {
				continue
			}
			for _, o := range op.Ports {
				if o.Port == p.Port && o.Protocol == p.Protocol {
					p.NodePort = o.NodePort
				}
			}
		}
	}
	if needsHealthCheck(sp) {
		sp.HealthCheckNodePort = or(sp.HealthCheckNodePort, op.HealthCheckNodePort)
	} else if sp.HealthCheckNodePort == op.HealthCheckNodePort {
		sp.HealthCheckNodePort = 0
	}
	if !externallyAccessible(sp) && sp.ExternalTrafficPolicy == op.ExternalTrafficPolicy {
		sp.ExternalTrafficPolicy = ""
	}
	if sp.Type != corev1.ServiceTypeLoadBalancer && op.Type == corev1.ServiceTypeLoadBalancer {
		sp.AllocateLoadBalancerNodePorts = nil
	}
}

func (a *ServiceAllocation) ipRange() (netip.Prefix, bool) {
	if a == nil || a.ClusterIPRange == nil {
		return netip.Prefix{}, false
	}
	addr, ok := netip.AddrFromSlice(a.ClusterIPRange.IP)
	ones, _ := a.ClusterIPRange.Mask.Size()
	return netip.PrefixFrom(addr.Unmap(), ones).Masked(), ok
}

// APIServerServiceIP is the ClusterIP of the kubernetes service in default: the range's first
// address, which no other service gets. The API server's certificate names it.
func (a *ServiceAllocation) APIServerServiceIP() (netip.Addr, bool) {
	prefix, ok := a.ipRange()
	if !ok {
		return netip.Addr{}, false
	}
	return offset(prefix, 1), true
}

func (a *ServiceAllocation) allocateClusterIP(s *corev1.Service, op *corev1.ServiceSpec, taken func(string) (bool, error)) field.ErrorList {
	sp, p := &s.Spec, field.NewPath("spec")
	ipPath := p.Child("clusterIPs").Index(0)
	prefix, ok := a.ipRange()
	if !ok {
		return field.ErrorList{field.InternalError(ipPath, errors.New("no service cluster IP range is configured"))}
	}
	family := corev1.IPv4Protocol
	if prefix.Addr().Is6() {
		family = corev1.IPv6Protocol
	}
	if sp.IPFamilyPolicy != nil && *sp.IPFamilyPolicy == corev1.IPFamilyPolicyRequireDualStack {
		return field.ErrorList{field.Invalid(p.Child("ipFamilyPolicy"), *sp.IPFamilyPolicy, "this cluster is not configured for dual-stack services")}
	}
	if len(sp.IPFamilies) > 0 && sp.IPFamilies[0] != family {
		return field.ErrorList{field.Invalid(p.Child("ipFamilies").Index(0), sp.IPFamilies[0], "not configured on this cluster")}
	}
	sp.IPFamilies = []corev1.IPFamily{family} // single-stack: a PreferDualStack second family is dropped
	if len(sp.ClusterIPs) > 1 {
		return field.ErrorList{field.Invalid(p.Child("clusterIPs").Index(1), sp.ClusterIPs[1], "this cluster is not configured for dual-stack services")}
	}

	// An updated service that had an IP keeps it; a changed one is refused by validation.
	if sp.ClusterIP == corev1.ClusterIPNone || op != nil && op.ClusterIP != "" {
		return nil
	}
	ip := sp.ClusterIP
	if ip == "" && s.Namespace == "default" && s.Name == "kubernetes" {
		first, _ := a.APIServerServiceIP()
		ip = first.String()
	}
	if ip == "" {
		bits := prefix.Addr().BitLen() - prefix.Bits()
		size := uint64(1) << min(bits, 24) // bounds the scan; a larger range is sampled from its start
		// Offset 0 is the network address and 1 the kubernetes service's; IPv4 also loses its broadcast address.
		hi := size
		if prefix.Addr().Is4() && bits <= 24 {
			hi--
		}
		var n uint64
		if hi > 2 {
			n = hi - 2
		}
		i, err := pick(n, func(i uint64) (bool, error) {
			t, err := taken("serviceips/" + offset(prefix, i+2).String())
			return !t, err
		})
		if err != nil {
			return field.ErrorList{field.InternalError(ipPath, fmt.Errorf("failed to allocate a serviceIP: %w", err))}
		}
		ip = offset(prefix, i+2).String()
	} else {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return field.ErrorList{field.Invalid(ipPath, ip, "must be a valid IP address")}
		}
		if addr = addr.Unmap(); !usable(prefix, addr) {
			return field.ErrorList{field.Invalid(ipPath, ip, fmt.Sprintf("failed to allocate IP %s: the provided IP (%s) is not in the valid range. The range of valid IPs is %s", ip, ip, prefix))}
		}
		if t, err := taken("serviceips/" + addr.String()); err != nil {
			return field.ErrorList{field.InternalError(ipPath, err)}
		} else if t {
			return field.ErrorList{field.Invalid(ipPath, ip, fmt.Sprintf("failed to allocate IP %s: provided IP is already allocated", ip))}
		}
		ip = addr.String()
	}
	sp.ClusterIP, sp.ClusterIPs = ip, []string{ip}
	return nil
}

// usable reports whether addr is in the range and neither its network nor (IPv4) broadcast address.
func usable(prefix netip.Prefix, addr netip.Addr) bool {
	if !prefix.Contains(addr) || addr == prefix.Addr() {
		return false
	}
	bits := addr.BitLen() - prefix.Bits()
	return !addr.Is4() || addr != offset(prefix, 1<<bits-1)
}

// offset returns the address off places after the start of prefix.
func offset(prefix netip.Prefix, off uint64) netip.Addr {
	b := prefix.Addr().As16()
	for i := 15; i >= 0 && off > 0; i-- {
		sum := uint64(b[i]) + off&0xff
		b[i] = byte(sum)
		off = off>>8 + sum>>8
	}
	addr := netip.AddrFrom16(b)
	if prefix.Addr().Is4() {
		return addr.Unmap()
	}
	return addr
}

var errRangeFull = errors.New("range is full")

// pick returns a candidate in [0, n) that free accepts: a few random tries keep allocation
// cheap while the range is sparse, then a scan finds the last free ones.
func pick(n uint64, free func(uint64) (bool, error)) (uint64, error) {
	if n == 0 || n > 1<<62 {
		return 0, errRangeFull
	}
	for range 20 {
		i := rand.Uint64N(n)
		if ok, err := free(i); ok || err != nil {
			return i, err
		}
	}
	for i := range n {
		if ok, err := free(i); ok || err != nil {
			return i, err
		}
	}
	return 0, errRangeFull
}

func (a *ServiceAllocation) allocateNodePorts(sp, op *corev1.ServiceSpec, taken func(string) (bool, error)) field.ErrorList {
	if !needsNodePorts(sp.Type) {
		return nil
	}
	held := map[int32]bool{} // ports the stored service already holds
	if op != nil {
		for _, p := range op.Ports {
			held[p.NodePort] = true
		}
		held[op.HealthCheckNodePort] = true
	}
	mine := map[int32]bool{} // ports this write holds, including ones picked just now
	var errs field.ErrorList
	claim := func(np int32, p *field.Path) {
		if mine[np] {
			return // shared by two protocols of one port; true duplicates are validation's to report
		}
		base, size := int32(a.NodePortBase), int32(a.NodePortSize)
		if np < base || np >= base+size {
			errs = append(errs, field.Invalid(p, np, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", base, base+size-1)))
			return
		}
		if !held[np] {
			if t, err := taken("nodeports/" + strconv.Itoa(int(np))); err != nil {
				errs = append(errs, field.InternalError(p, err))
				return
			} else if t {
				errs = append(errs, field.Invalid(p, np, "provided port is already allocated"))
				return
			}
		}
		mine[np] = true
	}
	next := func(p *field.Path) int32 {
		i, err := pick(uint64(max(a.NodePortSize, 0)), func(i uint64) (bool, error) {
			np := int32(a.NodePortBase) + int32(i)
			if mine[np] {
				return false, nil
			}
			t, err := taken("nodeports/" + strconv.Itoa(int(np)))
			return !t, err
		})
		if err != nil {
			errs = append(errs, field.InternalError(p, fmt.Errorf("failed to allocate a nodePort: %w", err)))
			return 0
		}
		np := int32(a.NodePortBase) + int32(i)
		mine[np] = true
		return np
	}

	ports := sp.Ports
	byPort := map[int32]int32{} // TCP and UDP of one service port share a node port
	for i, p := range ports {
		if p.NodePort != 0 {
			claim(p.NodePort, field.NewPath("spec", "ports").Index(i).Child("nodePort"))
			byPort[p.Port] = or(byPort[p.Port], p.NodePort)
		}
	}
	auto := sp.Type == corev1.ServiceTypeNodePort || sp.AllocateLoadBalancerNodePorts == nil || *sp.AllocateLoadBalancerNodePorts
	for i := range ports {
		p := &ports[i]
		if p.NodePort != 0 || !auto {
			continue
		}
		if np, ok := byPort[p.Port]; ok {
			p.NodePort = np
			continue
		}
		p.NodePort = next(field.NewPath("spec", "ports").Index(i).Child("nodePort"))
		byPort[p.Port] = p.NodePort
	}
	if needsHealthCheck(sp) {
		hp := field.NewPath("spec", "healthCheckNodePort")
		if sp.HealthCheckNodePort != 0 {
			claim(sp.HealthCheckNodePort, hp)
		} else {
			sp.HealthCheckNodePort = next(hp)
		}
	}
	return errs
}

// serviceClaims are the ClusterIP and node ports a service holds, each once.
func serviceClaims(s *corev1.Service) []string {
	var keys []string
	for _, ip := range s.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			keys = append(keys, "serviceips/"+ip)
		}
	}
	nps := []int32{s.Spec.HealthCheckNodePort}
	for _, p := range s.Spec.Ports {
		nps = append(nps, p.NodePort)
	}
	for _, np := range nps {
		if np != 0 {
			keys = append(keys, "nodeports/"+strconv.Itoa(int(np)))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func serviceRow(s *corev1.Service) []any {
	clusterIP := "<none>"
	if len(s.Spec.ClusterIPs) > 0 {
		clusterIP = s.Spec.ClusterIPs[0]
	}
	ports := make([]string, len(s.Spec.Ports))
	for i, p := range s.Spec.Ports {
		ports[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.NodePort > 0 {
			ports[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		}
	}
	return []any{string(s.Spec.Type), clusterIP, externalIP(s), joinOrNone(ports), Age(s.CreationTimestamp),
		labels.FormatLabels(s.Spec.Selector)}
}

func externalIP(s *corev1.Service) string {
	switch s.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		return joinOrNone(s.Spec.ExternalIPs)
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	case corev1.ServiceTypeLoadBalancer:
		lb := sets.New[string]()
		for _, ing := range s.Status.LoadBalancer.Ingress {
			lb.Insert(or(ing.IP, ing.Hostname))
		}
		lb.Delete("")
		all := append(sets.List(lb), s.Spec.ExternalIPs...)
		if len(all) == 0 {
			return "<pending>"
		}
		return strings.Join(all, ",")
	}
	return "<unknown>"
}
