// Package quota measures what objects use of a namespace's ResourceQuotas and decides whether a
// write fits them, as Kubernetes v1.36 does (pkg/quota/v1/evaluator/core and the ResourceQuota
// admission plugin). The apiserver's quota admission and the resource quota controller share
// it: admission charges a write's usage to the quotas it matches, the controller recounts the
// usage from the objects themselves.
//
// Pods, Services and PersistentVolumeClaims have evaluators of their own (compute resources,
// node ports and load balancers, storage by class); every other resource is counted as
// count/<resource>.<group>, and configmaps, secrets, replicationcontrollers and resourcequotas
// also under their older plain names.
package quota

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kplane/kplane/internal/podresources"
	"github.com/kplane/kplane/internal/pv"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Operation is the kind of write admission judges.
type Operation int

const (
	Create Operation = iota
	Update
)

// Evaluator measures the quota usage of one resource's objects.
type Evaluator interface {
	// Resource is the resource whose objects it measures.
	Resource() schema.GroupResource
	// Handles reports whether a write of an object (old is nil on create) can change usage.
	Handles(op Operation, subresource string, obj, old runtime.Object) bool
	// Matching returns the names among names this evaluator accounts for, sorted.
	Matching(names []corev1.ResourceName) []corev1.ResourceName
	// MatchesScope reports whether obj falls in the scope sel describes; resources without
	// scopes fall in none.
	MatchesScope(sel corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error)
	// Constraints refuses an object that does not say what a quota limiting required needs
	// to know (a pod's cpu and memory requests and limits); the error is the message.
	Constraints(required []corev1.ResourceName, obj runtime.Object) error
	// Usage is what obj uses at time now.
	Usage(obj runtime.Object, now time.Time) (corev1.ResourceList, error)
}

// CountName is the quota name counting the objects of a resource: count/<resource>.<group>,
// count/<resource> for the core group.
func CountName(gr schema.GroupResource) corev1.ResourceName {
	if gr.Group == "" {
		return corev1.ResourceName("count/" + gr.Resource)
	}
	return corev1.ResourceName("count/" + gr.Resource + "." + gr.Group)
}

// legacyCountNames are the plain names some core resources were counted under before
// count/<resource> existed; quotas still use them.
var legacyCountNames = map[string]corev1.ResourceName{
	"configmaps":             corev1.ResourceConfigMaps,
	"resourcequotas":         corev1.ResourceQuotas,
	"replicationcontrollers": corev1.ResourceReplicationControllers,
	"secrets":                corev1.ResourceSecrets,
}

var (
	podsResource   = schema.GroupResource{Resource: "pods"}
	svcResource    = schema.GroupResource{Resource: "services"}
	claimsResource = schema.GroupResource{Resource: "persistentvolumeclaims"}
)

// For returns the evaluator of a resource's objects.
func For(gr schema.GroupResource) Evaluator {
	switch gr {
	case podsResource:
		return podEvaluator{}
	case svcResource:
		return serviceEvaluator{}
	case claimsResource:
		return claimEvaluator{}
	}
	names := []corev1.ResourceName{CountName(gr)}
	if alias, ok := legacyCountNames[gr.Resource]; ok && gr.Group == "" {
		names = append(names, alias)
	}
	return countEvaluator{gr: gr, names: names}
}

// UpdatesCharged reports whether an update of gr's objects can change their usage: pods',
// services' and claims' can; every other object is counted once, when it is created.
func UpdatesCharged(gr schema.GroupResource) bool {
	return gr == podsResource || gr == svcResource || gr == claimsResource
}

// Ignored reports whether quota leaves a resource alone: events, which were never counted and
// churn the most.
func Ignored(gr schema.GroupResource) bool {
	return gr.Resource == "events" && (gr.Group == "" || gr.Group == "events.k8s.io")
}

// countEvaluator counts objects, charged on create only.
type countEvaluator struct {
	gr    schema.GroupResource
	names []corev1.ResourceName
}

func (e countEvaluator) Resource() schema.GroupResource { return e.gr }

func (e countEvaluator) Handles(op Operation, subresource string, _, _ runtime.Object) bool {
	return op == Create && subresource == ""
}

func (e countEvaluator) Matching(names []corev1.ResourceName) []corev1.ResourceName {
	return Intersection(names, e.names)
}

func (countEvaluator) MatchesScope(corev1.ScopedResourceSelectorRequirement, runtime.Object) (bool, error) {
	return false, nil
}

func (countEvaluator) Constraints([]corev1.ResourceName, runtime.Object) error { return nil }

func (e countEvaluator) Usage(runtime.Object, time.Time) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, n := range e.names {
		out[n] = *resource.NewQuantity(1, resource.DecimalSI)
	}
	return out, nil
}

// one is a count of one object.
func one() resource.Quantity { return *resource.NewQuantity(1, resource.DecimalSI) }

// zero is a count of nothing, printed "0".
func zero() resource.Quantity { return resource.Quantity{Format: resource.DecimalSI} }

// Pods.

var podCount = CountName(podsResource)

// podResources are the names the pod evaluator accounts for, beyond hugepages and extended
// resources.
var podResources = []corev1.ResourceName{podCount, corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage, corev1.ResourcePods}

// deviceClassRequestsPrefix names the implicit extended resources of device classes in quotas.
const deviceClassRequestsPrefix = corev1.DefaultResourceRequestsPrefix + "deviceclass.resource.kubernetes.io/"

// mustSpecify are the names for which a quota requires every container to say its amount:
// a rule from before QoS classes that Kubernetes keeps for these six names only.
var mustSpecify = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceRequestsCPU,
	corev1.ResourceRequestsMemory, corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory}

type podEvaluator struct{}

func (podEvaluator) Resource() schema.GroupResource { return podsResource }

// Handles: pods are charged on create, and again when an update moves them between the
// Terminating and NotTerminating scopes (activeDeadlineSeconds set) or resizes them.
func (podEvaluator) Handles(op Operation, subresource string, obj, old runtime.Object) bool {
	switch subresource {
	case "":
		if op == Update {
			p, ok1 := obj.(*corev1.Pod)
			o, ok2 := old.(*corev1.Pod)
			return ok1 && ok2 && IsTerminating(p) != IsTerminating(o)
		}
		return op == Create
	case "resize":
		return op == Update
	}
	return false
}

func (podEvaluator) Matching(names []corev1.ResourceName) []corev1.ResourceName {
	out := Intersection(names, podResources)
	for _, n := range names {
		if (isQuotaHugePages(n) || isExtendedQuotaName(n)) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// isExtendedQuotaName reports whether a quota name limits the requests of an extended
// resource: "requests." and a name outside kubernetes.io, or a device class's implicit one.
func isExtendedQuotaName(n corev1.ResourceName) bool {
	return strings.HasPrefix(string(n), corev1.DefaultResourceRequestsPrefix) &&
		(!IsNative(n) || strings.HasPrefix(string(n), deviceClassRequestsPrefix))
}

func asPod(obj runtime.Object) (*corev1.Pod, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("expected a *v1.Pod, got %T", obj)
	}
	return p, nil
}

func (podEvaluator) MatchesScope(sel corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error) {
	p, err := asPod(obj)
	if err != nil {
		return false, err
	}
	switch sel.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return IsTerminating(p), nil
	case corev1.ResourceQuotaScopeNotTerminating:
		return !IsTerminating(p), nil
	case corev1.ResourceQuotaScopeBestEffort:
		return IsBestEffort(p), nil
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !IsBestEffort(p), nil
	case corev1.ResourceQuotaScopePriorityClass:
		if sel.Operator == corev1.ScopeSelectorOpExists {
			return p.Spec.PriorityClassName != "", nil
		}
		var set labels.Set
		if p.Spec.PriorityClassName != "" {
			set = labels.Set{string(corev1.ResourceQuotaScopePriorityClass): p.Spec.PriorityClassName}
		}
		return selectorMatches(sel, set)
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return crossNamespaceAffinity(p), nil
	}
	return false, nil
}

// selectorMatches evaluates a scope selector expression as a label requirement on set, whose
// key is the scope's name.
func selectorMatches(sel corev1.ScopedResourceSelectorRequirement, set labels.Set) (bool, error) {
	ops := map[corev1.ScopeSelectorOperator]selection.Operator{
		corev1.ScopeSelectorOpIn: selection.In, corev1.ScopeSelectorOpNotIn: selection.NotIn,
		corev1.ScopeSelectorOpExists: selection.Exists, corev1.ScopeSelectorOpDoesNotExist: selection.DoesNotExist,
	}
	op, ok := ops[sel.Operator]
	if !ok {
		return false, fmt.Errorf("%q is not a valid scope selector operator", sel.Operator)
	}
	req, err := labels.NewRequirement(string(sel.ScopeName), op, sel.Values)
	if err != nil {
		return false, err
	}
	return req.Matches(set), nil
}

// IsTerminating reports whether a pod has a deadline (activeDeadlineSeconds), which puts it in
// the Terminating scope.
func IsTerminating(p *corev1.Pod) bool {
	return p.Spec.ActiveDeadlineSeconds != nil && *p.Spec.ActiveDeadlineSeconds >= 0
}

// IsBestEffort reports whether a pod requests and limits no cpu and memory at all (its QoS
// class is BestEffort).
func IsBestEffort(p *corev1.Pod) bool {
	some := func(l corev1.ResourceList) bool {
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := l[n]; ok && q.Sign() > 0 {
				return true
			}
		}
		return false
	}
	if r := p.Spec.Resources; r != nil && (some(r.Requests) || some(r.Limits)) {
		return false
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			if some(c.Resources.Requests) || some(c.Resources.Limits) {
				return false
			}
		}
	}
	return true
}

func crossNamespaceAffinity(p *corev1.Pod) bool {
	a := p.Spec.Affinity
	if a == nil {
		return false
	}
	cross := func(t *corev1.PodAffinityTerm) bool { return len(t.Namespaces) > 0 || t.NamespaceSelector != nil }
	check := func(req []corev1.PodAffinityTerm, pref []corev1.WeightedPodAffinityTerm) bool {
		for i := range req {
			if cross(&req[i]) {
				return true
			}
		}
		for i := range pref {
			if cross(&pref[i].PodAffinityTerm) {
				return true
			}
		}
		return false
	}
	if pa := a.PodAffinity; pa != nil && check(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	if pa := a.PodAntiAffinity; pa != nil && check(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	return false
}

// podLevelResourcesSet reports whether a pod sets pod-level cpu, memory or hugepages, which
// then stand for its containers'.
func podLevelResourcesSet(p *corev1.Pod) bool {
	r := p.Spec.Resources
	if r == nil {
		return false
	}
	for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
		for n := range l {
			if n == corev1.ResourceCPU || n == corev1.ResourceMemory || IsHugePages(n) {
				return true
			}
		}
	}
	return false
}

// Constraints refuses a pod some container of which does not say the cpu or memory a quota
// limits (Kubernetes' "must specify"); pod-level resources answer for all containers.
func (podEvaluator) Constraints(required []corev1.ResourceName, obj runtime.Object) error {
	p, err := asPod(obj)
	if err != nil {
		return err
	}
	if podLevelResourcesSet(p) {
		return nil
	}
	req := Intersection(required, mustSpecify)
	if len(req) == 0 {
		return nil
	}
	missing := map[corev1.ResourceName]sets.Set[string]{}
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			has := computeUsage(c.Resources.Requests, c.Resources.Limits)
			for _, n := range req {
				if _, ok := has[n]; !ok {
					if missing[n] == nil {
						missing[n] = sets.New[string]()
					}
					missing[n].Insert(c.Name)
				}
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var parts []string
	for _, n := range req {
		if m, ok := missing[n]; ok {
			parts = append(parts, fmt.Sprintf("%s for: %s", n, strings.Join(sets.List(m), ",")))
		}
	}
	return errors.New("must specify " + strings.Join(parts, "; "))
}

// computeUsage turns requests and limits into the quota names they count toward.
func computeUsage(requests, limits corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: one()}
	for _, r := range []struct{ name, request, limit corev1.ResourceName }{
		{corev1.ResourceCPU, corev1.ResourceRequestsCPU, corev1.ResourceLimitsCPU},
		{corev1.ResourceMemory, corev1.ResourceRequestsMemory, corev1.ResourceLimitsMemory},
		{corev1.ResourceEphemeralStorage, corev1.ResourceRequestsEphemeralStorage, corev1.ResourceLimitsEphemeralStorage},
	} {
		if q, ok := requests[r.name]; ok {
			out[r.name], out[r.request] = q.DeepCopy(), q.DeepCopy()
		}
		if q, ok := limits[r.name]; ok {
			out[r.limit] = q.DeepCopy()
		}
	}
	for n, q := range requests {
		if IsHugePages(n) {
			out[n] = q.DeepCopy()
		}
		if IsHugePages(n) || IsExtended(n) || strings.HasPrefix(string(n), "deviceclass.resource.kubernetes.io/") {
			out[corev1.DefaultResourceRequestsPrefix+n] = q.DeepCopy()
		}
	}
	return out
}

// Charged reports whether a pod's compute resources count against quota at time now: not once
// it has finished (Succeeded or Failed), nor once its deletion's grace period has run out (a
// pod stuck terminating on a lost node must not keep its owner from replacing it).
func Charged(p *corev1.Pod, now time.Time) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if ts, g := p.DeletionTimestamp, p.DeletionGracePeriodSeconds; ts != nil && g != nil {
		if now.After(ts.Add(time.Duration(*g) * time.Second)) {
			return false
		}
	}
	return true
}

// Usage: every pod counts in count/pods; a pod that is charged also counts in pods and with
// its requests and limits, summed the way the scheduler sums them.
func (podEvaluator) Usage(obj runtime.Object, now time.Time) (corev1.ResourceList, error) {
	p, err := asPod(obj)
	if err != nil {
		return nil, err
	}
	out := corev1.ResourceList{podCount: one()}
	if !Charged(p, now) {
		return out, nil
	}
	limits, _, _ := podresources.Limits(p)
	return Add(out, computeUsage(podresources.Requests(p), limits)), nil
}

// Services.

var serviceResources = []corev1.ResourceName{CountName(svcResource), corev1.ResourceServices,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers}

type serviceEvaluator struct{}

func (serviceEvaluator) Resource() schema.GroupResource { return svcResource }

// Handles: creates, and updates, which may change a service's type.
func (serviceEvaluator) Handles(op Operation, subresource string, _, _ runtime.Object) bool {
	return subresource == ""
}

func (serviceEvaluator) Matching(names []corev1.ResourceName) []corev1.ResourceName {
	return Intersection(names, serviceResources)
}

func (serviceEvaluator) MatchesScope(corev1.ScopedResourceSelectorRequirement, runtime.Object) (bool, error) {
	return false, nil
}

func (serviceEvaluator) Constraints([]corev1.ResourceName, runtime.Object) error { return nil }

// Usage: one service; a NodePort or LoadBalancer service a node port per port (a load
// balancer that allocates none only the ports that name one); a LoadBalancer one balancer.
func (serviceEvaluator) Usage(obj runtime.Object, _ time.Time) (corev1.ResourceList, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return nil, fmt.Errorf("expected a *v1.Service, got %T", obj)
	}
	out := corev1.ResourceList{CountName(svcResource): one(), corev1.ResourceServices: one(),
		corev1.ResourceServicesNodePorts: zero(), corev1.ResourceServicesLoadBalancers: zero()}
	ports := int64(len(s.Spec.Ports))
	switch s.Spec.Type {
	case corev1.ServiceTypeNodePort:
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(ports, resource.DecimalSI)
	case corev1.ServiceTypeLoadBalancer:
		if a := s.Spec.AllocateLoadBalancerNodePorts; a != nil && !*a {
			ports = 0
			for _, p := range s.Spec.Ports {
				if p.NodePort != 0 {
					ports++
				}
			}
		}
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(ports, resource.DecimalSI)
		out[corev1.ResourceServicesLoadBalancers] = one()
	}
	return out, nil
}

// QuotaServiceType is the type of a service as quota sees it: NodePort, LoadBalancer, or ""
// for the types that use neither.
func QuotaServiceType(s *corev1.Service) corev1.ServiceType {
	if s.Spec.Type == corev1.ServiceTypeNodePort || s.Spec.Type == corev1.ServiceTypeLoadBalancer {
		return s.Spec.Type
	}
	return ""
}

// PersistentVolumeClaims.

// storageClassInfix joins a class and a resource into a per-class quota name:
// gold.storageclass.storage.k8s.io/requests.storage.
const storageClassInfix = ".storageclass.storage.k8s.io/"

var claimResources = []corev1.ResourceName{corev1.ResourcePersistentVolumeClaims, corev1.ResourceRequestsStorage}

type claimEvaluator struct{}

func (claimEvaluator) Resource() schema.GroupResource { return claimsResource }

// Handles: creates and updates (a claim may grow); status writes that change the storage
// allocated to the claim or the attributes classes it refers to.
func (claimEvaluator) Handles(op Operation, subresource string, obj, old runtime.Object) bool {
	switch subresource {
	case "":
		return true
	case "status":
		c, ok1 := obj.(*corev1.PersistentVolumeClaim)
		o, ok2 := old.(*corev1.PersistentVolumeClaim)
		return ok1 && ok2 && ClaimNeedsRecount(c, o)
	}
	return false
}

// ClaimNeedsRecount reports whether a change of a claim's status changes what it uses: the
// storage allocated to it, or the volume attributes classes it refers to.
func ClaimNeedsRecount(c, old *corev1.PersistentVolumeClaim) bool {
	q, had := c.Status.AllocatedResources[corev1.ResourceStorage]
	oq, oldHad := old.Status.AllocatedResources[corev1.ResourceStorage]
	if had != oldHad || q.Cmp(oq) != 0 {
		return true
	}
	return !attributesClasses(c).Equal(attributesClasses(old))
}

func (claimEvaluator) Matching(names []corev1.ResourceName) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, n := range names {
		if n == CountName(claimsResource) || slices.Contains(claimResources, n) ||
			strings.HasSuffix(string(n), storageClassInfix+string(corev1.ResourcePersistentVolumeClaims)) ||
			strings.HasSuffix(string(n), storageClassInfix+string(corev1.ResourceRequestsStorage)) {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

func asClaim(obj runtime.Object) (*corev1.PersistentVolumeClaim, error) {
	c, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return nil, fmt.Errorf("expected a *v1.PersistentVolumeClaim, got %T", obj)
	}
	return c, nil
}

// attributesClasses are the volume attributes classes a claim refers to: the one it asks for,
// the one it has, and the one a modification moves it to.
func attributesClasses(c *corev1.PersistentVolumeClaim) sets.Set[string] {
	out := sets.New[string]()
	if n := c.Spec.VolumeAttributesClassName; n != nil && *n != "" {
		out.Insert(*n)
	}
	if n := c.Status.CurrentVolumeAttributesClassName; n != nil && *n != "" {
		out.Insert(*n)
	}
	if m := c.Status.ModifyVolumeStatus; m != nil && m.TargetVolumeAttributesClassName != "" {
		out.Insert(m.TargetVolumeAttributesClassName)
	}
	return out
}

func (claimEvaluator) MatchesScope(sel corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error) {
	c, err := asClaim(obj)
	if err != nil {
		return false, err
	}
	if sel.ScopeName != corev1.ResourceQuotaScopeVolumeAttributesClass {
		return false, nil
	}
	classes := attributesClasses(c)
	if sel.Operator == corev1.ScopeSelectorOpExists {
		return classes.Len() > 0, nil
	}
	if classes.Len() == 0 {
		return selectorMatches(sel, labels.Set{})
	}
	for _, name := range sets.List(classes) {
		ok, err := selectorMatches(sel, labels.Set{string(corev1.ResourceQuotaScopeVolumeAttributesClass): name})
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func (claimEvaluator) Constraints([]corev1.ResourceName, runtime.Object) error { return nil }

// Usage: one claim, its requested storage in whole bytes (or the storage allocated to it, if
// more), both also under its class's names.
func (claimEvaluator) Usage(obj runtime.Object, _ time.Time) (corev1.ResourceList, error) {
	c, err := asClaim(obj)
	if err != nil {
		return nil, err
	}
	out := corev1.ResourceList{corev1.ResourcePersistentVolumeClaims: one(), CountName(claimsResource): one()}
	class := pv.ClaimClass(c)
	if class != "" {
		out[corev1.ResourceName(class+storageClassInfix+string(corev1.ResourcePersistentVolumeClaims))] = one()
	}
	if storage, ok := claimStorage(c); ok {
		out[corev1.ResourceRequestsStorage] = storage
		if class != "" {
			out[corev1.ResourceName(class+storageClassInfix+string(corev1.ResourceRequestsStorage))] = storage.DeepCopy()
		}
	}
	return out, nil
}

// claimStorage is the storage a claim is charged for, rounded up to whole bytes.
func claimStorage(c *corev1.PersistentVolumeClaim) (resource.Quantity, bool) {
	req, ok := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return resource.Quantity{}, false
	}
	out := req.DeepCopy()
	if alloc, ok := c.Status.AllocatedResources[corev1.ResourceStorage]; ok && alloc.Cmp(out) > 0 {
		out = alloc.DeepCopy()
	}
	out.RoundUp(0)
	return out, true
}

// Matches reports whether quota q applies to obj: it limits something e accounts for (by its
// status, what it enforces now) and obj falls in every one of its scopes.
func Matches(q *corev1.ResourceQuota, e Evaluator, obj runtime.Object) (bool, error) {
	if len(e.Matching(Names(q.Status.Hard))) == 0 {
		return false, nil
	}
	for _, sel := range ScopeSelectors(&q.Spec) {
		ok, err := e.MatchesScope(sel, obj)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// ScopeSelectors returns a quota's scopes as selector expressions: each of spec.scopes as
// Exists, then spec.scopeSelector's.
func ScopeSelectors(s *corev1.ResourceQuotaSpec) []corev1.ScopedResourceSelectorRequirement {
	var out []corev1.ScopedResourceSelectorRequirement
	for _, scope := range s.Scopes {
		out = append(out, corev1.ScopedResourceSelectorRequirement{ScopeName: scope, Operator: corev1.ScopeSelectorOpExists})
	}
	if s.ScopeSelector != nil {
		out = append(out, s.ScopeSelector.MatchExpressions...)
	}
	return out
}
