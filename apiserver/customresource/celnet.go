package customresource

import (
	"fmt"
	"net/netip"
	"net/url"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Kubernetes' URL, IP and CIDR libraries: the CEL type names, function and overload names,
// results and error messages are Kubernetes', so that a rule written for kube-apiserver
// answers the same here.

// urlType is Kubernetes' kubernetes.URL.
var urlType = cel.ObjectType("kubernetes.URL")

type urlValue struct{ u *url.URL }

func (v urlValue) ConvertToNative(t reflect.Type) (any, error) {
	switch {
	case reflect.TypeOf(v.u).AssignableTo(t):
		return v.u, nil
	case reflect.TypeOf("").AssignableTo(t):
		return v.u.String(), nil
	}
	return nil, fmt.Errorf("type conversion error from 'URL' to '%v'", t)
}

func (v urlValue) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case urlType:
		return v
	case types.TypeType:
		return urlType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", urlType, t)
}

func (v urlValue) Equal(other ref.Val) ref.Val {
	o, ok := other.(urlValue)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(v.u.String() == o.u.String())
}

func (v urlValue) Type() ref.Type { return urlType }
func (v urlValue) Value() any     { return v.u }

// kubeURLs: url(s), isURL(s) and the URL getters. A URL must be absolute or an absolute
// path (url.ParseRequestURI), as in Kubernetes.
type kubeURLs struct{}

func (kubeURLs) LibraryName() string { return "kplane.urls" }

func (kubeURLs) CompileOptions() []cel.EnvOption {
	getter := func(name, overload string, out *cel.Type, get func(*url.URL) ref.Val) cel.EnvOption {
		return cel.Function(name, cel.MemberOverload(overload, []*cel.Type{urlType}, out, cel.UnaryBinding(func(v ref.Val) ref.Val {
			u, ok := v.(urlValue)
			if !ok {
				return types.MaybeNoSuchOverloadErr(v)
			}
			return get(u.u)
		})))
	}
	str := func(f func(*url.URL) string) func(*url.URL) ref.Val {
		return func(u *url.URL) ref.Val { return types.String(f(u)) }
	}
	return []cel.EnvOption{
		cel.Function("url", cel.Overload("string_to_url", []*cel.Type{cel.StringType}, urlType, cel.UnaryBinding(func(v ref.Val) ref.Val {
			s, ok := v.(types.String)
			if !ok {
				return types.MaybeNoSuchOverloadErr(v)
			}
			if _, err := url.ParseRequestURI(string(s)); err != nil {
				return types.NewErr("URL parse error during conversion from string: %v", err)
			}
			// ParseRequestURI keeps a fragment in the path; the value holds it as a URL does.
			u, err := url.Parse(string(s))
			if err != nil {
				return types.NewErr("URL parse error during conversion from string: %v", err)
			}
			return urlValue{u}
		}))),
		cel.Function("isURL", cel.Overload("is_url_string", []*cel.Type{cel.StringType}, cel.BoolType, cel.UnaryBinding(func(v ref.Val) ref.Val {
			s, ok := v.(types.String)
			if !ok {
				return types.MaybeNoSuchOverloadErr(v)
			}
			_, err := url.ParseRequestURI(string(s))
			return types.Bool(err == nil)
		}))),
		getter("getScheme", "url_get_scheme", cel.StringType, str(func(u *url.URL) string { return u.Scheme })),
		getter("getHost", "url_get_host", cel.StringType, str(func(u *url.URL) string { return u.Host })),
		getter("getHostname", "url_get_hostname", cel.StringType, str((*url.URL).Hostname)),
		getter("getPort", "url_get_port", cel.StringType, str((*url.URL).Port)),
		getter("getEscapedPath", "url_get_escaped_path", cel.StringType, str((*url.URL).EscapedPath)),
		getter("getQuery", "url_get_query", cel.MapType(cel.StringType, cel.ListType(cel.StringType)), func(u *url.URL) ref.Val {
			q := map[ref.Val]ref.Val{}
			for k, vs := range u.Query() {
				q[types.String(k)] = types.NewStringList(types.DefaultTypeAdapter, vs)
			}
			return types.NewRefValMap(types.DefaultTypeAdapter, q)
		}),
	}
}

func (kubeURLs) ProgramOptions() []cel.ProgramOption { return nil }

// ipType and cidrType are Kubernetes' opaque net.IP and net.CIDR.
var (
	ipType   = cel.OpaqueType("net.IP")
	cidrType = cel.OpaqueType("net.CIDR")
)

// netValue is a value of Kubernetes' opaque net types: an IP address (ipValue) or a CIDR
// (cidrValue).
type netValue[T interface {
	comparable
	String() string
}] struct {
	v   T
	typ *cel.Type
	// name is the type's name in conversion errors ("IP", "CIDR"); size is its length in
	// bytes as Kubernetes counts it (the address's, or the prefix's), for costs.
	name string
	size int
}

type (
	ipValue   = netValue[netip.Addr]
	cidrValue = netValue[netip.Prefix]
)

func newIP(a netip.Addr) ipValue {
	return ipValue{v: a, typ: ipType, name: "IP", size: (a.BitLen() + 7) / 8}
}

func newCIDR(p netip.Prefix) cidrValue {
	return cidrValue{v: p, typ: cidrType, name: "CIDR", size: (p.Bits() + 7) / 8}
}

func (n netValue[T]) ConvertToNative(t reflect.Type) (any, error) {
	switch {
	case reflect.TypeOf(n.v).AssignableTo(t):
		return n.v, nil
	case reflect.TypeOf("").AssignableTo(t):
		return n.v.String(), nil
	}
	return nil, fmt.Errorf("type conversion error from '%s' to '%v'", n.name, t)
}

func (n netValue[T]) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case n.typ:
		return n
	case types.TypeType:
		return n.typ
	case types.StringType:
		return types.String(n.v.String())
	}
	return types.NewErr("type conversion error from '%s' to '%s'", n.typ, t)
}

func (n netValue[T]) Equal(other ref.Val) ref.Val {
	o, ok := other.(netValue[T])
	if !ok {
		return types.ValOrErr(other, "no such overload")
	}
	return types.Bool(n.v == o.v)
}

func (n netValue[T]) Type() ref.Type { return n.typ }
func (n netValue[T]) Value() any     { return n.v }
func (n netValue[T]) Size() ref.Val  { return types.Int(n.size) }

// parseIP reads an address as Kubernetes' IP library does: no zone, no IPv4-mapped IPv6.
func parseIP(s string) (netip.Addr, error) {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("IP Address %q parse error during conversion from string: %v", s, err)
	}
	if addr.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("IP address %q with zone value is not allowed", s)
	}
	if addr.Is4In6() {
		return netip.Addr{}, fmt.Errorf("IPv4-mapped IPv6 address %q is not allowed", s)
	}
	return addr, nil
}

// parseCIDR reads a prefix as Kubernetes' CIDR library does (its message names the parse
// error twice when cidr() reports it, as Kubernetes' does).
func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("network address parse error during conversion from string: %v", err)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("IPv4-mapped IPv6 address %q is not allowed", s)
	}
	return p, nil
}

// stringTo converts a string argument to a value with parse, and reports a parse error
// after errPrefix.
func stringTo[T any](parse func(string) (T, error), wrap func(T) ref.Val, errPrefix string) func(ref.Val) ref.Val {
	return func(v ref.Val) ref.Val {
		s, ok := v.(types.String)
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		x, err := parse(string(s))
		if err != nil {
			return types.NewErr("%s%v", errPrefix, err)
		}
		return wrap(x)
	}
}

var (
	stringToIP   = stringTo(parseIP, func(a netip.Addr) ref.Val { return newIP(a) }, "")
	stringToCIDR = stringTo(parseCIDR, func(p netip.Prefix) ref.Val { return newCIDR(p) }, "network address parse error during conversion from string: ")
)

// netOf binds a function of an IP's address or a CIDR's prefix.
func netOf[T interface {
	comparable
	String() string
}](f func(T) ref.Val) cel.OverloadOpt {
	return cel.UnaryBinding(func(v ref.Val) ref.Val {
		n, ok := v.(netValue[T])
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		return f(n.v)
	})
}

// stringPredicate binds a bool function of a string that reports a parse failure as false.
func stringPredicate(parse func(string) error) cel.OverloadOpt {
	return cel.UnaryBinding(func(v ref.Val) ref.Val {
		s, ok := v.(types.String)
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		return types.Bool(parse(string(s)) == nil)
	})
}

// kubeIP: ip(s), isIP(s), ip.isCanonical(s), string(ip) and the IP methods.
type kubeIP struct{}

func (kubeIP) LibraryName() string { return "kplane.net.ip" }

func (kubeIP) CompileOptions() []cel.EnvOption {
	ip1 := []*cel.Type{ipType}
	is := func(name, overload string, f func(netip.Addr) bool) cel.EnvOption {
		return cel.Function(name, cel.MemberOverload(overload, ip1, cel.BoolType, netOf(func(a netip.Addr) ref.Val { return types.Bool(f(a)) })))
	}
	return []cel.EnvOption{
		cel.Types(ipType),
		cel.Function("ip", cel.Overload("string_to_ip", []*cel.Type{cel.StringType}, ipType, cel.UnaryBinding(stringToIP))),
		cel.Function("isIP", cel.Overload("is_ip", []*cel.Type{cel.StringType}, cel.BoolType,
			stringPredicate(func(s string) error { _, err := parseIP(s); return err }))),
		cel.Function("ip.isCanonical", cel.Overload("ip_is_canonical", []*cel.Type{cel.StringType}, cel.BoolType, cel.UnaryBinding(func(v ref.Val) ref.Val {
			s, ok := v.(types.String)
			if !ok {
				return types.MaybeNoSuchOverloadErr(v)
			}
			addr, err := parseIP(string(s))
			if err != nil {
				return types.NewErr("%v", err)
			}
			return types.Bool(addr.String() == string(s))
		}))),
		cel.Function("string", cel.Overload("ip_to_string", ip1, cel.StringType, netOf(func(a netip.Addr) ref.Val { return types.String(a.String()) }))),
		cel.Function("family", cel.MemberOverload("ip_family", ip1, cel.IntType, netOf(func(a netip.Addr) ref.Val {
			switch {
			case a.Is4():
				return types.Int(4)
			case a.Is6():
				return types.Int(6)
			}
			return types.NewErr("IP address %q is not an IPv4 or IPv6 address", a.String())
		}))),
		is("isUnspecified", "ip_is_unspecified", netip.Addr.IsUnspecified),
		is("isLoopback", "ip_is_loopback", netip.Addr.IsLoopback),
		is("isLinkLocalMulticast", "ip_is_link_local_multicast", netip.Addr.IsLinkLocalMulticast),
		is("isLinkLocalUnicast", "ip_is_link_local_unicast", netip.Addr.IsLinkLocalUnicast),
		is("isGlobalUnicast", "ip_is_global_unicast", netip.Addr.IsGlobalUnicast),
	}
}

func (kubeIP) ProgramOptions() []cel.ProgramOption { return nil }

// kubeCIDR: cidr(s), isCIDR(s), string(cidr) and the CIDR methods.
type kubeCIDR struct{}

func (kubeCIDR) LibraryName() string { return "kplane.net.cidr" }

func (kubeCIDR) CompileOptions() []cel.EnvOption {
	c1 := []*cel.Type{cidrType}
	containsIP := func(c, ip ref.Val) ref.Val {
		// Kubernetes reports an address that did not parse as "no such overload", not as
		// the parse error; so does this.
		cv, ok := c.(cidrValue)
		if !ok {
			return types.MaybeNoSuchOverloadErr(ip)
		}
		iv, ok := ip.(ipValue)
		if !ok {
			return types.MaybeNoSuchOverloadErr(c)
		}
		return types.Bool(cv.v.Contains(iv.v))
	}
	containsCIDR := func(c, other ref.Val) ref.Val {
		cv, ok := c.(cidrValue)
		if !ok {
			return types.MaybeNoSuchOverloadErr(c)
		}
		ov, ok := other.(cidrValue)
		if !ok {
			return types.MaybeNoSuchOverloadErr(other)
		}
		return types.Bool(cv.v.Overlaps(ov.v) && cv.v.Bits() <= ov.v.Bits())
	}
	return []cel.EnvOption{
		cel.Types(cidrType),
		cel.Function("cidr", cel.Overload("string_to_cidr", []*cel.Type{cel.StringType}, cidrType, cel.UnaryBinding(stringToCIDR))),
		cel.Function("isCIDR", cel.Overload("is_cidr", []*cel.Type{cel.StringType}, cel.BoolType,
			stringPredicate(func(s string) error { _, err := parseCIDR(s); return err }))),
		cel.Function("string", cel.Overload("cidr_to_string", c1, cel.StringType, netOf(func(p netip.Prefix) ref.Val { return types.String(p.String()) }))),
		cel.Function("containsIP",
			cel.MemberOverload("cidr_contains_ip_string", []*cel.Type{cidrType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(func(c, s ref.Val) ref.Val { return containsIP(c, stringToIP(s)) })),
			cel.MemberOverload("cidr_contains_ip_ip", []*cel.Type{cidrType, ipType}, cel.BoolType, cel.BinaryBinding(containsIP))),
		cel.Function("containsCIDR",
			cel.MemberOverload("cidr_contains_cidr_string", []*cel.Type{cidrType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(func(c, s ref.Val) ref.Val { return containsCIDR(c, stringToCIDR(s)) })),
			cel.MemberOverload("cidr_contains_cidr", []*cel.Type{cidrType, cidrType}, cel.BoolType, cel.BinaryBinding(containsCIDR))),
		cel.Function("ip", cel.MemberOverload("cidr_ip", c1, ipType, netOf(func(p netip.Prefix) ref.Val { return newIP(p.Addr()) }))),
		cel.Function("prefixLength", cel.MemberOverload("cidr_prefix_length", c1, cel.IntType, netOf(func(p netip.Prefix) ref.Val { return types.Int(p.Bits()) }))),
		cel.Function("masked", cel.MemberOverload("cidr_masked", c1, cidrType, netOf(func(p netip.Prefix) ref.Val { return newCIDR(p.Masked()) }))),
	}
}

func (kubeCIDR) ProgramOptions() []cel.ProgramOption { return nil }
