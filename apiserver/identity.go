package apiserver

import (
	"context"
	"log/slog"
	"net/http"
	"reflect"
	"strings"

	"github.com/kplane/kplane/apiserver/authentication"
	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/apiserver/serviceaccount"
	"github.com/kplane/kplane/storage"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// This file is who a request is (authentication) and the APIs about identity: the
// serviceaccounts/token subresource (TokenRequest), TokenReview and SelfSubjectReview.

// ServiceAccountConfig is how the server issues and accepts service-account tokens.
type ServiceAccountConfig struct {
	// Signer signs TokenRequests, as the first of Issuers.
	Signer *serviceaccount.Signer
	// Issuers are the "iss" values accepted (kube-apiserver's --service-account-issuer).
	Issuers []string
	// Keys verify tokens (--service-account-key-file).
	Keys []serviceaccount.PublicKey
	// APIAudiences are the audiences a token must have one of to be used against this server,
	// and what TokenRequests without audiences get (--api-audiences).
	APIAudiences []string
}

var (
	authenticationV1     = authenticationv1.SchemeGroupVersion
	serviceAccountsGVR   = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	podsGVR              = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	secretsGVR           = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	tokenRequestGVK      = authenticationV1.WithKind("TokenRequest")
	tokenReviewGVK       = authenticationV1.WithKind("TokenReview")
	selfSubjectReviewGVK = authenticationV1.WithKind("SelfSubjectReview")
	identityAPIResources = []metav1.APIResource{
		{Name: "selfsubjectreviews", SingularName: "selfsubjectreview", Kind: "SelfSubjectReview", Verbs: metav1.Verbs{"create"}},
		{Name: "tokenreviews", SingularName: "tokenreview", Kind: "TokenReview", Verbs: metav1.Verbs{"create"}},
	}
)

// authenticate finds the request's user. A request without a bearer token is anonymous, which
// only a server without a token file lets through; a token that no authenticator accepts is
// refused, whatever the server's mode.
func (s *Server) authenticate(r *http.Request) (*http.Request, error) {
	token, presented := authentication.BearerToken(r)
	if !presented {
		if s.cfg.StaticTokens != nil {
			return nil, apierrors.NewUnauthorized("Unauthorized")
		}
		return r.WithContext(authentication.WithUser(r.Context(), authentication.Anonymous)), nil
	}
	resp, ok, err := s.authn.AuthenticateToken(r.Context(), token, s.apiAudiences())
	if !ok {
		// Why a token failed is for the log and for TokenReview, not for the presenter.
		slog.Debug("bearer token rejected", "path", r.URL.Path, "err", err)
		return nil, apierrors.NewUnauthorized("Unauthorized")
	}
	return r.WithContext(authentication.WithUser(r.Context(), resp.User)), nil
}

func (s *Server) apiAudiences() []string {
	if s.cfg.ServiceAccounts == nil {
		return nil
	}
	return s.cfg.ServiceAccounts.APIAudiences
}

// storeObjects reads the objects tokens name from the server's stores: from the watch cache
// when cached (authentication, on every request), else, and whenever the cache does not have
// the object yet, from etcd.
type storeObjects struct {
	s      *Server
	cached bool
}

func getObject[T storage.Object](ctx context.Context, o storeObjects, gvr schema.GroupVersionResource, ns, name string) (T, error) {
	var zero T
	res := o.s.resources[gvr]
	var obj storage.Object
	var err error = apierrors.NewNotFound(res.info.GroupResource(), name)
	if o.cached {
		obj, err = res.store.GetCached(ns, name)
	}
	if apierrors.IsNotFound(err) {
		obj, err = res.store.Get(ctx, ns, name)
	}
	if err != nil {
		return zero, err
	}
	return obj.(T), nil
}

func (o storeObjects) ServiceAccount(ctx context.Context, ns, name string) (*corev1.ServiceAccount, error) {
	return getObject[*corev1.ServiceAccount](ctx, o, serviceAccountsGVR, ns, name)
}

func (o storeObjects) Pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return getObject[*corev1.Pod](ctx, o, podsGVR, ns, name)
}

func (o storeObjects) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return getObject[*corev1.Secret](ctx, o, secretsGVR, ns, name)
}

func (o storeObjects) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return getObject[*corev1.Node](ctx, o, nodesGVR, "", name)
}

// serveTokenRequest serves POST serviceaccounts/<name>/token.
func (s *Server) serveTokenRequest(w http.ResponseWriter, r *http.Request, req request) {
	if r.Method != http.MethodPost {
		writeError(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "serviceaccounts/token"}, strings.ToLower(r.Method)))
		return
	}
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	tr := &authenticationv1.TokenRequest{}
	if err := decodeObject(w, wr.body, mediaType(r), wr.fv, tokenRequestGVK, tr); err != nil {
		writeError(w, err)
		return
	}
	out, err := s.tokens.RequestToken(r.Context(), storeObjects{s: s}, req.namespace, req.name, tr)
	if err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, r, http.StatusCreated, out)
}

// serveIdentityAPI serves authentication.k8s.io/v1's two create-only resources.
func (s *Server) serveIdentityAPI(w http.ResponseWriter, r *http.Request, resource string) {
	if r.Method != http.MethodPost {
		writeError(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: authenticationV1.Group, Resource: resource}, strings.ToLower(r.Method)))
		return
	}
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	switch resource {
	case "tokenreviews":
		review := &authenticationv1.TokenReview{}
		if err := decodeObject(w, wr.body, mediaType(r), wr.fv, tokenReviewGVK, review); err != nil {
			writeError(w, err)
			return
		}
		if review.Spec.Token == "" {
			writeError(w, apierrors.NewBadRequest("token is required for TokenReview"))
			return
		}
		audiences := review.Spec.Audiences
		if len(audiences) == 0 {
			audiences = s.apiAudiences()
		}
		review.Status = authenticationv1.TokenReviewStatus{}
		resp, ok, err := s.authn.AuthenticateToken(r.Context(), review.Spec.Token, audiences)
		if ok {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: resp.User, Audiences: resp.Audiences}
		} else if err != nil {
			review.Status.Error = err.Error()
		}
		review.TypeMeta = metav1.TypeMeta{APIVersion: authenticationV1.String(), Kind: tokenReviewGVK.Kind}
		writeResult(w, r, http.StatusCreated, review)
	case "selfsubjectreviews":
		review := &authenticationv1.SelfSubjectReview{}
		if err := decodeObject(w, wr.body, mediaType(r), wr.fv, selfSubjectReviewGVK, review); err != nil {
			writeError(w, err)
			return
		}
		user, _ := authentication.UserFrom(r.Context())
		review.TypeMeta = metav1.TypeMeta{APIVersion: authenticationV1.String(), Kind: selfSubjectReviewGVK.Kind}
		review.CreationTimestamp = metav1.Now()
		review.Status = authenticationv1.SelfSubjectReviewStatus{UserInfo: user}
		writeResult(w, r, http.StatusCreated, review)
	default:
		writeError(w, apierrors.NewNotFound(schema.GroupResource{Group: authenticationV1.Group, Resource: resource}, ""))
	}
}

// admit runs the admission a new object of res needs: the ServiceAccount plugin for pods.
func (s *Server) admit(ctx context.Context, res *resource, obj storage.Object) error {
	if pod, ok := obj.(*corev1.Pod); ok && isCorePods(res.info) {
		return serviceaccount.AdmitPod(ctx, storeObjects{s: s, cached: true}, pod, generateName)
	}
	return nil
}

// createOnlyKind is a kind that is POSTed to a path of group version gv and answered, never
// stored.
type createOnlyKind struct {
	gv   schema.GroupVersion
	path string
	gvk  schema.GroupVersionKind
	typ  reflect.Type
}

// createOnly lists the kinds that are answered, never stored (identity and authorization
// reviews), for OpenAPI.
func (s *Server) createOnly() []createOnlyKind {
	out := []createOnlyKind{
		{authenticationV1, "/apis/authentication.k8s.io/v1/tokenreviews", tokenReviewGVK, reflect.TypeOf(authenticationv1.TokenReview{})},
		{authenticationV1, "/apis/authentication.k8s.io/v1/selfsubjectreviews", selfSubjectReviewGVK, reflect.TypeOf(authenticationv1.SelfSubjectReview{})},
	}
	out = append(out, authorizationCreateOnly()...)
	if s.tokens != nil {
		out = append(out, createOnlyKind{corev1.SchemeGroupVersion, "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", tokenRequestGVK, reflect.TypeOf(authenticationv1.TokenRequest{})})
	}
	return out
}

// isCoreServiceAccounts reports whether info is core/v1 serviceaccounts, the one with a token
// subresource.
func isCoreServiceAccounts(info *registry.Info) bool {
	return info.GroupVersion.Group == "" && info.Resource == "serviceaccounts"
}
