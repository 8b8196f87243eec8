package apiserver

import (
	"context"
	"fmt"

	"github.com/kplane/kplane/apiserver/admission"
	"github.com/kplane/kplane/storage"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidatingAdmissionPolicies judge writes in the validating phase, before the validating
// webhooks, and MutatingAdmissionPolicies mutate them before the mutating webhooks, as
// kube-apiserver orders them. Policies and bindings are read from the watch
// cache on each write and compiled again only when one of them changes; params are read from
// the watch cache of whatever served resource (built-in or custom) the policy's paramKind
// names.

var (
	validatingPoliciesGVR = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies")
	validatingBindingsGVR = admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings")
	mutatingPoliciesGVR   = admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicies")
	mutatingBindingsGVR   = admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicybindings")
)

func (s *Server) validatingPolicies() admission.Policies {
	return compiledPolicies(s, validatingPoliciesGVR, validatingBindingsGVR, &s.webhooks.policies, admission.ValidatingPolicies)
}

func (s *Server) mutatingPolicies() admission.MutatingPolicies {
	return compiledPolicies(s, mutatingPoliciesGVR, mutatingBindingsGVR, &s.webhooks.mutatingPolicies, admission.CompileMutatingPolicies)
}

// compiledPolicies are the policies of one kind with their bindings, compiled again only
// when one of them changed; none when nothing binds them.
func compiledPolicies[P, B storage.Object, C any](s *Server, policiesGVR, bindingsGVR schema.GroupVersionResource, cache *prepared[C], compile func([]P, []B) C) C {
	bindings, bkey := configurations[B](s, bindingsGVR)
	if len(bindings) == 0 {
		var none C
		return none
	}
	policies, pkey := configurations[P](s, policiesGVR)
	return cache.get(pkey+"|"+bkey, func() C { return compile(policies, bindings) }, nil)
}

// policyContext gives policies their params, the request's namespace, and the merge of
// apply configurations.
func (s *Server) policyContext() admission.PolicyContext {
	return admission.PolicyContext{
		Params:    s.paramStore,
		Namespace: s.admissionNamespace,
		Merge:     s.mergeApplyConfiguration,
	}
}

// mergeApplyConfiguration merges a mutating policy's apply configuration into an object of
// kind gvk with the field manager of the endpoint writing that kind, which knows its list and
// map semantics: a resource's own, or a scale subresource's for a Scale.
func (s *Server) mergeApplyConfiguration(gvk schema.GroupVersionKind, obj runtime.Object, patch map[string]any) (runtime.Object, error) {
	if gvk == scaleGVK {
		// Every scale endpoint has the same autoscaling/v1 Scale field manager.
		if m, err := scaleFieldManager(); err == nil {
			return m.Merge(obj, patch)
		}
	} else if r, ok := s.resourceOfKind(gvk); ok && r.fields[""] != nil {
		return r.fields[""].Merge(obj, patch)
	}
	return nil, fmt.Errorf("no type information for %v", gvk)
}

// paramStore finds the served resource of a paramKind.
func (s *Server) paramStore(apiVersion, kind string) (*admission.ParamStore, bool) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, false
	}
	gvk := gv.WithKind(kind)
	r, ok := s.resourceOfKind(gvk)
	if !ok {
		return nil, false
	}
	return &admission.ParamStore{
		Namespaced: r.info.Namespaced,
		Get: func(ns, name string) (runtime.Object, error) {
			o, err := r.store.GetCached(ns, name)
			if err != nil {
				return nil, err
			}
			return withKind(o, gvk), nil
		},
		List: func(ns string, sel labels.Selector) ([]runtime.Object, error) {
			list, err := r.store.List(context.Background(), ns, storage.ListOptions{ResourceVersion: "0", Predicate: storage.Predicate{Label: sel}})
			if err != nil {
				return nil, err
			}
			var out []runtime.Object
			for _, it := range listItems(list) {
				out = append(out, withKind(it, gvk))
			}
			return out, nil
		},
	}, true
}

// admissionCELErrors compiles the CEL of admission configurations when they are written, so
// that one that does not compile is refused with 422 instead of failing every request it
// matches. It lives here, not in the registry, because the compiler is admission's.
func admissionCELErrors(obj runtime.Object) field.ErrorList {
	var errs field.ErrorList
	switch o := obj.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		errs = admission.CheckValidatingPolicy(o)
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		errs = admission.CheckMutatingPolicy(o)
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i, w := range o.Webhooks {
			e := admission.CheckConditions(w.MatchConditions, field.NewPath("webhooks").Index(i).Child("matchConditions"))
			errs = append(errs, e...)
		}
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i, w := range o.Webhooks {
			e := admission.CheckConditions(w.MatchConditions, field.NewPath("webhooks").Index(i).Child("matchConditions"))
			errs = append(errs, e...)
		}
	}
	return errs
}

// withKind is a copy of a cached object with its kind set, for expressions that read
// params.apiVersion or params.kind (the cache is shared, so the object is not changed).
func withKind(o storage.Object, gvk schema.GroupVersionKind) runtime.Object {
	c := o.DeepCopyObject()
	c.GetObjectKind().SetGroupVersionKind(gvk)
	return c
}
