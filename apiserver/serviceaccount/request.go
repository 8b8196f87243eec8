package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Token lifetimes, as Kubernetes bounds and defaults them.
const (
	// MinExpirationSeconds is the shortest lifetime a TokenRequest may ask for (10 minutes).
	MinExpirationSeconds = 10 * 60
	// MaxExpirationSeconds is the longest (2^32 seconds).
	MaxExpirationSeconds = 1 << 32
	// DefaultExpirationSeconds is the lifetime of a request that names none (1 hour).
	DefaultExpirationSeconds = 60 * 60
	// ProjectedExpirationSeconds is what admission asks for in the projected kube-api-access
	// volume: an hour and 7 seconds, an odd value that marks the kubelet's request so the
	// server may hand out a longer-lived token (see extendedExpirationSeconds).
	ProjectedExpirationSeconds = 60*60 + 7
	// extendedExpirationSeconds is the real lifetime of such a token (a year; the kubelet renews
	// at 80 % of the hour anyway): clients that do not reread the token file keep working, and
	// the warnafter claim records when they should have.
	extendedExpirationSeconds = 365 * 24 * 60 * 60
)

var tokenRequestGK = schema.GroupKind{Group: authenticationv1.SchemeGroupVersion.Group, Kind: "TokenRequest"}

// Issuer answers TokenRequests (the serviceaccounts/token subresource).
type Issuer struct {
	signer       *Signer
	apiAudiences []string
	now          func() time.Time
}

// NewIssuer signs with signer; requests without audiences get apiAudiences.
func NewIssuer(signer *Signer, apiAudiences []string) *Issuer {
	return &Issuer{signer: signer, apiAudiences: apiAudiences, now: time.Now}
}

// RequestToken issues a token for service account ns/name as req asks, and returns req
// completed with the token: what POST .../serviceaccounts/<name>/token answers. Errors are
// Kubernetes': 404 for a missing account or bound object, 422 for a bad lifetime or a
// mismatched name, 409 when a UID does not match, 400 for an unsupported bound object.
func (i *Issuer) RequestToken(ctx context.Context, objs Objects, ns, name string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if req.Name != "" && req.Name != name {
		return nil, apierrors.NewInvalid(tokenRequestGK, name, field.ErrorList{
			field.Invalid(field.NewPath("metadata", "name"), req.Name, "must match the service account name if specified")})
	}
	if req.Namespace != "" && req.Namespace != ns {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	sa, err := objs.ServiceAccount(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	if req.UID != "" && req.UID != sa.UID {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: tokenRequestGK.Group, Resource: tokenRequestGK.Kind}, name,
			fmt.Errorf("the UID in the token request (%s) does not match the UID of the service account (%s)", req.UID, sa.UID))
	}
	out := req.DeepCopy()
	out.TypeMeta = metav1.TypeMeta{APIVersion: authenticationv1.SchemeGroupVersion.String(), Kind: tokenRequestGK.Kind}
	out.Name, out.Namespace, out.UID = sa.Name, sa.Namespace, sa.UID
	if len(out.Spec.Audiences) == 0 {
		out.Spec.Audiences = slices.Clone(i.apiAudiences)
	}
	if out.Spec.ExpirationSeconds == nil {
		out.Spec.ExpirationSeconds = new(int64(DefaultExpirationSeconds))
	}
	// The time is taken before the token is made, so that the expiry reported in status is
	// never later than the token's own.
	now := i.now()
	out.CreationTimestamp = metav1.NewTime(now)
	out.Status = authenticationv1.TokenRequestStatus{}
	seconds := *out.Spec.ExpirationSeconds
	if errs := validateExpiration(seconds); len(errs) > 0 {
		return nil, apierrors.NewInvalid(tokenRequestGK, "", errs)
	}

	claims := Claims{
		Subject:    Username(sa.Namespace, sa.Name),
		Audience:   Audience(out.Spec.Audiences),
		IssuedAt:   jwt.NewNumericDate(now),
		NotBefore:  jwt.NewNumericDate(now),
		ID:         string(uuid.NewUUID()),
		Kubernetes: &Private{Namespace: sa.Namespace, ServiceAccount: Ref{Name: sa.Name, UID: string(sa.UID)}},
	}
	if ref := out.Spec.BoundObjectRef; ref != nil {
		if err := bind(ctx, objs, claims.Kubernetes, ns, name, ref); err != nil {
			return nil, err
		}
	}
	lifetime := seconds
	if claims.Kubernetes.Pod != nil && seconds == ProjectedExpirationSeconds && subset(out.Spec.Audiences, i.apiAudiences) {
		claims.Kubernetes.WarnAfter = jwt.NewNumericDate(now.Add(time.Duration(seconds) * time.Second))
		lifetime = extendedExpirationSeconds
	}
	claims.Expiry = jwt.NewNumericDate(now.Add(time.Duration(lifetime) * time.Second))
	token, err := i.signer.Sign(claims)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("failed to generate token: %w", err))
	}
	out.Status = authenticationv1.TokenRequestStatus{
		Token:               token,
		ExpirationTimestamp: metav1.NewTime(now.Add(time.Duration(seconds) * time.Second)),
	}
	return out, nil
}

func validateExpiration(seconds int64) field.ErrorList {
	p := field.NewPath("spec", "expirationSeconds")
	switch {
	case seconds < MinExpirationSeconds:
		return field.ErrorList{field.Invalid(p, seconds, "may not specify a duration less than 10 minutes")}
	case seconds > MaxExpirationSeconds:
		return field.ErrorList{field.Invalid(p, seconds, "may not specify a duration larger than 2^32 seconds")}
	}
	return nil
}

func subset(sub, of []string) bool {
	for _, s := range sub {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
}

// bind fills the claim of the object ref names, which must exist in the account's namespace (a
// node: in the cluster) with the UID ref gives, if it gives one. A pod must run as the account.
func bind(ctx context.Context, objs Objects, k *Private, ns, account string, ref *authenticationv1.BoundObjectReference) error {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	if ref.Name == "" {
		return apierrors.NewBadRequest("boundObjectRef.name is required")
	}
	var uid types.UID
	switch {
	case gvk.Group == "" && gvk.Kind == "Pod":
		pod, err := objs.Pod(ctx, ns, ref.Name)
		if err != nil {
			return err
		}
		if pod.Spec.ServiceAccountName != account {
			return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", account))
		}
		uid = pod.UID
		k.Pod = &Ref{Name: pod.Name, UID: string(pod.UID)}
		if nodeName := pod.Spec.NodeName; nodeName != "" {
			// The node is named for information; a node object that is gone leaves the name.
			k.Node = &Ref{Name: nodeName}
			node, err := objs.Node(ctx, nodeName)
			switch {
			case err == nil:
				k.Node.UID = string(node.UID)
			case !apierrors.IsNotFound(err):
				return apierrors.NewInternalError(err)
			}
		}
	case gvk.Group == "" && gvk.Kind == "Secret":
		s, err := objs.Secret(ctx, ns, ref.Name)
		if err != nil {
			return err
		}
		uid = s.UID
		k.Secret = &Ref{Name: s.Name, UID: string(s.UID)}
	case gvk.Group == "" && gvk.Kind == "Node":
		n, err := objs.Node(ctx, ref.Name)
		if err != nil {
			return err
		}
		uid = n.UID
		k.Node = &Ref{Name: n.Name, UID: string(n.UID)}
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", gvk.String()))
	}
	if ref.UID != "" && ref.UID != uid {
		return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, ref.Name,
			fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	return nil
}

// LegacyToken signs the token of a kubernetes.io/service-account-token Secret for account sa
// (what the token controller stores): no audience and no expiry; it lives as long as the
// Secret holds it and the account exists.
func LegacyToken(s *Signer, sa *corev1.ServiceAccount, secret *corev1.Secret) (string, error) {
	if s.Issuer() != LegacyIssuer {
		return "", errors.New("legacy tokens are signed with the legacy issuer")
	}
	return s.Sign(Claims{
		Subject:          Username(sa.Namespace, sa.Name),
		LegacyNamespace:  sa.Namespace,
		LegacyName:       sa.Name,
		LegacyUID:        string(sa.UID),
		LegacySecretName: secret.Name,
	})
}
