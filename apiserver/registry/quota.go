package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kplane/kplane/internal/limitrange"
	"github.com/kplane/kplane/internal/quota"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// core/v1 ResourceQuotas and LimitRanges: a namespace's policies on what its objects may use.
// A quota's spec.hard caps the namespace's usage (summed over its objects, within the quota's
// scopes); the resource quota controller writes what it enforces (status.hard) and what is
// used (status.used), and the apiserver's quota admission charges every write to it. A
// LimitRange bounds and defaults each container, pod and claim on its own; its admission is
// here (LimitRanger), quota admission is the apiserver's (it applies to every resource).

var (
	limitRangesResource = schema.GroupResource{Resource: "limitranges"}
	podsResource        = schema.GroupResource{Resource: "pods"}
	claimsResource      = schema.GroupResource{Resource: "persistentvolumeclaims"}
)

var resourceQuotas = &Def[*corev1.ResourceQuota]{
	Info: Info{GroupVersion: coreV1, Resource: "resourcequotas", Singular: "resourcequota", Kind: "ResourceQuota",
		ShortNames: []string{"quota"}, Namespaced: true, Status: true},
	NewList: func() runtime.Object { return &corev1.ResourceQuotaList{} },
	Validate: func(q *corev1.ResourceQuota) field.ErrorList {
		errs := validateQuotaSpec(&q.Spec, specPath)
		return append(errs, validateQuotaStatus(&q.Status, field.NewPath("status"))...)
	},
	ValidateUpdate: func(q, old *corev1.ResourceQuota) field.ErrorList {
		// What a quota's scopes select decides what its usage counts: they cannot change.
		now, was := slices.Clone(q.Spec.Scopes), slices.Clone(old.Spec.Scopes)
		slices.Sort(now)
		slices.Sort(was)
		if !slices.Equal(slices.Compact(now), slices.Compact(was)) {
			return immutable(q.Spec.Scopes, specPath.Child("scopes"))
		}
		return nil
	},
	Columns: columns(
		Column("Request", "string", 0, "Request represents a minimum amount of cpu/memory that a container may consume."),
		Column("Limit", "string", 0, "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
		AgeColumn,
	),
	Row: quotaRow,
}

// quotaRow renders "name: used/hard" for every resource the quota enforces, the limits.*
// ones under LIMIT and the rest under REQUEST, as kubectl get quota shows them.
func quotaRow(q *corev1.ResourceQuota) []any {
	var requests, limits []string
	for _, name := range quota.Names(q.Status.Hard) {
		used, hard := q.Status.Used[name], q.Status.Hard[name]
		cell := fmt.Sprintf("%s: %s/%s", name, used.String(), hard.String())
		if first, _, dotted := strings.Cut(string(name), "."); dotted && first == "limits" {
			limits = append(limits, cell)
		} else {
			requests = append(requests, cell)
		}
	}
	return []any{strings.Join(requests, ", "), strings.Join(limits, ", "), Age(q.CreationTimestamp)}
}

var limitRanges = &Def[*corev1.LimitRange]{
	Info: Info{GroupVersion: coreV1, Resource: "limitranges", Singular: "limitrange", Kind: "LimitRange",
		ShortNames: []string{"limits"}, Namespaced: true},
	NewList: func() runtime.Object { return &corev1.LimitRangeList{} },
	Defaults: func(lr *corev1.LimitRange) {
		for i := range lr.Spec.Limits {
			limitrange.DefaultItem(&lr.Spec.Limits[i])
		}
	},
	Create: func(lr *corev1.LimitRange) {
		// Kubernetes names a LimitRange created without a name.
		if lr.Name == "" {
			lr.Name = string(uuid.NewUUID())
		}
	},
	Validate: validateLimitRange,
	// Kubernetes has no printer for LimitRanges: kubectl shows its default columns.
	Columns: columns(Column("Created At", "date", 0, "CreationTimestamp is a timestamp representing the server time when this object was created.")),
	Row: func(lr *corev1.LimitRange) []any {
		return []any{lr.CreationTimestamp.UTC().Format(time.RFC3339)}
	},
}

// Validation.

const (
	notStandardQuotaResource = "must be a standard resource for quota"
	notInteger               = "must be an integer"
	negative                 = "must be greater than or equal to 0"
)

// validateResourceName checks a resource name: a qualified name, and a known one unless it
// is qualified by a domain.
func validateResourceName(name corev1.ResourceName, p *field.Path) field.ErrorList {
	if errs := msgs(p, name, validation.IsQualifiedName(string(name))); len(errs) > 0 {
		return errs
	}
	if !strings.Contains(string(name), "/") && !quota.IsStandardResource(name) {
		return field.ErrorList{field.Invalid(p, name, "must be a standard resource type or fully qualified")}
	}
	return nil
}

func validateQuotaResourceName(name corev1.ResourceName, p *field.Path) field.ErrorList {
	errs := validateResourceName(name, p)
	if !strings.Contains(string(name), "/") && !quota.IsStandardQuotaResource(name) {
		errs = append(errs, field.Invalid(p, name, notStandardQuotaResource))
	}
	return errs
}

// validateQuotaQuantity: never negative, and whole for what is counted in units.
func validateQuotaQuantity(name corev1.ResourceName, q resource.Quantity, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if q.Sign() < 0 {
		errs = append(errs, field.Invalid(p, q.String(), negative))
	}
	if quota.IsInteger(name) && q.MilliValue()%1000 != 0 {
		errs = append(errs, field.Invalid(p, q, notInteger))
	}
	return errs
}

func validateQuotaList(l corev1.ResourceList, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, name := range quota.Names(l) {
		np := p.Key(string(name))
		errs = append(errs, validateQuotaResourceName(name, np)...)
		errs = append(errs, validateQuotaQuantity(name, l[name], np)...)
	}
	return errs
}

func validateQuotaStatus(s *corev1.ResourceQuotaStatus, p *field.Path) field.ErrorList {
	return append(validateQuotaList(s.Hard, p.Child("hard")), validateQuotaList(s.Used, p.Child("used"))...)
}

// conflictingScopes are the pairs no quota may have both of: no pod is in both.
var conflictingScopes = [][2]corev1.ResourceQuotaScope{
	{corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort},
	{corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating},
}

// existsOnlyScopes are the scopes a selector can only ask for with Exists: they hold or not.
var existsOnlyScopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort,
	corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeCrossNamespacePodAffinity}

// validateQuotaSpec checks the hard limits, then the scopes and the scope selector: each a
// known scope, each able to limit every standard resource the quota names, and no pair that
// excludes each other.
func validateQuotaSpec(s *corev1.ResourceQuotaSpec, p *field.Path) field.ErrorList {
	errs := validateQuotaList(s.Hard, p.Child("hard"))
	hard := quota.Names(s.Hard)
	// unsupportedFor reports a scope that cannot limit one of the standard names in hard.
	unsupportedFor := func(scope corev1.ResourceQuotaScope) bool {
		for _, name := range hard {
			if quota.IsStandardQuotaResource(name) && !quota.ScopeAppliesTo(scope, name) {
				return true
			}
		}
		return false
	}
	// conflicts reports one error for each pair of excluding scopes in seen.
	conflicts := func(seen map[corev1.ResourceQuotaScope]bool, p *field.Path) field.ErrorList {
		var errs field.ErrorList
		for _, pair := range conflictingScopes {
			if seen[pair[0]] && seen[pair[1]] {
				errs = append(errs, field.Invalid(p, s.Scopes, "conflicting scopes"))
			}
		}
		return errs
	}
	if len(s.Scopes) > 0 {
		sp := p.Child("scopes")
		seen := map[corev1.ResourceQuotaScope]bool{}
		for _, scope := range s.Scopes {
			if !quota.IsStandardScope(scope) {
				errs = append(errs, field.Invalid(sp, s.Scopes, "unsupported scope"))
			}
			if unsupportedFor(scope) {
				errs = append(errs, field.Invalid(sp, s.Scopes, "unsupported scope applied to resource"))
			}
			seen[scope] = true
		}
		errs = append(errs, conflicts(seen, sp)...)
	}
	if s.ScopeSelector == nil {
		return errs
	}
	mp := p.Child("scopeSelector", "matchExpressions")
	seen := map[corev1.ResourceQuotaScope]bool{}
	for _, req := range s.ScopeSelector.MatchExpressions {
		if !quota.IsStandardScope(req.ScopeName) {
			errs = append(errs, field.Invalid(mp.Child("scopeName"), req.ScopeName, "unsupported scope"))
		}
		if unsupportedFor(req.ScopeName) {
			errs = append(errs, field.Invalid(mp, s.ScopeSelector, "unsupported scope applied to resource"))
		}
		if slices.Contains(existsOnlyScopes, req.ScopeName) && req.Operator != corev1.ScopeSelectorOpExists {
			errs = append(errs, field.Invalid(mp.Child("operator"), req.Operator,
				"must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"))
		}
		switch req.Operator {
		case corev1.ScopeSelectorOpIn, corev1.ScopeSelectorOpNotIn:
			if len(req.Values) == 0 {
				errs = append(errs, field.Required(mp.Child("values"), "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector"))
			}
		case corev1.ScopeSelectorOpExists, corev1.ScopeSelectorOpDoesNotExist:
			if len(req.Values) != 0 {
				errs = append(errs, field.Invalid(mp.Child("values"), req.Values, "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector"))
			}
		default:
			errs = append(errs, field.Invalid(mp.Child("operator"), req.Operator, "not a valid selector operator"))
		}
		seen[req.ScopeName] = true
	}
	return append(errs, conflicts(seen, mp)...)
}

var limitTypes = []corev1.LimitType{corev1.LimitTypePod, corev1.LimitTypeContainer, corev1.LimitTypePersistentVolumeClaim}

// validateLimitRangeResourceName: pods and containers name compute resources (or extended
// ones); other types any resource.
func validateLimitRangeResourceName(t corev1.LimitType, name corev1.ResourceName, p *field.Path) field.ErrorList {
	errs := validateResourceName(name, p)
	if t != corev1.LimitTypePod && t != corev1.LimitTypeContainer {
		return errs
	}
	switch {
	case !strings.Contains(string(name), "/"):
		if !quota.IsStandardContainerResource(name) {
			errs = append(errs, field.Invalid(p, name, "must be a standard resource for containers"))
		}
	case !quota.IsNative(name) && !quota.IsExtended(name):
		errs = append(errs, field.Invalid(p, name, "doesn't follow extended resource name standard"))
	}
	return errs
}

// validateLimitRange checks each item: a known (or qualified) type, once; resource names its
// type may bound; no defaults for pods; a claim bound on storage; and for every resource
// min <= defaultRequest <= default <= max, a ratio of at least 1 that max/min allows, and
// equal default and defaultRequest where a limit may not exceed the request (hugepages,
// extended resources).
func validateLimitRange(lr *corev1.LimitRange) field.ErrorList {
	var errs field.ErrorList
	lp := specPath.Child("limits")
	seenTypes := map[corev1.LimitType]bool{}
	for i := range lr.Spec.Limits {
		ip := lp.Index(i)
		item := &lr.Spec.Limits[i]
		tp := ip.Child("type")
		if typeErrs := msgs(tp, item.Type, validation.IsQualifiedName(string(item.Type))); len(typeErrs) > 0 {
			errs = append(errs, typeErrs...)
		} else if !strings.Contains(string(item.Type), "/") && !slices.Contains(limitTypes, item.Type) {
			errs = append(errs, field.Invalid(tp, item.Type, "must be a standard limit type or fully qualified"))
		}
		errs = append(errs, unique(seenTypes, item.Type, tp, item.Type)...)

		keys := map[corev1.ResourceName]bool{}
		names := func(l corev1.ResourceList, child string) {
			for _, name := range quota.Names(l) {
				errs = append(errs, validateLimitRangeResourceName(item.Type, name, ip.Child(child).Key(string(name)))...)
				keys[name] = true
			}
		}
		names(item.Max, "max")
		names(item.Min, "min")
		if item.Type == corev1.LimitTypePod {
			if len(item.Default) > 0 {
				errs = append(errs, field.Forbidden(ip.Child("default"), "may not be specified when `type` is 'Pod'"))
			}
			if len(item.DefaultRequest) > 0 {
				errs = append(errs, field.Forbidden(ip.Child("defaultRequest"), "may not be specified when `type` is 'Pod'"))
			}
		} else {
			names(item.Default, "default")
			names(item.DefaultRequest, "defaultRequest")
		}
		if item.Type == corev1.LimitTypePersistentVolumeClaim {
			_, hasMin := item.Min[corev1.ResourceStorage]
			_, hasMax := item.Max[corev1.ResourceStorage]
			if !hasMin && !hasMax {
				errs = append(errs, field.Required(ip.Child("limits"), "either minimum or maximum storage value is required, but neither was provided"))
			}
		}
		names(item.MaxLimitRequestRatio, "maxLimitRequestRatio")

		pod := item.Type == corev1.LimitTypePod
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			key := string(k)
			minQ, hasMin := item.Min[k]
			maxQ, hasMax := item.Max[k]
			def, hasDef := item.Default[k]
			req, hasReq := item.DefaultRequest[k]
			ratio, hasRatio := item.MaxLimitRequestRatio[k]
			hasDef, hasReq = hasDef && !pod, hasReq && !pod
			if hasMin && hasMax && minQ.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(ip.Child("min").Key(key), minQ, fmt.Sprintf("min value %s is greater than max value %s", minQ.String(), maxQ.String())))
			}
			if hasReq && hasMin && minQ.Cmp(req) > 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(key), req, fmt.Sprintf("min value %s is greater than default request value %s", minQ.String(), req.String())))
			}
			if hasReq && hasMax && req.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(key), req, fmt.Sprintf("default request value %s is greater than max value %s", req.String(), maxQ.String())))
			}
			if hasReq && hasDef && req.Cmp(def) > 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(key), req, fmt.Sprintf("default request value %s is greater than default limit value %s", req.String(), def.String())))
			}
			if hasDef && hasMin && minQ.Cmp(def) > 0 {
				errs = append(errs, field.Invalid(ip.Child("default").Key(key), minQ, fmt.Sprintf("min value %s is greater than default value %s", minQ.String(), def.String())))
			}
			if hasDef && hasMax && def.Cmp(maxQ) > 0 {
				errs = append(errs, field.Invalid(ip.Child("default").Key(key), maxQ, fmt.Sprintf("default value %s is greater than max value %s", def.String(), maxQ.String())))
			}
			if hasRatio && ratio.Cmp(*resource.NewQuantity(1, resource.DecimalSI)) < 0 {
				errs = append(errs, field.Invalid(ip.Child("maxLimitRequestRatio").Key(key), ratio, fmt.Sprintf("ratio %s is less than 1", ratio.String())))
			}
			if hasRatio && hasMin && hasMax {
				// The largest ratio a container within [min, max] can have is max/min.
				r, lo, hi := float64(ratio.Value()), minQ.Value(), maxQ.Value()
				if ratio.Value() < resource.MaxMilliValue && lo < resource.MaxMilliValue && hi < resource.MaxMilliValue {
					r, lo, hi = float64(ratio.MilliValue())/1000, minQ.MilliValue(), maxQ.MilliValue()
				}
				if most := float64(hi) / float64(lo); r > most {
					errs = append(errs, field.Invalid(ip.Child("maxLimitRequestRatio").Key(key), ratio, fmt.Sprintf("ratio %s is greater than max/min = %f", ratio.String(), most)))
				}
			}
			if !quota.IsOvercommitAllowed(k) && hasDef && hasReq && def.Cmp(req) != 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(key), req, fmt.Sprintf("default value %s must equal to defaultRequest value %s in %s", def.String(), req.String(), key)))
			}
		}
	}
	return errs
}

// Admission (LimitRanger).

// namespaceLimitRanges returns the LimitRanges of namespace ns.
func namespaceLimitRanges(ctx context.Context, objs Objects, ns string) ([]*corev1.LimitRange, error) {
	all, err := objs.List(ctx, limitRangesResource)
	if err != nil {
		return nil, err
	}
	var out []*corev1.LimitRange
	for _, o := range all {
		if lr := o.(*corev1.LimitRange); lr.Namespace == ns {
			out = append(out, lr)
		}
	}
	return out, nil
}

// limitRangesUnavailable is Kubernetes' refusal when the ranges cannot be read: a write they
// might forbid is not let through unchecked.
func limitRangesUnavailable(gr schema.GroupResource, name, op string) error {
	return apierrors.NewForbidden(gr, name, fmt.Errorf("unable to %s /v1, Resource=%s at this time because there was an error enforcing limit ranges", op, gr.Resource))
}

// admitPodLimitRanges gives a new pod's containers the requests and limits they lack from the
// namespace's LimitRanges (LimitRanger's defaults). It runs after the pod's own defaults (a
// limit without a request is already its request) and before validation, and reclassifies the
// pod's QoS, which the defaults may change.
func admitPodLimitRanges(ctx context.Context, objs Objects, p, old *corev1.Pod) error {
	if old != nil {
		return nil // containers' resources do not change on update
	}
	ranges, err := namespaceLimitRanges(ctx, objs, p.Namespace)
	if err != nil {
		return limitRangesUnavailable(podsResource, p.Name, "CREATE")
	}
	if limitrange.ApplyDefaults(p, ranges) {
		p.Status.QOSClass = qosClass(&p.Spec)
	}
	return nil
}

// CheckLimitRanges refuses (403) a new pod, or a new or changed claim, that breaks a LimitRange
// of its namespace: LimitRanger's validation, which Kubernetes runs after the object's own
// validation and before quota admission. old is nil on create; objects being deleted, and
// every other kind, pass.
func CheckLimitRanges(ctx context.Context, objs Objects, obj, old Object) error {
	if old != nil && old.GetDeletionTimestamp() != nil {
		return nil
	}
	var gr schema.GroupResource
	var check func([]*corev1.LimitRange) error
	switch o := obj.(type) {
	case *corev1.Pod:
		if old != nil {
			return nil
		}
		gr, check = podsResource, func(r []*corev1.LimitRange) error { return limitrange.CheckPod(o, r) }
	case *corev1.PersistentVolumeClaim:
		gr, check = claimsResource, func(r []*corev1.LimitRange) error { return limitrange.CheckClaim(o, r) }
	default:
		return nil
	}
	op := "CREATE"
	if old != nil {
		op = "UPDATE"
	}
	ranges, err := namespaceLimitRanges(ctx, objs, obj.GetNamespace())
	if err != nil {
		return limitRangesUnavailable(gr, obj.GetName(), op)
	}
	if err := check(ranges); err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return err
		}
		return apierrors.NewForbidden(gr, obj.GetName(), err)
	}
	return nil
}
