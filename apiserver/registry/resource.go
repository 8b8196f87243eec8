package registry

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// resource.k8s.io (dynamic resource allocation): DeviceClasses, ResourceClaims and their
// templates, and the ResourceSlices drivers publish. kplane's scheduler allocates no devices
// and no controller makes claims from templates, so these are stored and validated only.
// Device selectors are CEL expressions; kplane checks their size but does not compile them.

var resourceV1 = resourcev1.SchemeGroupVersion

func resourceResources() []Strategy {
	return []Strategy{deviceClasses, resourceClaims, resourceClaimTemplates, resourceSlices}
}

// Bounds of the DRA types, as Kubernetes v1.36 sets them.
const (
	maxDeviceRequests          = 32
	maxDeviceSelectors         = 32
	maxDeviceConstraints       = 32
	maxDeviceConfigs           = 32
	maxFirstAvailable          = 8
	maxCELExpression           = 10 * 1024
	maxOpaqueParameters        = 10 * 1024
	maxReservedFor             = 256
	maxSliceDevices            = 128
	maxSliceCounterSets        = 8
	maxDeviceAttrsAndCapacity  = 32
	maxDeviceAttributeValue    = 64
	maxDeviceIDLength          = 32
	maxDeviceTaints            = 16
	maxDeviceTolerations       = 16
	maxPoolNameLength          = 253
	deviceAttributeUnionDetail = "exactly one value must be specified"
)

// semver is the version form a device's version attribute takes (semver.org 2.0.0).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

var deviceClasses = &Def[*resourcev1.DeviceClass]{
	Info:    Info{GroupVersion: resourceV1, Resource: "deviceclasses", Singular: "deviceclass", Kind: "DeviceClass"},
	NewList: func() runtime.Object { return &resourcev1.DeviceClassList{} },
	Validate: func(c *resourcev1.DeviceClass) field.ErrorList {
		sp := field.NewPath("spec")
		errs := tooMany(len(c.Spec.Selectors), maxDeviceSelectors, sp.Child("selectors"))
		for i, s := range c.Spec.Selectors {
			errs = append(errs, validateDeviceSelector(s, sp.Child("selectors").Index(i))...)
		}
		errs = append(errs, tooMany(len(c.Spec.Config), maxDeviceConfigs, sp.Child("config"))...)
		for i, cfg := range c.Spec.Config {
			errs = append(errs, validateOpaqueConfig(cfg.Opaque, sp.Child("config").Index(i))...)
		}
		if n := c.Spec.ExtendedResourceName; n != nil && !isExtendedResourceName(*n) {
			errs = append(errs, field.Invalid(sp.Child("extendedResourceName"), *n, "must be a valid extended resource name"))
		}
		return errs
	},
	Columns: columns(AgeColumn),
	Row:     func(c *resourcev1.DeviceClass) []any { return []any{Age(c.CreationTimestamp)} },
}

// isExtendedResourceName: a domain-qualified name outside kubernetes.io that could be requested.
func isExtendedResourceName(n string) bool {
	return strings.Contains(n, "/") && !strings.Contains(n, "kubernetes.io/") && !strings.HasPrefix(n, "requests.") &&
		len(content.IsLabelKey("requests."+n)) == 0
}

func tooMany(n, max int, p *field.Path) field.ErrorList {
	if n > max {
		return field.ErrorList{field.TooMany(p, n, max)}
	}
	return nil
}

func validateDeviceSelector(s resourcev1.DeviceSelector, p *field.Path) field.ErrorList {
	if s.CEL == nil {
		return field.ErrorList{field.Required(p.Child("cel"), "")}
	}
	ep := p.Child("cel", "expression")
	switch e := s.CEL.Expression; {
	case strings.TrimSpace(e) == "":
		return field.ErrorList{field.Required(ep, "")}
	case len(e) > maxCELExpression:
		return field.ErrorList{field.TooLong(ep, "", maxCELExpression)}
	}
	return nil
}

func validateOpaqueConfig(o *resourcev1.OpaqueDeviceConfiguration, p *field.Path) field.ErrorList {
	if o == nil {
		return field.ErrorList{field.Required(p.Child("opaque"), "")}
	}
	op := p.Child("opaque")
	errs := csiDriverName(o.Driver, op.Child("driver"))
	pp := op.Child("parameters")
	switch raw := o.Parameters.Raw; {
	case len(raw) == 0:
		errs = append(errs, field.Required(pp, ""))
	case len(raw) > maxOpaqueParameters:
		errs = append(errs, field.TooLong(pp, "", maxOpaqueParameters))
	}
	return errs
}

var resourceClaims = &Def[*resourcev1.ResourceClaim]{
	Info: Info{GroupVersion: resourceV1, Resource: "resourceclaims", Singular: "resourceclaim", Kind: "ResourceClaim",
		Namespaced: true, Status: true},
	NewList:      func() runtime.Object { return &resourcev1.ResourceClaimList{} },
	NoGeneration: true,
	Defaults:     func(c *resourcev1.ResourceClaim) { defaultDeviceClaim(&c.Spec.Devices) },
	Validate: func(c *resourcev1.ResourceClaim) field.ErrorList {
		return append(validateDeviceClaim(&c.Spec.Devices, field.NewPath("spec", "devices")), validateClaimStatus(c)...)
	},
	ValidateUpdate: func(c, old *resourcev1.ResourceClaim) field.ErrorList {
		var errs field.ErrorList
		if !apiequality.Semantic.DeepEqual(c.Spec, old.Spec) {
			errs = append(errs, immutable(c.Spec, field.NewPath("spec"))...)
		}
		sp := field.NewPath("status")
		if a, was := c.Status.Allocation, old.Status.Allocation; a != nil && was != nil && !apiequality.Semantic.DeepEqual(a, was) {
			errs = append(errs, immutable(a, sp.Child("allocation"))...)
		}
		if c.DeletionTimestamp != nil && len(c.Status.ReservedFor) > 0 {
			had := map[types.UID]bool{}
			for _, r := range old.Status.ReservedFor {
				had[r.UID] = true
			}
			for _, r := range c.Status.ReservedFor {
				if !had[r.UID] {
					errs = append(errs, field.Forbidden(sp.Child("reservedFor"), "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set"))
					break
				}
			}
		}
		return errs
	},
	Columns: columns(Column("State", "string", 0, "A summary of the claim's state: allocated, pending, reserved, deleted."), AgeColumn),
	Row: func(c *resourcev1.ResourceClaim) []any {
		var states []string
		if c.DeletionTimestamp != nil {
			states = append(states, "deleted")
		}
		switch {
		case c.Status.Allocation != nil:
			states = append(states, "allocated")
			if len(c.Status.ReservedFor) > 0 {
				states = append(states, "reserved")
			}
		case c.DeletionTimestamp == nil:
			states = append(states, "pending")
		}
		return []any{strings.Join(states, ","), Age(c.CreationTimestamp)}
	},
}

// validateClaimStatus: who a claim is reserved for, only once it is allocated.
func validateClaimStatus(c *resourcev1.ResourceClaim) field.ErrorList {
	rp := field.NewPath("status", "reservedFor")
	errs := tooMany(len(c.Status.ReservedFor), maxReservedFor, rp)
	seen := map[types.UID]bool{}
	for i, r := range c.Status.ReservedFor {
		ip := rp.Index(i)
		for _, f := range []struct{ name, v string }{{"resource", r.Resource}, {"name", r.Name}, {"uid", string(r.UID)}} {
			if f.v == "" {
				errs = append(errs, field.Required(ip.Child(f.name), ""))
			}
		}
		errs = append(errs, unique(seen, r.UID, ip, r.UID)...)
	}
	if len(c.Status.ReservedFor) > 0 && c.Status.Allocation == nil {
		errs = append(errs, field.Forbidden(rp, "may not be specified when `allocated` is not set"))
	}
	return errs
}

func defaultDeviceClaim(d *resourcev1.DeviceClaim) {
	count := func(mode *resourcev1.DeviceAllocationMode, n *int64) {
		*mode = or(*mode, resourcev1.DeviceAllocationModeExactCount)
		if *mode == resourcev1.DeviceAllocationModeExactCount && *n == 0 {
			*n = 1
		}
	}
	for i := range d.Requests {
		r := &d.Requests[i]
		if r.Exactly != nil {
			count(&r.Exactly.AllocationMode, &r.Exactly.Count)
		}
		for j := range r.FirstAvailable {
			count(&r.FirstAvailable[j].AllocationMode, &r.FirstAvailable[j].Count)
		}
	}
}

func validateDeviceClaim(d *resourcev1.DeviceClaim, p *field.Path) field.ErrorList {
	rp := p.Child("requests")
	errs := tooMany(len(d.Requests), maxDeviceRequests, rp)
	names := map[string]map[string]bool{}
	for i, r := range d.Requests {
		ip := rp.Index(i)
		errs = append(errs, dnsLabel(r.Name, ip.Child("name"))...)
		if _, dup := names[r.Name]; dup {
			errs = append(errs, field.Duplicate(ip, r.Name))
		}
		subs := map[string]bool{}
		names[r.Name] = subs
		switch {
		case r.Exactly == nil && len(r.FirstAvailable) == 0:
			errs = append(errs, field.Required(ip, "exactly one of `exactly` or `firstAvailable` is required"))
		case r.Exactly != nil && len(r.FirstAvailable) > 0:
			errs = append(errs, field.Invalid(ip, nil, "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set"))
		case r.Exactly != nil:
			e := r.Exactly
			errs = append(errs, validateDeviceRequest(e.DeviceClassName, e.Selectors, e.AllocationMode, e.Count, len(e.Tolerations), ip.Child("exactly"))...)
		default:
			fp := ip.Child("firstAvailable")
			errs = append(errs, tooMany(len(r.FirstAvailable), maxFirstAvailable, fp)...)
			for j, s := range r.FirstAvailable {
				sp := fp.Index(j)
				errs = append(errs, dnsLabel(s.Name, sp.Child("name"))...)
				errs = append(errs, unique(subs, s.Name, sp, s.Name)...)
				errs = append(errs, validateDeviceRequest(s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count, len(s.Tolerations), sp)...)
			}
		}
	}
	// Constraints and configuration name the requests (or request/subrequest) they apply to.
	ref := func(name string, p *field.Path) field.ErrorList {
		req, sub, hasSub := strings.Cut(name, "/")
		subs, ok := names[req]
		if strings.Count(name, "/") > 1 || !ok || hasSub && !subs[sub] {
			return field.ErrorList{field.Invalid(p, name, "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'")}
		}
		return nil
	}
	cp := p.Child("constraints")
	errs = append(errs, tooMany(len(d.Constraints), maxDeviceConstraints, cp)...)
	for i, c := range d.Constraints {
		ip := cp.Index(i)
		for j, r := range c.Requests {
			errs = append(errs, ref(r, ip.Child("requests").Index(j))...)
		}
		switch {
		case c.MatchAttribute != nil:
			errs = append(errs, fullyQualifiedName(string(*c.MatchAttribute), ip.Child("matchAttribute"))...)
		case c.DistinctAttribute != nil:
			errs = append(errs, fullyQualifiedName(string(*c.DistinctAttribute), ip.Child("distinctAttribute"))...)
		default:
			// Kubernetes' message says "multiple" even when neither is set.
			errs = append(errs, field.Required(ip, `exactly one of "matchAttribute" or "distinctAttribute" is required, but multiple fields are set`))
		}
	}
	gp := p.Child("config")
	errs = append(errs, tooMany(len(d.Config), maxDeviceConfigs, gp)...)
	for i, c := range d.Config {
		for j, r := range c.Requests {
			errs = append(errs, ref(r, gp.Index(i).Child("requests").Index(j))...)
		}
		errs = append(errs, validateOpaqueConfig(c.Opaque, gp.Index(i))...)
	}
	return errs
}

func validateDeviceRequest(class string, selectors []resourcev1.DeviceSelector, mode resourcev1.DeviceAllocationMode, count int64, tolerations int, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if class == "" {
		errs = append(errs, field.Required(p.Child("deviceClassName"), ""))
	} else {
		errs = append(errs, dnsSubdomain(class, p.Child("deviceClassName"))...)
	}
	errs = append(errs, tooMany(len(selectors), maxDeviceSelectors, p.Child("selectors"))...)
	for i, s := range selectors {
		errs = append(errs, validateDeviceSelector(s, p.Child("selectors").Index(i))...)
	}
	switch mode {
	case resourcev1.DeviceAllocationModeAll:
		if count != 0 {
			errs = append(errs, field.Invalid(p.Child("count"), count, "must not be specified when allocationMode is 'All'"))
		}
	case resourcev1.DeviceAllocationModeExactCount:
		if count <= 0 {
			errs = append(errs, field.Invalid(p.Child("count"), count, "must be greater than zero"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("allocationMode"), mode,
			[]resourcev1.DeviceAllocationMode{resourcev1.DeviceAllocationModeAll, resourcev1.DeviceAllocationModeExactCount}))
	}
	return append(errs, tooMany(tolerations, maxDeviceTolerations, p.Child("tolerations"))...)
}

// qualifiedName is a device attribute or capacity name: a C identifier, optionally behind a
// driver-name domain and a slash.
func deviceQualifiedName(name string, p *field.Path) field.ErrorList {
	domain, id, qualified := strings.Cut(name, "/")
	var errs field.ErrorList
	if qualified {
		if domain == "" {
			errs = append(errs, field.Invalid(p, "", "the domain must not be empty"))
		} else {
			errs = append(errs, csiDriverName(domain, p)...)
		}
		if id == "" {
			return append(errs, field.Invalid(p, "", "the name must not be empty"))
		}
	} else {
		id = domain
	}
	if len(id) > maxDeviceIDLength {
		errs = append(errs, field.TooLong(p, "", maxDeviceIDLength))
	}
	return append(errs, msgs(p, id, content.IsCIdentifier(id))...)
}

func fullyQualifiedName(name string, p *field.Path) field.ErrorList {
	errs := deviceQualifiedName(name, p)
	if !strings.Contains(name, "/") {
		errs = append(errs, field.Invalid(p, name, "a fully qualified name must be a domain and a name separated by a slash"))
	}
	return errs
}

var resourceClaimTemplates = &Def[*resourcev1.ResourceClaimTemplate]{
	Info: Info{GroupVersion: resourceV1, Resource: "resourceclaimtemplates", Singular: "resourceclaimtemplate", Kind: "ResourceClaimTemplate",
		Namespaced: true},
	NewList:      func() runtime.Object { return &resourcev1.ResourceClaimTemplateList{} },
	NoGeneration: true,
	Defaults:     func(t *resourcev1.ResourceClaimTemplate) { defaultDeviceClaim(&t.Spec.Spec.Devices) },
	Validate: func(t *resourcev1.ResourceClaimTemplate) field.ErrorList {
		mp := field.NewPath("spec", "metadata")
		errs := apimachineryvalidation.ValidateAnnotations(t.Spec.Annotations, mp.Child("annotations"))
		errs = append(errs, metav1validation.ValidateLabels(t.Spec.Labels, mp.Child("labels"))...)
		return append(errs, validateDeviceClaim(&t.Spec.Spec.Devices, field.NewPath("spec", "spec", "devices"))...)
	},
	ValidateUpdate: func(t, old *resourcev1.ResourceClaimTemplate) field.ErrorList {
		if !apiequality.Semantic.DeepEqual(t.Spec, old.Spec) {
			return immutable(t.Spec, field.NewPath("spec"))
		}
		return nil
	},
	Columns: columns(AgeColumn),
	Row:     func(t *resourcev1.ResourceClaimTemplate) []any { return []any{Age(t.CreationTimestamp)} },
}

var resourceSlices = &Def[*resourcev1.ResourceSlice]{
	Info:    Info{GroupVersion: resourceV1, Resource: "resourceslices", Singular: "resourceslice", Kind: "ResourceSlice"},
	NewList: func() runtime.Object { return &resourcev1.ResourceSliceList{} },
	Defaults: func(s *resourcev1.ResourceSlice) {
		for i := range s.Spec.Devices {
			for j := range s.Spec.Devices[i].Taints {
				if t := &s.Spec.Devices[i].Taints[j]; t.TimeAdded == nil {
					t.TimeAdded = new(metav1.NewTime(time.Now().Truncate(time.Second)))
				}
			}
		}
	},
	Validate: validateResourceSlice,
	ValidateUpdate: func(s, old *resourcev1.ResourceSlice) field.ErrorList {
		sp := field.NewPath("spec")
		var errs field.ErrorList
		if s.Spec.Pool.Name != old.Spec.Pool.Name {
			errs = append(errs, immutable(s.Spec.Pool.Name, sp.Child("pool", "name"))...)
		}
		if s.Spec.Driver != old.Spec.Driver {
			errs = append(errs, immutable(s.Spec.Driver, sp.Child("driver"))...)
		}
		if deref(s.Spec.NodeName) != deref(old.Spec.NodeName) {
			errs = append(errs, immutable(s.Spec.NodeName, sp.Child("nodeName"))...)
		}
		return errs
	},
	Fields: func(s *resourcev1.ResourceSlice) fields.Set {
		return fields.Set{"spec.nodeName": deref(s.Spec.NodeName), "spec.driver": s.Spec.Driver}
	},
	Columns: columns(
		Column("Node", "string", 0, "The node whose devices the slice lists."),
		Column("Driver", "string", 0, "The DRA driver that publishes the slice."),
		Column("Pool", "string", 0, "The pool the devices belong to."),
		AgeColumn,
	),
	Row: func(s *resourcev1.ResourceSlice) []any {
		return []any{deref(s.Spec.NodeName), s.Spec.Driver, s.Spec.Pool.Name, Age(s.CreationTimestamp)}
	},
}

func validateResourceSlice(s *resourcev1.ResourceSlice) field.ErrorList {
	sp := field.NewPath("spec")
	spec := &s.Spec
	errs := csiDriverName(spec.Driver, sp.Child("driver"))
	pp := sp.Child("pool")
	if spec.Pool.Name == "" {
		errs = append(errs, field.Required(pp.Child("name"), ""))
	} else {
		if len(spec.Pool.Name) > maxPoolNameLength {
			errs = append(errs, field.TooLong(pp.Child("name"), "", maxPoolNameLength))
		}
		for _, part := range strings.Split(spec.Pool.Name, "/") {
			errs = append(errs, dnsSubdomain(part, pp.Child("name"))...)
		}
	}
	if spec.Pool.ResourceSliceCount <= 0 {
		errs = append(errs, field.Invalid(pp.Child("resourceSliceCount"), spec.Pool.ResourceSliceCount, "must be greater than zero"))
	}
	if spec.Pool.Generation < 0 {
		errs = append(errs, field.Invalid(pp.Child("generation"), spec.Pool.Generation, "must be greater than or equal to zero"))
	}
	// Exactly one way to say which nodes reach the devices.
	var set []string
	if n := spec.NodeName; n != nil {
		if *n == "" {
			errs = append(errs, field.Invalid(sp.Child("nodeName"), *n, "must be either unset or set to a non-empty string"))
		} else {
			set = append(set, "`nodeName`")
			errs = append(errs, dnsSubdomain(*n, sp.Child("nodeName"))...)
		}
	}
	if ns := spec.NodeSelector; ns != nil {
		set = append(set, "`nodeSelector`")
		errs = append(errs, validateNodeSelector(ns, sp.Child("nodeSelector"))...)
		if len(ns.NodeSelectorTerms) != 1 {
			errs = append(errs, field.Invalid(sp.Child("nodeSelector", "nodeSelectorTerms"), ns.NodeSelectorTerms, "must have exactly one node selector term"))
		}
	}
	trueOrUnset := func(b *bool, name string) {
		switch {
		case b == nil:
		case *b:
			set = append(set, "`"+name+"`")
		default:
			errs = append(errs, field.Invalid(sp.Child(name), *b, "must be either unset or set to true"))
		}
	}
	trueOrUnset(spec.AllNodes, "allNodes")
	trueOrUnset(spec.PerDeviceNodeSelection, "perDeviceNodeSelection")
	const which = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
	switch len(set) {
	case 0:
		errs = append(errs, field.Required(sp, which))
	case 1:
	default:
		errs = append(errs, field.Invalid(sp, "{"+strings.Join(set, ", ")+"}", which+", but multiple fields are set"))
	}
	if spec.SharedCounters != nil && spec.Devices != nil {
		errs = append(errs, field.Invalid(sp, "", "only one of `sharedCounters` or `devices` is allowed"))
	}
	dp := sp.Child("devices")
	errs = append(errs, tooMany(len(spec.Devices), maxSliceDevices, dp)...)
	names := map[string]bool{}
	for i, d := range spec.Devices {
		errs = append(errs, validateDevice(d, deref(spec.PerDeviceNodeSelection), dp.Index(i))...)
		errs = append(errs, unique(names, d.Name, dp.Index(i), d.Name)...)
	}
	cp := sp.Child("sharedCounters")
	errs = append(errs, tooMany(len(spec.SharedCounters), maxSliceCounterSets, cp)...)
	sets := map[string]bool{}
	for i, c := range spec.SharedCounters {
		errs = append(errs, requiredLabel(c.Name, cp.Index(i).Child("name"))...)
		errs = append(errs, unique(sets, c.Name, cp.Index(i), c.Name)...)
	}
	return errs
}

func validateDevice(d resourcev1.Device, perDevice bool, p *field.Path) field.ErrorList {
	errs := dnsLabel(d.Name, p.Child("name"))
	if n := len(d.Attributes) + len(d.Capacity); n > maxDeviceAttrsAndCapacity {
		errs = append(errs, field.Invalid(p, n, fmt.Sprintf("the total number of attributes and capacities must not exceed %d", maxDeviceAttrsAndCapacity)))
	}
	for name, a := range d.Attributes {
		ap := p.Child("attributes").Key(string(name))
		errs = append(errs, deviceQualifiedName(string(name), p.Child("attributes"))...)
		errs = append(errs, validateDeviceAttribute(a, ap)...)
	}
	multiple := deref(d.AllowMultipleAllocations)
	for name, c := range d.Capacity {
		cp := p.Child("capacity").Key(string(name))
		errs = append(errs, deviceQualifiedName(string(name), p.Child("capacity"))...)
		if c.RequestPolicy != nil && !multiple {
			errs = append(errs, field.Forbidden(cp.Child("requestPolicy"), "allowMultipleAllocations must be true"))
		}
	}
	errs = append(errs, tooMany(len(d.Taints), maxDeviceTaints, p.Child("taints"))...)
	for i, t := range d.Taints {
		tp := p.Child("taints").Index(i)
		errs = append(errs, metav1validation.ValidateLabelName(t.Key, tp.Child("key"))...)
		errs = append(errs, oneOf(t.Effect, tp.Child("effect"), resourcev1.DeviceTaintEffectNoSchedule, resourcev1.DeviceTaintEffectNoExecute, resourcev1.DeviceTaintEffectNone)...)
	}
	placed := d.NodeName != nil || d.NodeSelector != nil || d.AllNodes != nil
	if !perDevice && placed {
		errs = append(errs, field.Invalid(p, nil, "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec"))
	}
	if perDevice && !placed {
		errs = append(errs, field.Required(p, "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec"))
	}
	return errs
}

func validateDeviceAttribute(a resourcev1.DeviceAttribute, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if a.BoolValue != nil {
		n++
	}
	if a.IntValue != nil {
		n++
	}
	if v := a.StringValue; v != nil {
		n++
		if len(*v) > maxDeviceAttributeValue {
			errs = append(errs, field.TooLong(p.Child("string"), "", maxDeviceAttributeValue))
		}
	}
	if v := a.VersionValue; v != nil {
		n++
		if !semver.MatchString(*v) {
			errs = append(errs, field.Invalid(p.Child("version"), *v, "must be a string compatible with semver.org spec 2.0.0"))
		}
		if len(*v) > maxDeviceAttributeValue {
			errs = append(errs, field.TooLong(p.Child("version"), "", maxDeviceAttributeValue))
		}
	}
	for _, list := range []struct {
		name string
		set  bool
		n    int
	}{{"bools", a.BoolValues != nil, len(a.BoolValues)}, {"ints", a.IntValues != nil, len(a.IntValues)},
		{"strings", a.StringValues != nil, len(a.StringValues)}, {"versions", a.VersionValues != nil, len(a.VersionValues)}} {
		if !list.set {
			continue
		}
		n++
		if list.n == 0 {
			errs = append(errs, field.Invalid(p.Child(list.name), list.n, "must not be empty if specified"))
		}
	}
	switch n {
	case 0:
		errs = append(errs, field.Invalid(p, "", deviceAttributeUnionDetail))
	case 1:
	default:
		errs = append(errs, field.Invalid(p, a, deviceAttributeUnionDetail))
	}
	return errs
}
