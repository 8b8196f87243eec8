package apiserver

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/kplane/kplane/apiserver/authentication"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// This file is authorization.k8s.io/v1: the access reviews clients ask before they act
// (`kubectl auth can-i`, controllers checking a user's rights). kplane has no authorizer yet,
// so every request any authenticated user makes is allowed: each review answers allowed, with
// a reason that says why, and a rules review lists everything. RBAC objects are stored and
// served (registry/rbac.go) but not consulted.

// allowedReason is the reason every access review gets.
const allowedReason = "kplane does not authorize requests yet: every request is allowed"

var (
	authorizationV1             = authorizationv1.SchemeGroupVersion
	subjectAccessReviewGVK      = authorizationV1.WithKind("SubjectAccessReview")
	selfSubjectAccessReviewGVK  = authorizationV1.WithKind("SelfSubjectAccessReview")
	localSubjectAccessReviewGVK = authorizationV1.WithKind("LocalSubjectAccessReview")
	selfSubjectRulesReviewGVK   = authorizationV1.WithKind("SelfSubjectRulesReview")
	authorizationAPIResources   = []metav1.APIResource{
		{Name: "localsubjectaccessreviews", SingularName: "localsubjectaccessreview", Namespaced: true, Kind: "LocalSubjectAccessReview", Verbs: metav1.Verbs{"create"}},
		{Name: "selfsubjectaccessreviews", SingularName: "selfsubjectaccessreview", Kind: "SelfSubjectAccessReview", Verbs: metav1.Verbs{"create"}},
		{Name: "selfsubjectrulesreviews", SingularName: "selfsubjectrulesreview", Kind: "SelfSubjectRulesReview", Verbs: metav1.Verbs{"create"}},
		{Name: "subjectaccessreviews", SingularName: "subjectaccessreview", Kind: "SubjectAccessReview", Verbs: metav1.Verbs{"create"}},
	}
)

// authorizationCreateOnly lists the reviews' kinds, for OpenAPI.
func authorizationCreateOnly() []createOnlyKind {
	const prefix = "/apis/authorization.k8s.io/v1/"
	return []createOnlyKind{
		{authorizationV1, prefix + "subjectaccessreviews", subjectAccessReviewGVK, reflect.TypeOf(authorizationv1.SubjectAccessReview{})},
		{authorizationV1, prefix + "selfsubjectaccessreviews", selfSubjectAccessReviewGVK, reflect.TypeOf(authorizationv1.SelfSubjectAccessReview{})},
		{authorizationV1, prefix + "namespaces/{namespace}/localsubjectaccessreviews", localSubjectAccessReviewGVK, reflect.TypeOf(authorizationv1.LocalSubjectAccessReview{})},
		{authorizationV1, prefix + "selfsubjectrulesreviews", selfSubjectRulesReviewGVK, reflect.TypeOf(authorizationv1.SelfSubjectRulesReview{})},
	}
}

// reviewInvalid is the 422 of a review: Kubernetes names the group but no kind or name.
func reviewInvalid(errs field.ErrorList) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: authorizationV1.Group}, "", errs)
}

// serveAuthorizationAPI answers authorization.k8s.io/v1's create-only reviews; namespace is
// the request path's (local reviews only).
func (s *Server) serveAuthorizationAPI(w http.ResponseWriter, r *http.Request, namespace, resource string) {
	gr := schema.GroupResource{Group: authorizationV1.Group, Resource: resource}
	known := false
	for _, res := range authorizationAPIResources {
		known = known || res.Name == resource && res.Namespaced == (namespace != "")
	}
	if !known {
		writeError(w, apierrors.NewNotFound(gr, ""))
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, apierrors.NewMethodNotSupported(gr, strings.ToLower(r.Method)))
		return
	}
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	decode := func(gvk schema.GroupVersionKind, obj runtime.Object) bool {
		if err := decodeObject(w, wr.body, mediaType(r), wr.fv, gvk, obj); err != nil {
			writeError(w, err)
			return false
		}
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		return true
	}
	// answer refuses an invalid review, or answers it allowed.
	answer := func(review runtime.Object, errs field.ErrorList, status *authorizationv1.SubjectAccessReviewStatus) {
		if len(errs) > 0 {
			writeError(w, reviewInvalid(errs))
			return
		}
		*status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: allowedReason}
		writeResult(w, r, http.StatusCreated, review)
	}
	switch resource {
	case "subjectaccessreviews":
		review := &authorizationv1.SubjectAccessReview{}
		if decode(subjectAccessReviewGVK, review) {
			errs := validateAccessReviewSpec(review.Spec, true)
			answer(review, append(errs, metadataMustBeEmpty(review.ObjectMeta, false)...), &review.Status)
		}
	case "localsubjectaccessreviews":
		review := &authorizationv1.LocalSubjectAccessReview{}
		if !decode(localSubjectAccessReviewGVK, review) {
			return
		}
		review.Namespace = or(review.Namespace, namespace)
		errs := validateAccessReviewSpec(review.Spec, true)
		errs = append(errs, metadataMustBeEmpty(review.ObjectMeta, true)...)
		if a := review.Spec.ResourceAttributes; a != nil && a.Namespace != review.Namespace {
			errs = append(errs, field.Invalid(field.NewPath("spec.resourceAttributes.namespace"), a.Namespace, "must match metadata.namespace"))
		}
		if review.Spec.NonResourceAttributes != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec.nonResourceAttributes"), review.Spec.NonResourceAttributes, "disallowed on this kind of request"))
		}
		if len(errs) == 0 && review.Namespace != namespace {
			writeError(w, apierrors.NewBadRequest(fmt.Sprintf("spec.resourceAttributes.namespace must match namespace: %v", namespace)))
			return
		}
		answer(review, errs, &review.Status)
	case "selfsubjectaccessreviews":
		review := &authorizationv1.SelfSubjectAccessReview{}
		if decode(selfSubjectAccessReviewGVK, review) {
			spec := authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: review.Spec.ResourceAttributes,
				NonResourceAttributes: review.Spec.NonResourceAttributes}
			errs := validateAccessReviewSpec(spec, false)
			answer(review, append(errs, metadataMustBeEmpty(review.ObjectMeta, false)...), &review.Status)
		}
	case "selfsubjectrulesreviews":
		review := &authorizationv1.SelfSubjectRulesReview{}
		if !decode(selfSubjectRulesReviewGVK, review) {
			return
		}
		if _, ok := authentication.UserFrom(r.Context()); !ok {
			writeError(w, apierrors.NewBadRequest("no user present on request"))
			return
		}
		if review.Spec.Namespace == "" {
			writeError(w, apierrors.NewBadRequest("no namespace on request"))
			return
		}
		// Everything is allowed: one rule says so for resources, one for other URLs.
		out := &authorizationv1.SelfSubjectRulesReview{Status: authorizationv1.SubjectRulesReviewStatus{
			ResourceRules:    []authorizationv1.ResourceRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
			NonResourceRules: []authorizationv1.NonResourceRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
		}}
		out.SetGroupVersionKind(selfSubjectRulesReviewGVK)
		writeResult(w, r, http.StatusCreated, out)
	}
}

// validateAccessReviewSpec checks what is asked about: resource or non-resource attributes,
// exactly one, and, for reviews of another subject, whom.
func validateAccessReviewSpec(spec authorizationv1.SubjectAccessReviewSpec, subject bool) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if spec.ResourceAttributes != nil && spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(p.Child("nonResourceAttributes"), spec.NonResourceAttributes, `cannot be specified in combination with resourceAttributes`))
	}
	if spec.ResourceAttributes == nil && spec.NonResourceAttributes == nil {
		errs = append(errs, field.Invalid(p.Child("resourceAttributes"), spec.NonResourceAttributes, `exactly one of nonResourceAttributes or resourceAttributes must be specified`))
	}
	if subject && spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(p.Child("user"), spec.User, `at least one of user or group must be specified`))
	}
	a := spec.ResourceAttributes
	if a == nil {
		return errs
	}
	ap := p.Child("resourceAttributes")
	if fs := a.FieldSelector; fs != nil {
		fp := ap.Child("fieldSelector")
		errs = append(errs, rawOrRequirements(fs.RawSelector != "", len(fs.Requirements) > 0, fs.RawSelector, fp)...)
		opts := metav1validation.FieldSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}
		for i, req := range fs.Requirements {
			errs = append(errs, metav1validation.ValidateFieldSelectorRequirement(req, opts, fp.Child("requirements").Index(i))...)
		}
	}
	if ls := a.LabelSelector; ls != nil {
		lp := ap.Child("labelSelector")
		errs = append(errs, rawOrRequirements(ls.RawSelector != "", len(ls.Requirements) > 0, ls.RawSelector, lp)...)
		opts := metav1validation.LabelSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}
		for i, req := range ls.Requirements {
			errs = append(errs, metav1validation.ValidateLabelSelectorRequirement(req, opts, lp.Child("requirements").Index(i))...)
		}
	}
	return errs
}

// rawOrRequirements: a selector in a review is given one way, raw or as requirements.
func rawOrRequirements(raw, reqs bool, rawValue string, p *field.Path) field.ErrorList {
	switch {
	case raw && reqs:
		return field.ErrorList{field.Invalid(p.Child("rawSelector"), rawValue, "may not specified at the same time as requirements")}
	case !raw && !reqs:
		return field.ErrorList{field.Required(p.Child("requirements"), fmt.Sprintf("when %s is specified, requirements or rawSelector is required", p))}
	}
	return nil
}

// metadataMustBeEmpty: a review is a question, not an object; it has no name, labels or the
// like (a local review has its namespace).
func metadataMustBeEmpty(m metav1.ObjectMeta, namespaced bool) field.ErrorList {
	rest := m
	rest.ManagedFields = nil
	msg := "must be empty"
	if namespaced {
		rest.Namespace = ""
		msg = "must be empty except for namespace"
	}
	if !apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, rest) {
		return field.ErrorList{field.Invalid(field.NewPath("metadata"), m, msg)}
	}
	return nil
}
