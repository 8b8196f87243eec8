package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/kplane/kplane/apiserver/admission"
	"github.com/kplane/kplane/apiserver/authentication"
	"github.com/kplane/kplane/storage"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Admission webhooks run where kube-apiserver runs them: the mutating ones after the built-in
// mutating admission (service accounts, LimitRange defaults, priority, default classes,
// protection finalizers) and the mutating policies, the validating ones after the object's
// validation, LimitRanger's checks and the validating policies, and before ResourceQuota. The
// configurations are read from the watch cache on each write; their prepared webhooks
// (clients, compiled match conditions) are kept until a configuration changes.

var (
	validatingWebhooksGVR = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations")
	mutatingWebhooksGVR   = admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations")
)

// prepared caches what is built from a set of configuration objects (webhooks with their
// clients, compiled policies), keyed by the objects' names and resourceVersions: it is rebuilt
// only when one of them changes, and release frees the previous value.
type prepared[T any] struct {
	mu  sync.Mutex
	key string
	val T
}

func (p *prepared[T]) get(key string, build func() T, release func(T)) T {
	p.mu.Lock()
	defer p.mu.Unlock()
	if key != p.key {
		if release != nil {
			release(p.val)
		}
		p.key, p.val = key, build()
	}
	return p.val
}

// configurations lists the cached objects of a configuration resource, with a key that
// changes whenever one of them does. The cache is read once it holds this server's own writes
// of them: a webhook or policy written through this server judges the very next write.
func configurations[T storage.Object](s *Server, gvr schema.GroupVersionResource) ([]T, string) {
	store := s.resources[gvr].store
	list, err := store.List(context.Background(), "", storage.ListOptions{ResourceVersion: store.WrittenRevision()})
	if err != nil { // the cache did not catch up in time: judge by what it holds
		list, err = store.List(context.Background(), "", storage.ListOptions{ResourceVersion: "0"})
	}
	if err != nil {
		return nil, ""
	}
	items := listItems(list)
	out := make([]T, 0, len(items))
	var key strings.Builder
	for _, it := range items {
		out = append(out, it.(T))
		key.WriteString(it.GetName() + "@" + it.GetResourceVersion() + ",")
	}
	return out, key.String()
}

func (s *Server) validatingHooks() admission.Hooks {
	cfgs, key := configurations[*admissionregistrationv1.ValidatingWebhookConfiguration](s, validatingWebhooksGVR)
	if len(cfgs) == 0 {
		return nil
	}
	return s.webhooks.validating.get(key, func() admission.Hooks { return admission.ValidatingHooks(cfgs, s.resolveService) }, admission.Hooks.Close)
}

func (s *Server) mutatingHooks() admission.Hooks {
	cfgs, key := configurations[*admissionregistrationv1.MutatingWebhookConfiguration](s, mutatingWebhooksGVR)
	if len(cfgs) == 0 {
		return nil
	}
	return s.webhooks.mutating.get(key, func() admission.Hooks { return admission.MutatingHooks(cfgs, s.resolveService) }, admission.Hooks.Close)
}

// admissionRequest describes a write to the webhooks.
func (s *Server) admissionRequest(ctx context.Context, req request, op admissionv1.Operation, obj, old storage.Object, dry bool) *admission.Request {
	res := req.res
	user, _ := authentication.UserFrom(ctx)
	name := req.name
	if name == "" && obj != nil {
		name = obj.GetName()
	}
	kind, equivalents := res.info.GVK(), s.equivalents(res)
	if req.subresource == "scale" {
		kind, equivalents = scaleGVK, asScales(equivalents)
	}
	a := &admission.Attributes{
		Operation: op, Kind: kind, Resource: res.info.GroupVersion.WithResource(res.info.Resource),
		Subresource: req.subresource, Name: name, Namespace: req.namespace, Namespaced: res.info.Namespaced,
		DryRun: dry, User: user, Options: admissionOptions(op, dry, req.writer.manager), Equivalents: equivalents,
	}
	if obj != nil {
		obj.GetObjectKind().SetGroupVersionKind(kind)
		a.Object = obj
	}
	if old != nil {
		a.OldObject = old
	}
	return &admission.Request{Attributes: a, NamespaceLabels: s.namespaceLabels}
}

// asScales are the equivalent versions of a scale subresource: at every version of the
// parent the subresource's object is the same autoscaling/v1 Scale, so nothing converts.
func asScales(versions []admission.Version) []admission.Version {
	same := func(_ context.Context, o runtime.Object) (runtime.Object, error) { return o, nil }
	for i := range versions {
		versions[i].Kind, versions[i].To, versions[i].From = scaleGVK, same, same
	}
	return versions
}

// equivalents are the other versions res is served at (autoscaling/v1 beside v2, a CRD's
// versions), for webhooks whose rules name another version (matchPolicy Equivalent).
func (s *Server) equivalents(res *resource) []admission.Version {
	var out []admission.Version
	for _, other := range s.servedResources() {
		if other == res || other.info.GroupResource() != res.info.GroupResource() || other.info.StoredUnder != res.info.StoredUnder {
			continue
		}
		out = append(out, admission.Version{Kind: other.info.GVK(), Resource: other.info.GroupVersion.WithResource(other.info.Resource),
			To: convertBetween(res, other), From: convertBetween(other, res)})
	}
	return out
}

// convertBetween converts objects of one version of a resource to another, through the
// stored version.
func convertBetween(from, to *resource) func(context.Context, runtime.Object) (runtime.Object, error) {
	return func(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
		o, ok := obj.(storage.Object)
		if !ok {
			return nil, fmt.Errorf("converting %T: not an API object", obj)
		}
		var err error
		if from.conv != nil {
			if o, err = from.conv.Stored(ctx, o); err != nil {
				return nil, err
			}
		}
		if to.conv == nil {
			return o, nil
		}
		out, err := to.conv.Served(ctx, []storage.Object{o})
		if err != nil {
			return nil, err
		}
		out[0].GetObjectKind().SetGroupVersionKind(to.info.GVK())
		return out[0], nil
	}
}

func admissionOptions(op admissionv1.Operation, dry bool, manager string) runtime.Object {
	var dryRun []string
	if dry {
		dryRun = []string{metav1.DryRunAll}
	}
	meta := func(kind string) metav1.TypeMeta { return metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: kind} }
	switch op {
	case admissionv1.Create:
		return &metav1.CreateOptions{TypeMeta: meta("CreateOptions"), DryRun: dryRun, FieldManager: manager}
	case admissionv1.Update:
		return &metav1.UpdateOptions{TypeMeta: meta("UpdateOptions"), DryRun: dryRun, FieldManager: manager}
	default:
		return &metav1.DeleteOptions{TypeMeta: meta("DeleteOptions"), DryRun: dryRun}
	}
}

// namespaceLabels are the labels of a namespace, for namespace selectors: from the watch cache,
// or from storage when the cache does not hold it yet (a namespace created a moment ago), as
// Kubernetes' matcher reads the namespace from the API when its lister misses it.
func (s *Server) namespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	ns, err := s.admissionNamespace(ctx, name)
	if err != nil {
		return nil, err
	}
	return ns.(*corev1.Namespace).Labels, nil
}

// admissionNamespace is the namespace of a request, for selectors and namespaceObject: from
// the watch cache, else from storage when the cache has not seen it yet (a write right after
// its namespace was created), as Kubernetes' matcher falls back to a live read.
func (s *Server) admissionNamespace(ctx context.Context, name string) (runtime.Object, error) {
	store := s.resources[namespacesGVR].store
	obj, err := store.GetCached("", name)
	if apierrors.IsNotFound(err) {
		obj, err = store.Get(ctx, "", name)
	}
	return obj, err
}

// webhooksApply reports whether admission webhooks judge writes of req's resource: all but
// the admission configurations themselves.
func webhooksApply(req request) bool {
	return !admission.Exempt(req.res.info.GroupResource())
}

// mutators are what runs in the mutating phase: mutating admission policies, then webhooks.
type mutators struct {
	policies admission.MutatingPolicies
	hooks    admission.Hooks
}

func (m mutators) empty() bool { return len(m.policies) == 0 && len(m.hooks) == 0 }

// mutatorsFor are the mutating policies and webhooks that may judge writes of req's resource.
// Those of a scale subresource judge the Scale, in serveScale, never the parent object it
// writes.
func (s *Server) mutatorsFor(req request) mutators {
	if !webhooksApply(req) || req.subresource == "scale" {
		return mutators{}
	}
	return s.mutators()
}

// mutators are the server's mutating policies and webhooks.
func (s *Server) mutators() mutators { return mutators{s.mutatingPolicies(), s.mutatingHooks()} }

// mutateAdmission runs the mutating phase (from mutatorsFor) on a write; it returns the
// object as it left it, and whether it changed it.
func (s *Server) mutateAdmission(ctx context.Context, req request, m mutators, op admissionv1.Operation, obj, old storage.Object, dry bool) (storage.Object, bool, error) {
	if m.empty() {
		return obj, false, nil
	}
	ar := s.admissionRequest(ctx, req, op, obj, old, dry)
	changed, err := ar.Mutate(ctx, m.policies, s.policyContext(), m.hooks)
	addWarnings(ctx, ar.Warnings)
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return obj, false, nil
	}
	out, ok := ar.Object.(storage.Object)
	if !ok {
		return nil, false, fmt.Errorf("a mutated %T is not an API object", ar.Object)
	}
	return out, true, nil
}

// validateAdmission runs the validating admission policies, then the validating webhooks, on
// a write.
func (s *Server) validateAdmission(ctx context.Context, req request, op admissionv1.Operation, obj, old storage.Object, dry bool) error {
	if !webhooksApply(req) {
		return nil
	}
	policies, hooks := s.validatingPolicies(), s.validatingHooks()
	if len(policies) == 0 && len(hooks) == 0 {
		return nil
	}
	if req.subresource == "scale" {
		// A scale write is judged as the change of the parent's Scale, as Kubernetes does.
		var err error
		if obj, err = scaleOfResource(req.res, obj); err != nil {
			return err
		}
		if old, err = scaleOfResource(req.res, old); err != nil {
			return err
		}
	}
	return s.validateWith(ctx, req, policies, hooks, op, obj, old, dry)
}

func (s *Server) validateWith(ctx context.Context, req request, policies admission.Policies, hooks admission.Hooks, op admissionv1.Operation, obj, old storage.Object, dry bool) error {
	if len(policies) == 0 && len(hooks) == 0 {
		return nil
	}
	ar := s.admissionRequest(ctx, req, op, obj, old, dry)
	err := ar.ValidatePolicies(ctx, policies, s.policyContext())
	if err == nil && len(hooks) > 0 {
		err = ar.Validate(ctx, hooks)
	}
	addWarnings(ctx, ar.Warnings)
	return err
}

// deletionAdmission is the admission of a client's DELETE of req's objects, which deleteObject
// runs on each object as it is about to delete it (again if the object changes meanwhile), as
// Kubernetes runs it inside the storage's delete; nil when nothing would judge them. The
// configurations are read once, for all objects of a collection.
func (s *Server) deletionAdmission(req request, dry bool) func(context.Context, storage.Object) error {
	if !webhooksApply(req) {
		return nil
	}
	mutating, validating, policies := s.mutatorsFor(req), s.validatingHooks(), s.validatingPolicies()
	if mutating.empty() && len(validating) == 0 && len(policies) == 0 {
		return nil
	}
	return func(ctx context.Context, cur storage.Object) error {
		req := req
		req.namespace, req.name = cur.GetNamespace(), cur.GetName()
		// A copy: the deletion goes on with the object as stored, whatever a mutator did.
		old := cur.DeepCopyObject().(storage.Object)
		if _, _, err := s.mutateAdmission(ctx, req, mutating, admissionv1.Delete, nil, old, dry); err != nil {
			return err
		}
		return s.validateWith(ctx, req, policies, validating, admissionv1.Delete, nil, old, dry)
	}
}

// dryRunKey marks, in a request's context, a dry run (update steps learn it so).
type dryRunKey struct{}

func withDryRun(r *http.Request) *http.Request {
	if _, dry := r.URL.Query()["dryRun"]; dry {
		return r.WithContext(context.WithValue(r.Context(), dryRunKey{}, true))
	}
	return r
}

func dryRunOf(ctx context.Context) bool {
	dry, _ := ctx.Value(dryRunKey{}).(bool)
	return dry
}

func addWarnings(ctx context.Context, msgs []string) {
	for _, m := range msgs {
		warnContext(ctx, m)
	}
}
