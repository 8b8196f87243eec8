package registry

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var endpoints = &Def[*corev1.Endpoints]{
	Info: Info{GroupVersion: coreV1, Resource: "endpoints", Singular: "endpoints", Kind: "Endpoints",
		ShortNames: []string{"ep"}, Namespaced: true},
	NewList: func() runtime.Object { return &corev1.EndpointsList{} },
	Defaults: func(e *corev1.Endpoints) {
		for i := range e.Subsets {
			for j := range e.Subsets[i].Ports {
				e.Subsets[i].Ports[j].Protocol = or(e.Subsets[i].Ports[j].Protocol, corev1.ProtocolTCP)
			}
		}
	},
	Validate: validateEndpoints,
	Columns:  columns(Column("Endpoints", "string", 0, "The addresses of the service's ready endpoints."), AgeColumn),
	Row: func(e *corev1.Endpoints) []any {
		return []any{formatEndpoints(e), Age(e.CreationTimestamp)}
	},
}

func validateEndpoints(e *corev1.Endpoints) field.ErrorList {
	var errs field.ErrorList
	for i, ss := range e.Subsets {
		sp := field.NewPath("subsets").Index(i)
		for _, list := range []struct {
			name  string
			addrs []corev1.EndpointAddress
		}{{"addresses", ss.Addresses}, {"notReadyAddresses", ss.NotReadyAddresses}} {
			for j, a := range list.addrs {
				ap := sp.Child(list.name).Index(j)
				errs = append(errs, ipAddr(a.IP, ap.Child("ip"))...)
				if a.Hostname != "" {
					errs = append(errs, dnsLabel(a.Hostname, ap.Child("hostname"))...)
				}
				if a.NodeName != nil {
					errs = append(errs, dnsSubdomain(*a.NodeName, ap.Child("nodeName"))...)
				}
			}
		}
		names := map[string]bool{}
		for j, port := range ss.Ports {
			pp := sp.Child("ports").Index(j)
			if port.Name == "" && len(ss.Ports) > 1 {
				errs = append(errs, field.Required(pp.Child("name"), ""))
			} else if port.Name != "" {
				errs = append(errs, dnsLabel(port.Name, pp.Child("name"))...)
				errs = append(errs, unique(names, port.Name, pp.Child("name"), port.Name)...)
			}
			errs = append(errs, portNum(port.Port, pp.Child("port"))...)
			errs = append(errs, protocol(port.Protocol, pp.Child("protocol"))...)
		}
	}
	return errs
}

// formatEndpoints lists the first three ready address:port pairs, as kubectl does.
func formatEndpoints(e *corev1.Endpoints) string {
	var list []string
	count := 0
	add := func(s string) {
		if count++; len(list) < 3 {
			list = append(list, s)
		}
	}
	for _, ss := range e.Subsets {
		if len(ss.Ports) == 0 { // a headless service may have no ports
			for _, a := range ss.Addresses {
				add(a.IP)
			}
		}
		for _, p := range ss.Ports {
			for _, a := range ss.Addresses {
				add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	if len(e.Subsets) == 0 {
		return "<none>"
	}
	return moreList(list, count, "")
}

// moreList joins the shown items, noting how many were left out; empty gives def.
func moreList(list []string, count int, def string) string {
	s := strings.Join(list, ",")
	if count > len(list) {
		return fmt.Sprintf("%s + %d more...", s, count-len(list))
	}
	return or(s, def)
}

var endpointSlices = &Def[*discoveryv1.EndpointSlice]{
	Info: Info{GroupVersion: discoveryv1.SchemeGroupVersion, Resource: "endpointslices", Singular: "endpointslice",
		Kind: "EndpointSlice", Namespaced: true},
	NewList: func() runtime.Object { return &discoveryv1.EndpointSliceList{} },
	Defaults: func(s *discoveryv1.EndpointSlice) {
		for i := range s.Ports {
			if s.Ports[i].Name == nil {
				s.Ports[i].Name = new("")
			}
			if s.Ports[i].Protocol == nil {
				s.Ports[i].Protocol = new(corev1.ProtocolTCP)
			}
		}
	},
	Validate: validateEndpointSlice,
	// As in Kubernetes: the generation counts changes of endpoints, ports and labels, so
	// that controllers can tell a stale cached slice from the one they wrote.
	SpecChanged: func(s, old *discoveryv1.EndpointSlice) bool {
		return !apiequality.Semantic.DeepEqual(s.Endpoints, old.Endpoints) || !apiequality.Semantic.DeepEqual(s.Ports, old.Ports) ||
			s.AddressType != old.AddressType || !maps.Equal(s.Labels, old.Labels)
	},
	ValidateUpdate: func(s, old *discoveryv1.EndpointSlice) field.ErrorList {
		if s.AddressType != old.AddressType {
			return immutable(s.AddressType, field.NewPath("addressType"))
		}
		return nil
	},
	Columns: columns(
		Column("AddressType", "string", 0, "The type of the addresses in the slice."),
		Column("Ports", "string", 0, "The ports of the slice."),
		Column("Endpoints", "string", 0, "The addresses of the slice's endpoints."),
		AgeColumn,
	),
	Row: endpointSliceRow,
}

func validateEndpointSlice(s *discoveryv1.EndpointSlice) field.ErrorList {
	errs := oneOf(s.AddressType, field.NewPath("addressType"), discoveryv1.AddressTypeFQDN, discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6)
	if len(s.Endpoints) > 1000 {
		errs = append(errs, field.TooMany(field.NewPath("endpoints"), len(s.Endpoints), 1000))
	}
	for i, e := range s.Endpoints {
		ep := field.NewPath("endpoints").Index(i)
		ap := ep.Child("addresses")
		switch {
		case len(e.Addresses) == 0:
			errs = append(errs, field.Required(ap, "must contain at least 1 address"))
		case len(e.Addresses) > 100:
			errs = append(errs, field.TooMany(ap, len(e.Addresses), 100))
		}
		for j, a := range e.Addresses {
			switch s.AddressType {
			case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
				if ipErrs := ipAddr(a, ap.Index(j)); len(ipErrs) > 0 {
					errs = append(errs, ipErrs...)
				} else if addr := netip.MustParseAddr(a); addr.Is4() != (s.AddressType == discoveryv1.AddressTypeIPv4) {
					errs = append(errs, field.Invalid(ap, a, fmt.Sprintf("must be an %s address", s.AddressType)))
				}
			case discoveryv1.AddressTypeFQDN:
				errs = append(errs, validation.IsFullyQualifiedDomainName(ap.Index(j), a)...)
			}
		}
		if e.NodeName != nil {
			errs = append(errs, dnsSubdomain(*e.NodeName, ep.Child("nodeName"))...)
		}
		if e.Hostname != nil {
			errs = append(errs, dnsLabel(*e.Hostname, ep.Child("hostname"))...)
		}
	}
	names := map[string]bool{}
	for i, p := range s.Ports {
		pp := field.NewPath("ports").Index(i)
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != "" {
			errs = append(errs, dnsLabel(name, pp.Child("name"))...)
		}
		errs = append(errs, unique(names, name, pp.Child("name"), name)...)
		if p.Protocol == nil {
			errs = append(errs, field.Required(pp.Child("protocol"), ""))
		} else {
			errs = append(errs, protocol(*p.Protocol, pp.Child("protocol"))...)
		}
	}
	return errs
}

func endpointSliceRow(s *discoveryv1.EndpointSlice) []any {
	var ports, addrs []string
	for _, p := range s.Ports {
		switch {
		case len(ports) == 3:
		case p.Port != nil:
			ports = append(ports, strconv.Itoa(int(*p.Port)))
		case p.Name != nil:
			ports = append(ports, *p.Name)
		default:
			ports = append(ports, "*")
		}
	}
	count := 0
	for _, e := range s.Endpoints {
		for _, a := range e.Addresses {
			if count++; len(addrs) < 3 {
				addrs = append(addrs, a)
			}
		}
	}
	return []any{string(s.AddressType), moreList(ports, len(s.Ports), "<unset>"), moreList(addrs, count, "<unset>"), Age(s.CreationTimestamp)}
}
