package serviceaccount

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/kplane/kplane/apiserver/authentication"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Objects reads the objects a token names. Errors are the API's (NotFound when an object is gone).
type Objects interface {
	ServiceAccount(ctx context.Context, ns, name string) (*corev1.ServiceAccount, error)
	Pod(ctx context.Context, ns, name string) (*corev1.Pod, error)
	Secret(ctx context.Context, ns, name string) (*corev1.Secret, error)
	Node(ctx context.Context, name string) (*corev1.Node, error)
}

// The user names, groups and extra keys a service account authenticates as.
const (
	userPrefix        = "system:serviceaccount:"
	AllGroup          = "system:serviceaccounts"
	groupPrefix       = "system:serviceaccounts:"
	extraPodName      = "authentication.kubernetes.io/pod-name"
	extraPodUID       = "authentication.kubernetes.io/pod-uid"
	extraNodeName     = "authentication.kubernetes.io/node-name"
	extraNodeUID      = "authentication.kubernetes.io/node-uid"
	extraCredentialID = "authentication.kubernetes.io/credential-id"
)

// Username is the user a service account acts as: system:serviceaccount:<namespace>:<name>.
func Username(ns, name string) string { return userPrefix + ns + ":" + name }

// leeway is the clock skew tolerated on exp, nbf and iat, and how long an object marked for
// deletion still vouches for its tokens: Kubernetes' one minute.
const leeway = jwt.DefaultLeeway

// Authenticator accepts service-account tokens signed by one of its keys: bound tokens of its
// issuers (TokenRequest) and legacy secret-based tokens (the token controller's). Each token is
// checked against the live objects it names, so deleting (or replacing) the service account,
// or the pod, secret or node a token is bound to, revokes it.
type Authenticator struct {
	issuers      map[string]bool
	keys         []PublicKey
	apiAudiences []string
	objects      Objects
	now          func() time.Time
}

// NewAuthenticator accepts tokens of issuers (and the legacy issuer) signed with keys; tokens
// without audiences (legacy ones) count as meant for apiAudiences.
func NewAuthenticator(issuers []string, keys []PublicKey, apiAudiences []string, objects Objects) *Authenticator {
	a := &Authenticator{issuers: map[string]bool{LegacyIssuer: true}, keys: keys, apiAudiences: apiAudiences, objects: objects, now: time.Now}
	for _, iss := range issuers {
		a.issuers[iss] = true
	}
	return a
}

// AuthenticateToken implements authentication.TokenAuthenticator.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string, audiences []string) (*authentication.Response, bool, error) {
	if iss, ok := unverifiedIssuer(token); !ok || !a.issuers[iss] {
		return nil, false, nil // not a service-account token of this cluster
	}
	c, err := verify(token, a.keys)
	if err != nil {
		return nil, false, err
	}
	if !a.issuers[c.Issuer] {
		return nil, false, fmt.Errorf("token issuer %q is invalid", c.Issuer)
	}
	tokenAudiences := []string(c.Audience)
	if len(tokenAudiences) == 0 {
		tokenAudiences = a.apiAudiences
	}
	if len(audiences) == 0 {
		audiences = a.apiAudiences
	}
	accepted := intersect(tokenAudiences, audiences)
	if len(accepted) == 0 {
		return nil, false, fmt.Errorf("token audiences %q is invalid for the target audiences %q", tokenAudiences, audiences)
	}
	var user authenticationv1.UserInfo
	if c.Issuer == LegacyIssuer {
		user, err = a.validateLegacy(ctx, token, c)
	} else {
		user, err = a.validateBound(ctx, c)
	}
	if err != nil {
		return nil, false, err
	}
	return &authentication.Response{User: user, Audiences: accepted}, true, nil
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// gone reports whether an object marked for deletion stopped vouching for tokens (its deletion
// began more than the leeway ago).
func (a *Authenticator) gone(m metav1.Object) bool {
	ts := m.GetDeletionTimestamp()
	return ts != nil && ts.Time.Before(a.now().Add(-leeway))
}

// validateBound checks a TokenRequest token: its times, then that the account and the bound
// object still exist with the UIDs the token names.
func (a *Authenticator) validateBound(ctx context.Context, c *Claims) (authenticationv1.UserInfo, error) {
	none := authenticationv1.UserInfo{}
	std := jwt.Claims{Expiry: c.Expiry, NotBefore: c.NotBefore, IssuedAt: c.IssuedAt}
	switch err := std.ValidateWithLeeway(jwt.Expected{Time: a.now()}, leeway); {
	case errors.Is(err, jwt.ErrExpired):
		return none, errors.New("service account token has expired")
	case errors.Is(err, jwt.ErrNotValidYet):
		return none, errors.New("service account token is not valid yet")
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return none, errors.New("service account token is issued in the future")
	case err != nil:
		return none, errors.New("service account token claims could not be validated")
	}
	k := c.Kubernetes
	if k == nil || k.Namespace == "" || k.ServiceAccount.Name == "" {
		return none, errors.New("service account token has no kubernetes.io claim naming its service account")
	}
	ns, sa := k.Namespace, k.ServiceAccount
	if c.Subject != Username(ns, sa.Name) {
		return none, errors.New("sub claim is invalid")
	}
	account, err := a.objects.ServiceAccount(ctx, ns, sa.Name)
	if err != nil {
		return none, err
	}
	if string(account.UID) != sa.UID {
		return none, fmt.Errorf("service account UID (%s) does not match claim (%s)", account.UID, sa.UID)
	}
	if a.gone(account) {
		return none, fmt.Errorf("service account %s/%s has been deleted", ns, sa.Name)
	}
	invalidated := errors.New("service account token has been invalidated")
	if ref := k.Secret; ref != nil {
		s, err := a.objects.Secret(ctx, ns, ref.Name)
		if err != nil || a.gone(s) {
			return none, invalidated
		}
		if string(s.UID) != ref.UID {
			return none, fmt.Errorf("secret UID (%s) does not match service account secret ref claim (%s)", s.UID, ref.UID)
		}
	}
	user := userInfo(ns, sa.Name, sa.UID)
	switch {
	case k.Pod != nil:
		p, err := a.objects.Pod(ctx, ns, k.Pod.Name)
		if err != nil || a.gone(p) {
			return none, invalidated
		}
		if string(p.UID) != k.Pod.UID {
			return none, fmt.Errorf("pod UID (%s) does not match service account pod ref claim (%s)", p.UID, k.Pod.UID)
		}
		user.Extra = map[string]authenticationv1.ExtraValue{extraPodName: {k.Pod.Name}, extraPodUID: {k.Pod.UID}}
		// A pod-bound token names its node for information only: the pod vouches for it.
		if n := k.Node; n != nil {
			user.Extra[extraNodeName] = authenticationv1.ExtraValue{n.Name}
			if n.UID != "" {
				user.Extra[extraNodeUID] = authenticationv1.ExtraValue{n.UID}
			}
		}
	case k.Node != nil:
		n, err := a.objects.Node(ctx, k.Node.Name)
		if err != nil || a.gone(n) {
			return none, invalidated
		}
		if string(n.UID) != k.Node.UID {
			return none, fmt.Errorf("node UID (%s) does not match service account node ref claim (%s)", n.UID, k.Node.UID)
		}
		user.Extra = map[string]authenticationv1.ExtraValue{extraNodeName: {k.Node.Name}, extraNodeUID: {k.Node.UID}}
	}
	if c.ID != "" {
		if user.Extra == nil {
			user.Extra = map[string]authenticationv1.ExtraValue{}
		}
		user.Extra[extraCredentialID] = authenticationv1.ExtraValue{"JTI=" + c.ID}
	}
	return user, nil
}

// validateLegacy checks a secret-based token: its secret must still exist and hold exactly this
// token, and its account must exist with the UID the token names.
func (a *Authenticator) validateLegacy(ctx context.Context, token string, c *Claims) (authenticationv1.UserInfo, error) {
	none := authenticationv1.UserInfo{}
	ns, name, uid, secretName := c.LegacyNamespace, c.LegacyName, c.LegacyUID, c.LegacySecretName
	if ns == "" || name == "" || uid == "" || secretName == "" {
		return none, errors.New("legacy service account token is missing a kubernetes.io/serviceaccount claim")
	}
	if subNS, subName, ok := splitUsername(c.Subject); !ok || subNS != ns || subName != name {
		return none, errors.New("sub claim is invalid")
	}
	s, err := a.objects.Secret(ctx, ns, secretName)
	if err != nil || s.DeletionTimestamp != nil {
		return none, errors.New("token has been invalidated")
	}
	if subtle.ConstantTimeCompare(s.Data[corev1.ServiceAccountTokenKey], []byte(token)) != 1 {
		return none, errors.New("token does not match server's copy")
	}
	account, err := a.objects.ServiceAccount(ctx, ns, name)
	if err != nil {
		return none, err
	}
	if account.DeletionTimestamp != nil {
		return none, fmt.Errorf("service account %s/%s has been deleted", ns, name)
	}
	if string(account.UID) != uid {
		return none, fmt.Errorf("service account UID (%s) does not match claim (%s)", account.UID, uid)
	}
	return userInfo(ns, name, uid), nil
}

func userInfo(ns, name, uid string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: Username(ns, name), UID: uid, Groups: []string{AllGroup, groupPrefix + ns}}
}

// splitUsername is Username's inverse.
func splitUsername(user string) (ns, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, userPrefix)
	if !ok {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok && ns != "" && name != "" && !strings.Contains(name, ":")
}
