package registry

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// networking.k8s.io: Ingresses and IngressClasses, NetworkPolicies, ServiceCIDRs and
// IPAddresses. No kplane controller acts on Ingresses or NetworkPolicies (an ingress controller
// or a network plugin would); kplane's ClusterIP allocator keeps its own claims rather than
// IPAddress objects, and the one ServiceCIDR it writes is the default range's (bootstrap.go).

var networkingV1 = networkingv1.SchemeGroupVersion

var ingressClassesResource = schema.GroupResource{Group: networkingv1.GroupName, Resource: "ingressclasses"}

func networkingResources() []Strategy {
	return []Strategy{ingressClasses, ingresses, ipAddresses, networkPolicies, serviceCIDRs}
}

// ingressClassAnnotation is the class of an ingress before spec.ingressClassName existed.
const ingressClassAnnotation = "kubernetes.io/ingress.class"

// maxIngressClassController is the longest spec.controller of an IngressClass.
const maxIngressClassController = 250

var ingressClasses = &Def[*networkingv1.IngressClass]{
	Info:    Info{GroupVersion: networkingV1, Resource: "ingressclasses", Singular: "ingressclass", Kind: "IngressClass"},
	NewList: func() runtime.Object { return &networkingv1.IngressClassList{} },
	Defaults: func(c *networkingv1.IngressClass) {
		if p := c.Spec.Parameters; p != nil && p.Scope == nil {
			p.Scope = new(networkingv1.IngressClassParametersReferenceScopeCluster)
		}
	},
	Validate: validateIngressClass,
	ValidateUpdate: func(c, old *networkingv1.IngressClass) field.ErrorList {
		if c.Spec.Controller != old.Spec.Controller {
			return immutable(c.Spec.Controller, field.NewPath("spec", "controller"))
		}
		return nil
	},
	Columns: columns(
		Column("Controller", "string", 0, "The controller that implements the class."),
		Column("Parameters", "string", 0, "The resource with further configuration of the class."),
		AgeColumn,
	),
	Row: func(c *networkingv1.IngressClass) []any {
		params := "<none>"
		if p := c.Spec.Parameters; p != nil {
			params = p.Kind
			if g := deref(p.APIGroup); g != "" {
				params += "." + g
			}
			params += "/" + p.Name
		}
		return []any{c.Spec.Controller, params, Age(c.CreationTimestamp)}
	},
}

func validateIngressClass(c *networkingv1.IngressClass) field.ErrorList {
	sp := field.NewPath("spec")
	var errs field.ErrorList
	if len(c.Spec.Controller) > maxIngressClassController {
		errs = append(errs, field.TooLong(sp.Child("controller"), "", maxIngressClassController))
	}
	errs = append(errs, validation.IsDomainPrefixedPath(sp.Child("controller"), c.Spec.Controller)...)
	p := c.Spec.Parameters
	if p == nil {
		return errs
	}
	pp := sp.Child("parameters")
	if p.APIGroup != nil {
		errs = append(errs, dnsSubdomain(*p.APIGroup, pp.Child("apiGroup"))...)
	}
	errs = append(errs, requiredPathSegment(p.Kind, pp.Child("kind"))...)
	errs = append(errs, requiredPathSegment(p.Name, pp.Child("name"))...)
	scope := deref(p.Scope)
	if scope == "" {
		return append(errs, field.Required(pp.Child("scope"), ""))
	}
	errs = append(errs, oneOf(scope, pp.Child("scope"), networkingv1.IngressClassParametersReferenceScopeNamespace, networkingv1.IngressClassParametersReferenceScopeCluster)...)
	switch {
	case scope == networkingv1.IngressClassParametersReferenceScopeNamespace && p.Namespace == nil:
		errs = append(errs, field.Required(pp.Child("namespace"), "`parameters.scope` is set to 'Namespace'"))
	case scope == networkingv1.IngressClassParametersReferenceScopeNamespace:
		errs = append(errs, dnsLabel(*p.Namespace, pp.Child("namespace"))...)
	case scope == networkingv1.IngressClassParametersReferenceScopeCluster && p.Namespace != nil:
		errs = append(errs, field.Forbidden(pp.Child("namespace"), "`parameters.scope` is set to 'Cluster'"))
	}
	return errs
}

// requiredPathSegment: present, and usable as one segment of a URL path.
func requiredPathSegment(v string, p *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return msgs(p, v, content.IsPathSegmentName(v))
}

var ingresses = &Def[*networkingv1.Ingress]{
	Info: Info{GroupVersion: networkingV1, Resource: "ingresses", Singular: "ingress", Kind: "Ingress",
		ShortNames: []string{"ing"}, Namespaced: true, Status: true},
	NewList:  func() runtime.Object { return &networkingv1.IngressList{} },
	Admit:    admitIngress,
	Validate: validateIngress,
	ValidateCreate: func(ing *networkingv1.Ingress) field.ErrorList {
		if class, ok := ing.Annotations[ingressClassAnnotation]; ok && ing.Spec.IngressClassName != nil && class != *ing.Spec.IngressClassName {
			return field.ErrorList{field.Invalid(field.NewPath("annotations").Child(ingressClassAnnotation), class, "must match `ingressClassName` when both are specified")}
		}
		return nil
	},
	Columns: columns(
		Column("Class", "string", 0, "The IngressClass of the ingress."),
		Column("Hosts", "string", 0, "The hosts the rules match."),
		Column("Address", "string", 0, "Where the ingress is reachable, from its load balancer."),
		Column("Ports", "string", 0, "The ports the ingress opens."),
		AgeColumn,
	),
	Row: ingressRow,
}

// admitIngress gives an ingress without a class the default one, as Kubernetes'
// DefaultIngressClass admission does; with several defaults, the newest.
func admitIngress(ctx context.Context, objs Objects, ing, old *networkingv1.Ingress) error {
	if old != nil || ing.Spec.IngressClassName != nil || ing.Annotations[ingressClassAnnotation] != "" {
		return nil
	}
	stored, err := objs.List(ctx, ingressClassesResource)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	var def *networkingv1.IngressClass
	for _, o := range stored {
		c := o.(*networkingv1.IngressClass)
		if c.Annotations[networkingv1.AnnotationIsDefaultIngressClass] != "true" {
			continue
		}
		if def == nil || def.CreationTimestamp.Before(&c.CreationTimestamp) {
			def = c
		}
	}
	if def != nil {
		ing.Spec.IngressClassName = new(def.Name)
	}
	return nil
}

func validateIngress(ing *networkingv1.Ingress) field.ErrorList {
	sp := field.NewPath("spec")
	s := &ing.Spec
	var errs field.ErrorList
	if len(s.Rules) == 0 && s.DefaultBackend == nil {
		errs = append(errs, field.Invalid(sp, s.Rules, "either `defaultBackend` or `rules` must be specified"))
	}
	if s.DefaultBackend != nil {
		errs = append(errs, validateIngressBackend(s.DefaultBackend, sp.Child("defaultBackend"))...)
	}
	for i, r := range s.Rules {
		rp := sp.Child("rules").Index(i)
		if r.Host != "" {
			errs = append(errs, ingressHost(r.Host, rp.Child("host"))...)
		}
		if r.HTTP == nil {
			continue
		}
		hp := rp.Child("http", "paths")
		if len(r.HTTP.Paths) == 0 {
			errs = append(errs, field.Required(hp, ""))
		}
		for j := range r.HTTP.Paths {
			errs = append(errs, validateIngressPath(&r.HTTP.Paths[j], hp.Index(j))...)
		}
	}
	for i, tls := range s.TLS {
		tp := sp.Child("tls").Index(i)
		for j, h := range tls.Hosts {
			errs = append(errs, wildcardOrSubdomain(h, tp.Child("hosts").Index(j))...)
		}
		if tls.SecretName != "" {
			errs = append(errs, dnsSubdomain(tls.SecretName, tp.Child("secretName"))...)
		}
	}
	if s.IngressClassName != nil {
		errs = append(errs, dnsSubdomain(*s.IngressClassName, sp.Child("ingressClassName"))...)
	}
	lp := field.NewPath("status", "loadBalancer", "ingress")
	for i, lb := range ing.Status.LoadBalancer.Ingress {
		if lb.IP != "" {
			errs = append(errs, ipAddr(lb.IP, lp.Index(i).Child("ip"))...)
		}
		if lb.Hostname != "" {
			hp := lp.Index(i).Child("hostname")
			errs = append(errs, dnsSubdomain(lb.Hostname, hp)...)
			if net.ParseIP(lb.Hostname) != nil {
				errs = append(errs, field.Invalid(hp, lb.Hostname, "must be a DNS name, not an IP address"))
			}
		}
	}
	return errs
}

func ingressHost(h string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if net.ParseIP(h) != nil {
		errs = append(errs, field.Invalid(p, h, "must be a DNS name, not an IP address"))
	}
	return append(errs, wildcardOrSubdomain(h, p)...)
}

func wildcardOrSubdomain(h string, p *field.Path) field.ErrorList {
	if strings.Contains(h, "*") {
		return msgs(p, h, validation.IsWildcardDNS1123Subdomain(h))
	}
	return dnsSubdomain(h, p)
}

var ingressPathTypes = []networkingv1.PathType{networkingv1.PathTypeExact, networkingv1.PathTypePrefix, networkingv1.PathTypeImplementationSpecific}

func validateIngressPath(hp *networkingv1.HTTPIngressPath, p *field.Path) field.ErrorList {
	if hp.PathType == nil {
		return field.ErrorList{field.Required(p.Child("pathType"), "pathType must be specified")}
	}
	var errs field.ErrorList
	pp := p.Child("path")
	switch *hp.PathType {
	case networkingv1.PathTypeExact, networkingv1.PathTypePrefix:
		if !strings.HasPrefix(hp.Path, "/") {
			errs = append(errs, field.Invalid(pp, hp.Path, "must be an absolute path"))
		}
		// Paths that walk up or name the current directory would mean different things to
		// different proxies.
		for _, seq := range []string{"//", "/./", "/../", "%2f", "%2F"} {
			if strings.Contains(hp.Path, seq) {
				errs = append(errs, field.Invalid(pp, hp.Path, fmt.Sprintf("must not contain '%s'", seq)))
			}
		}
		for _, suffix := range []string{"/..", "/."} {
			if strings.HasSuffix(hp.Path, suffix) {
				errs = append(errs, field.Invalid(pp, hp.Path, fmt.Sprintf("cannot end with '%s'", suffix)))
			}
		}
	case networkingv1.PathTypeImplementationSpecific:
		if hp.Path != "" && !strings.HasPrefix(hp.Path, "/") {
			errs = append(errs, field.Invalid(pp, hp.Path, "must be an absolute path"))
		}
	default:
		errs = append(errs, oneOf(*hp.PathType, p.Child("pathType"), ingressPathTypes...)...)
	}
	return append(errs, validateIngressBackend(&hp.Backend, p.Child("backend"))...)
}

func validateIngressBackend(b *networkingv1.IngressBackend, p *field.Path) field.ErrorList {
	switch {
	case b.Resource != nil && b.Service != nil:
		return field.ErrorList{field.Invalid(p, "", "cannot set both resource and service backends")}
	case b.Resource != nil:
		rp := p.Child("resource")
		var errs field.ErrorList
		if g := b.Resource.APIGroup; g != nil {
			errs = append(errs, dnsSubdomain(*g, rp.Child("apiGroup"))...)
		}
		errs = append(errs, requiredPathSegment(b.Resource.Kind, rp.Child("kind"))...)
		return append(errs, requiredPathSegment(b.Resource.Name, rp.Child("name"))...)
	case b.Service != nil:
		// Service names follow the relaxed (DNS label) rule of Kubernetes v1.36.
		errs := requiredLabel(b.Service.Name, p.Child("service", "name"))
		port := b.Service.Port
		switch {
		case port.Name != "" && port.Number != 0:
			errs = append(errs, field.Invalid(p, "", "cannot set both port name & port number"))
		case port.Name != "":
			errs = append(errs, msgs(p.Child("service", "port", "name"), port.Name, validation.IsValidPortName(port.Name))...)
		case port.Number != 0:
			errs = append(errs, portNum(port.Number, p.Child("service", "port", "number"))...)
		default:
			errs = append(errs, field.Required(p, "port name or number is required"))
		}
		return errs
	}
	return field.ErrorList{field.Invalid(p, "", "resource or service backend is required")}
}

func ingressRow(ing *networkingv1.Ingress) []any {
	// Up to three hosts, and how many rules there are beyond three.
	var hosts []string
	for _, r := range ing.Spec.Rules {
		if len(hosts) < 3 && r.Host != "" {
			hosts = append(hosts, r.Host)
		}
	}
	hostCell := "*"
	if len(hosts) > 0 {
		hostCell = strings.Join(hosts, ",")
		if n := len(ing.Spec.Rules); n > 3 {
			hostCell += fmt.Sprintf(" + %d more...", n-3)
		}
	}
	addrs := map[string]bool{}
	for _, lb := range ing.Status.LoadBalancer.Ingress {
		if a := or(lb.IP, lb.Hostname); a != "" {
			addrs[a] = true
		}
	}
	ports := "80"
	if len(ing.Spec.TLS) > 0 {
		ports = "80, 443"
	}
	class := "<none>"
	if c := ing.Spec.IngressClassName; c != nil {
		class = *c
	}
	return []any{class, hostCell, strings.Join(slices.Sorted(maps.Keys(addrs)), ","), ports, Age(ing.CreationTimestamp)}
}

var networkPolicies = &Def[*networkingv1.NetworkPolicy]{
	Info: Info{GroupVersion: networkingV1, Resource: "networkpolicies", Singular: "networkpolicy", Kind: "NetworkPolicy",
		ShortNames: []string{"netpol"}, Namespaced: true},
	NewList:  func() runtime.Object { return &networkingv1.NetworkPolicyList{} },
	Defaults: defaultNetworkPolicy,
	Validate: validateNetworkPolicy,
	Columns: columns(
		Column("Pod-Selector", "string", 0, "The pods the policy applies to."),
		AgeColumn,
	),
	Row: func(np *networkingv1.NetworkPolicy) []any {
		return []any{metav1.FormatLabelSelector(&np.Spec.PodSelector), Age(np.CreationTimestamp)}
	},
}

func defaultNetworkPolicy(np *networkingv1.NetworkPolicy) {
	s := &np.Spec
	tcp := func(ports []networkingv1.NetworkPolicyPort) {
		for i := range ports {
			if ports[i].Protocol == nil {
				ports[i].Protocol = new(corev1.ProtocolTCP)
			}
		}
	}
	for i := range s.Ingress {
		tcp(s.Ingress[i].Ports)
	}
	for i := range s.Egress {
		tcp(s.Egress[i].Ports)
	}
	// A policy that names no types is about ingress, and egress too when it has egress rules.
	if len(s.PolicyTypes) == 0 {
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(s.Egress) > 0 {
			s.PolicyTypes = append(s.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
}

func validateNetworkPolicy(np *networkingv1.NetworkPolicy) field.ErrorList {
	sp := field.NewPath("spec")
	s := &np.Spec
	errs := metav1validation.ValidateLabelSelector(&s.PodSelector, metav1validation.LabelSelectorValidationOptions{}, sp.Child("podSelector"))
	rules := func(kind, peerKind string, ports [][]networkingv1.NetworkPolicyPort, peers [][]networkingv1.NetworkPolicyPeer) {
		for i := range ports {
			rp := sp.Child(kind).Index(i)
			for j := range ports[i] {
				errs = append(errs, validateNetworkPolicyPort(&ports[i][j], rp.Child("ports").Index(j))...)
			}
			for j := range peers[i] {
				errs = append(errs, validateNetworkPolicyPeer(&peers[i][j], rp.Child(peerKind).Index(j))...)
			}
		}
	}
	var inPorts, outPorts [][]networkingv1.NetworkPolicyPort
	var inPeers, outPeers [][]networkingv1.NetworkPolicyPeer
	for _, r := range s.Ingress {
		inPorts, inPeers = append(inPorts, r.Ports), append(inPeers, r.From)
	}
	for _, r := range s.Egress {
		outPorts, outPeers = append(outPorts, r.Ports), append(outPeers, r.To)
	}
	rules("ingress", "from", inPorts, inPeers)
	rules("egress", "to", outPorts, outPeers)
	tp := sp.Child("policyTypes")
	if len(s.PolicyTypes) > 2 {
		return append(errs, field.Invalid(tp, &s.PolicyTypes, "may not specify more than two policyTypes"))
	}
	for i, t := range s.PolicyTypes {
		errs = append(errs, listed(t, tp.Index(i), networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)...)
	}
	return errs
}

func validateNetworkPolicyPort(port *networkingv1.NetworkPolicyPort, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if port.Protocol != nil {
		errs = append(errs, listed(*port.Protocol, p.Child("protocol"), corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)...)
	}
	switch {
	case port.Port == nil:
		if port.EndPort != nil {
			errs = append(errs, field.Invalid(p.Child("endPort"), *port.EndPort, "may not be specified when `port` is not specified"))
		}
	case port.Port.Type == 0: // a number
		errs = append(errs, portNum(port.Port.IntVal, p.Child("port"))...)
		if port.EndPort != nil {
			if *port.EndPort < port.Port.IntVal {
				errs = append(errs, field.Invalid(p.Child("endPort"), port.Port.IntVal, "must be greater than or equal to `port`"))
			}
			errs = append(errs, portNum(*port.EndPort, p.Child("endPort"))...)
		}
	default:
		if port.EndPort != nil {
			errs = append(errs, field.Invalid(p.Child("endPort"), *port.EndPort, "may not be specified when `port` is non-numeric"))
		}
		errs = append(errs, msgs(p.Child("port"), port.Port.StrVal, validation.IsValidPortName(port.Port.StrVal))...)
	}
	return errs
}

func validateNetworkPolicyPeer(peer *networkingv1.NetworkPolicyPeer, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	opts := metav1validation.LabelSelectorValidationOptions{}
	if peer.PodSelector != nil {
		n++
		errs = append(errs, metav1validation.ValidateLabelSelector(peer.PodSelector, opts, p.Child("podSelector"))...)
	}
	if peer.NamespaceSelector != nil {
		n++
		errs = append(errs, metav1validation.ValidateLabelSelector(peer.NamespaceSelector, opts, p.Child("namespaceSelector"))...)
	}
	if b := peer.IPBlock; b != nil {
		n++
		errs = append(errs, validateIPBlock(b, p.Child("ipBlock"))...)
	}
	switch {
	case n == 0:
		errs = append(errs, field.Required(p, "must specify a peer"))
	case n > 1 && peer.IPBlock != nil:
		errs = append(errs, field.Forbidden(p, "may not specify both ipBlock and another peer"))
	}
	return errs
}

func validateIPBlock(b *networkingv1.IPBlock, p *field.Path) field.ErrorList {
	if b.CIDR == "" {
		return field.ErrorList{field.Required(p.Child("cidr"), "")}
	}
	errs := validation.IsValidCIDR(p.Child("cidr"), b.CIDR)
	_, outer, err := net.ParseCIDR(b.CIDR)
	if err != nil {
		return errs
	}
	outerBits, _ := outer.Mask.Size()
	for i, e := range b.Except {
		ep := p.Child("except").Index(i)
		errs = append(errs, validation.IsValidCIDR(ep, e)...)
		_, inner, err := net.ParseCIDR(e)
		if err != nil {
			continue
		}
		innerBits, _ := inner.Mask.Size()
		if !outer.Contains(inner.IP) || outerBits >= innerBits {
			errs = append(errs, field.Invalid(ep, e, "must be a strict subset of `cidr`"))
		}
	}
	return errs
}

var serviceCIDRs = &Def[*networkingv1.ServiceCIDR]{
	Info: Info{GroupVersion: networkingV1, Resource: "servicecidrs", Singular: "servicecidr", Kind: "ServiceCIDR",
		Status: true},
	NewList:      func() runtime.Object { return &networkingv1.ServiceCIDRList{} },
	NoGeneration: true,
	Validate: func(c *networkingv1.ServiceCIDR) field.ErrorList {
		return validateServiceCIDRs(c.Spec.CIDRs, field.NewPath("spec", "cidrs"))
	},
	ValidateUpdate: validateServiceCIDRUpdate,
	Columns: columns(
		Column("CIDRs", "string", 0, "The ranges service ClusterIPs are drawn from."),
		AgeColumn,
	),
	Row: func(c *networkingv1.ServiceCIDR) []any {
		return []any{strings.Join(c.Spec.CIDRs, ","), Age(c.CreationTimestamp)}
	},
}

func validateServiceCIDRs(cidrs []string, p *field.Path) field.ErrorList {
	switch {
	case len(cidrs) == 0:
		return field.ErrorList{field.Required(p, "at least one CIDR required")}
	case len(cidrs) > 2:
		return field.ErrorList{field.Invalid(p, cidrs, "may only hold up to 2 values")}
	}
	var errs field.ErrorList
	for i, c := range cidrs {
		errs = append(errs, validation.IsValidCIDR(p.Index(i), c)...)
	}
	if len(errs) == 0 && len(cidrs) == 2 && isIPv4CIDR(cidrs[0]) == isIPv4CIDR(cidrs[1]) {
		errs = append(errs, field.Invalid(p, cidrs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
	}
	return errs
}

func isIPv4CIDR(c string) bool {
	ip, _, err := net.ParseCIDR(c)
	return err == nil && ip.To4() != nil
}

// validateServiceCIDRUpdate: the ranges stay; a single-stack range may gain its other family.
func validateServiceCIDRUpdate(c, old *networkingv1.ServiceCIDR) field.ErrorList {
	p := field.NewPath("spec", "cidrs")
	now, was := c.Spec.CIDRs, old.Spec.CIDRs
	var errs field.ErrorList
	switch {
	case len(now) == len(was):
		for i := range was {
			if now[i] != was[i] {
				errs = append(errs, immutable(now[i], p.Index(i))...)
			}
		}
	case len(was) == 1 && len(now) == 2:
		if now[0] != was[0] {
			errs = append(errs, immutable(now[0], p.Index(0))...)
		}
	default:
		errs = append(errs, immutable(now, p)...)
	}
	return errs
}

var ipAddresses = &Def[*networkingv1.IPAddress]{
	Info: Info{GroupVersion: networkingV1, Resource: "ipaddresses", Singular: "ipaddress", Kind: "IPAddress",
		ShortNames: []string{"ip"}},
	NewList:        func() runtime.Object { return &networkingv1.IPAddressList{} },
	NoGeneration:   true,
	NameValidation: ipAddressName,
	Validate:       validateIPAddress,
	ValidateUpdate: func(a, old *networkingv1.IPAddress) field.ErrorList {
		if deref(a.Spec.ParentRef) != deref(old.Spec.ParentRef) {
			return immutable(a.Spec.ParentRef, field.NewPath("spec", "parentRef"))
		}
		return nil
	},
	// No AGE: Kubernetes' table for IPAddresses defines only these two columns.
	Columns: columns(Column("ParentRef", "string", 0, "The object the address is allocated to.")),
	Row: func(a *networkingv1.IPAddress) []any {
		ref := ""
		if r := a.Spec.ParentRef; r != nil {
			ref = r.Resource
			if r.Group != "" {
				ref += "." + r.Group
			}
			if r.Namespace != "" {
				ref += "/" + r.Namespace
			}
			ref += "/" + r.Name
		}
		return []any{ref}
	},
}

// ipAddressName: an IPAddress is named by its address, in canonical form.
func ipAddressName(name string, _ bool) []string {
	var out []string
	for _, e := range validation.IsValidIP(field.NewPath(""), name) {
		out = append(out, e.Detail)
	}
	return out
}

func validateIPAddress(a *networkingv1.IPAddress) field.ErrorList {
	p := field.NewPath("spec", "parentRef")
	r := a.Spec.ParentRef
	if r == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	if r.Group != "" {
		errs = append(errs, dnsSubdomain(r.Group, p.Child("group"))...)
	}
	errs = append(errs, requiredPathSegment(r.Resource, p.Child("resource"))...)
	errs = append(errs, requiredPathSegment(r.Name, p.Child("name"))...)
	if r.Namespace != "" {
		errs = append(errs, msgs(p.Child("namespace"), r.Namespace, content.IsPathSegmentName(r.Namespace))...)
	}
	return errs
}
