package registry

import (
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Small field validators shared by the resources. Their messages and error types follow
// Kubernetes' so clients that match on them (kubectl, tests written against real clusters) agree.

// msgs turns the messages of a k8s.io/apimachinery/pkg/util/validation check into Invalid errors.
func msgs(p *field.Path, value any, messages []string) field.ErrorList {
	var errs field.ErrorList
	for _, m := range messages {
		errs = append(errs, field.Invalid(p, value, m))
	}
	return errs
}

func dnsLabel(v string, p *field.Path) field.ErrorList {
	return msgs(p, v, validation.IsDNS1123Label(v))
}

func dnsSubdomain(v string, p *field.Path) field.ErrorList {
	return msgs(p, v, validation.IsDNS1123Subdomain(v))
}

// requiredLabel is dnsLabel with a Required error for the empty name.
func requiredLabel(v string, p *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return dnsLabel(v, p)
}

func portNum(port int32, p *field.Path) field.ErrorList {
	return msgs(p, port, validation.IsValidPortNum(int(port)))
}

// portNumOrName checks a target port: a number 1-65535 or an IANA_SVC_NAME.
func portNumOrName(port intstr.IntOrString, p *field.Path) field.ErrorList {
	if port.Type == intstr.String {
		return msgs(p, port.StrVal, validation.IsValidPortName(port.StrVal))
	}
	return msgs(p, port.IntValue(), validation.IsValidPortNum(port.IntValue()))
}

// oneOf checks an enumerated field: Required when empty, NotSupported when unknown.
func oneOf[T ~string](v T, p *field.Path, allowed ...T) field.ErrorList {
	switch {
	case v == "":
		return field.ErrorList{field.Required(p, "")}
	case !slices.Contains(allowed, v):
		return field.ErrorList{field.NotSupported(p, v, slices.Sorted(slices.Values(allowed)))}
	}
	return nil
}

var protocols = []corev1.Protocol{corev1.ProtocolSCTP, corev1.ProtocolTCP, corev1.ProtocolUDP}

// listed is oneOf for the enums whose supported values Kubernetes lists in its own order.
func listed[T ~string](v T, p *field.Path, allowed ...T) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	if !slices.Contains(allowed, v) {
		return field.ErrorList{field.NotSupported(p, v, allowed)}
	}
	return nil
}

// nonNegativeQty is Kubernetes' check of a quantity that may be zero but not less.
func nonNegativeQty(q resource.Quantity, p *field.Path) field.ErrorList {
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(p, q.String(), negative)}
	}
	return nil
}

func protocol(v corev1.Protocol, p *field.Path) field.ErrorList { return oneOf(v, p, protocols...) }

func nonNegative[N int32 | int64](v N, p *field.Path) field.ErrorList {
	if v < 0 {
		return field.ErrorList{field.Invalid(p, v, "must be greater than or equal to 0")}
	}
	return nil
}

// positive32 checks optional durations that must be at least 1 (activeDeadlineSeconds, lease durations).
func positive32[N int32 | int64](v *N, p *field.Path) field.ErrorList {
	if v != nil && (*v < 1 || int64(*v) > math.MaxInt32) {
		return field.ErrorList{field.Invalid(p, *v, validation.InclusiveRangeError(1, math.MaxInt32))}
	}
	return nil
}

// intOrPercent checks a rolling-update bound and returns its value (a percent counts as its number).
func intOrPercent(v *intstr.IntOrString, p *field.Path) (int, field.ErrorList) {
	if v == nil {
		return 0, nil
	}
	if v.Type == intstr.String {
		if len(validation.IsValidPercent(v.StrVal)) > 0 {
			return 0, field.ErrorList{field.Invalid(p, v.StrVal, "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%')")}
		}
	} else if v.IntVal < 0 {
		return 0, field.ErrorList{field.Invalid(p, v.IntVal, "must be greater than or equal to 0")}
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true)
	if err != nil {
		return 0, field.ErrorList{field.Invalid(p, v.String(), err.Error())}
	}
	return n, nil
}

func immutable(v any, p *field.Path) field.ErrorList {
	return field.ErrorList{field.Invalid(p, v, "field is immutable")}
}

// unique reports the Duplicate error for a key already seen, and remembers it.
func unique[K comparable](seen map[K]bool, k K, p *field.Path, value any) field.ErrorList {
	if seen[k] {
		return field.ErrorList{field.Duplicate(p, value)}
	}
	seen[k] = true
	return nil
}

func ipAddr(v string, p *field.Path) field.ErrorList { return validation.IsValidIP(p, v) }

func ipList(ips []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, ip := range ips {
		errs = append(errs, ipAddr(ip, p.Index(i))...)
	}
	return errs
}
