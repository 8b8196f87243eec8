package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/apiserver/serviceaccount"
	"github.com/kplane/kplane/internal/testserver"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// clientset is a client-go client of the package's server, with token as its bearer token.
func clientset(t *testing.T, token string) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL, BearerToken: token, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// payload decodes a token's claims without checking them.
func payload(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a compact JWS", token)
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// requestToken asks for a token of account name in ns.
func requestToken(t *testing.T, ns, name string, spec authenticationv1.TokenRequestSpec) (*authenticationv1.TokenRequest, error) {
	t.Helper()
	return clientset(t, "").CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
}

// listPods lists pods in ns as the holder of token and returns the error (nil: accepted).
func listPods(t *testing.T, ns, token string) error {
	t.Helper()
	_, err := clientset(t, token).CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	return err
}

// unauthorized checks that err is Kubernetes' 401: a Status with reason Unauthorized.
func unauthorized(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsUnauthorized(err) {
		t.Fatalf("%s: got %v, want 401 Unauthorized", what, err)
	}
	if s := err.(apierrors.APIStatus).Status(); s.Code != http.StatusUnauthorized || s.Message != "Unauthorized" {
		t.Fatalf("%s: status %+v", what, s)
	}
}

func createAccount(t *testing.T, ns, name string) *corev1.ServiceAccount {
	t.Helper()
	sa, err := clientset(t, "").CoreV1().ServiceAccounts(ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// TestTokenRequest: a token is issued as Kubernetes writes it, and the server accepts it (client-go
// with the token as its bearer, TokenReview, SelfSubjectReview).
func TestTokenRequest(t *testing.T) {
	ns := namespace(t)
	sa := createAccount(t, ns, "robot")
	before := time.Now().Add(-time.Second)
	tr, err := requestToken(t, ns, "robot", authenticationv1.TokenRequestSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Name != "robot" || tr.Namespace != ns || tr.UID != sa.UID || tr.CreationTimestamp.IsZero() {
		t.Errorf("request metadata %+v", tr.ObjectMeta)
	}
	if got := tr.Spec.Audiences; len(got) != 1 || got[0] != apiserver.DefaultServiceAccountIssuer {
		t.Errorf("default audiences %v", got)
	}
	if tr.Spec.ExpirationSeconds == nil || *tr.Spec.ExpirationSeconds != 3600 {
		t.Errorf("default expirationSeconds %v", tr.Spec.ExpirationSeconds)
	}
	if exp := tr.Status.ExpirationTimestamp.Time; exp.Before(before.Add(time.Hour)) || exp.After(time.Now().Add(time.Hour)) {
		t.Errorf("status.expirationTimestamp %v, want an hour from now", exp)
	}
	c := payload(t, tr.Status.Token)
	if c["iss"] != apiserver.DefaultServiceAccountIssuer || c["sub"] != "system:serviceaccount:"+ns+":robot" {
		t.Errorf("iss, sub: %v", c)
	}
	if aud, _ := json.Marshal(c["aud"]); string(aud) != `["`+apiserver.DefaultServiceAccountIssuer+`"]` {
		t.Errorf("aud %s, want a list", aud)
	}
	if exp, iat, nbf := c["exp"].(float64), c["iat"].(float64), c["nbf"].(float64); exp-iat != 3600 || nbf != iat {
		t.Errorf("exp %v iat %v nbf %v", exp, iat, nbf)
	}
	if jti, _ := c["jti"].(string); jti == "" {
		t.Errorf("no jti")
	}
	want := map[string]any{"namespace": ns, "serviceaccount": map[string]any{"name": "robot", "uid": string(sa.UID)}}
	if got, _ := json.Marshal(c["kubernetes.io"]); string(got) != string(mustJSON(t, want)) {
		t.Errorf("kubernetes.io claim %s, want %s", got, mustJSON(t, want))
	}

	if err := listPods(t, ns, tr.Status.Token); err != nil {
		t.Fatalf("request with the token: %v", err)
	}
	review, err := clientset(t, "").AuthenticationV1().TokenReviews().Create(context.Background(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := review.Status
	if !st.Authenticated || st.User.Username != "system:serviceaccount:"+ns+":robot" || st.User.UID != string(sa.UID) ||
		strings.Join(st.User.Groups, ",") != "system:serviceaccounts,system:serviceaccounts:"+ns+",system:authenticated" ||
		!strings.HasPrefix(st.User.Extra["authentication.kubernetes.io/credential-id"].String(), "[JTI=") {
		t.Errorf("token review %+v", st)
	}
	who, err := clientset(t, tr.Status.Token).AuthenticationV1().SelfSubjectReviews().Create(context.Background(),
		&authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || who.Status.UserInfo.Username != st.User.Username {
		t.Errorf("self subject review: %+v, %v", who, err)
	}
	anon, err := clientset(t, "").AuthenticationV1().SelfSubjectReviews().Create(context.Background(),
		&authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || anon.Status.UserInfo.Username != "system:anonymous" {
		t.Errorf("anonymous self subject review: %+v, %v", anon, err)
	}

	// Another audience is good for that audience, not for this server.
	other, err := requestToken(t, ns, "robot", authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}, ExpirationSeconds: new(int64(7200))})
	if err != nil {
		t.Fatal(err)
	}
	if c := payload(t, other.Status.Token); c["exp"].(float64)-c["iat"].(float64) != 7200 {
		t.Errorf("expirationSeconds 7200: %v", c)
	}
	unauthorized(t, "a token for another audience", listPods(t, ns, other.Status.Token))
	review, err = clientset(t, "").AuthenticationV1().TokenReviews().Create(context.Background(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: other.Status.Token, Audiences: []string{"vault"}}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated || strings.Join(review.Status.Audiences, ",") != "vault" {
		t.Errorf("review for the token's audience: %+v %v", review, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTokenRequestErrors: bad requests get Kubernetes' codes and change nothing.
func TestTokenRequestErrors(t *testing.T) {
	ns := namespace(t)
	createAccount(t, ns, "robot")
	ctx := context.Background()
	cs := clientset(t, "")
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{ServiceAccountName: "robot", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := func(kind, name string, uid types.UID) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: kind, APIVersion: "v1", Name: name, UID: uid}
	}
	for _, tc := range []struct {
		name     string
		account  string
		spec     authenticationv1.TokenRequestSpec
		code     int32
		contains string
	}{
		{"missing account", "nobody", authenticationv1.TokenRequestSpec{}, 404, `serviceaccounts "nobody" not found`},
		{"too short", "robot", authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(599))}, 422, "may not specify a duration less than 10 minutes"},
		{"too long", "robot", authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(1<<32 + 1))}, 422, "may not specify a duration larger than 2^32 seconds"},
		{"missing pod", "robot", authenticationv1.TokenRequestSpec{BoundObjectRef: ref("Pod", "gone", "")}, 404, `pods "gone" not found`},
		{"pod of another UID", "robot", authenticationv1.TokenRequestSpec{BoundObjectRef: ref("Pod", "p", "not-"+pod.UID)}, 409, "does not match the UID in record"},
		{"pod of another account", "robot", authenticationv1.TokenRequestSpec{BoundObjectRef: ref("Pod", other.Name, "")}, 400, "to pod running with different serviceaccount name"},
		{"missing secret", "robot", authenticationv1.TokenRequestSpec{BoundObjectRef: ref("Secret", "gone", "")}, 404, `secrets "gone" not found`},
		{"unsupported kind", "robot", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Deployment", APIVersion: "apps/v1", Name: "d"}}, 400, "cannot bind token to object of type apps/v1, Kind=Deployment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := requestToken(t, ns, tc.account, tc.spec)
			s, ok := err.(apierrors.APIStatus)
			if !ok || s.Status().Code != tc.code || !strings.Contains(s.Status().Message, tc.contains) {
				t.Fatalf("got %v, want %d containing %q", err, tc.code, tc.contains)
			}
		})
	}
	// A name in the body must be the account's.
	_, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "robot",
		&authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must match the service account name") {
		t.Errorf("mismatched name: %v", err)
	}
	r := do(t, "GET", "/api/v1/namespaces/"+ns+"/serviceaccounts/robot/token", nil)
	if r.code != http.StatusMethodNotAllowed {
		t.Errorf("GET token: %d %s", r.code, r.body)
	}
}

// TestBoundTokenRevocation: a token bound to a pod or secret dies with its object, and every
// token dies with its service account, even when one of the same name replaces it.
func TestBoundTokenRevocation(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	cs := clientset(t, "")
	createAccount(t, ns, "robot")
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{ServiceAccountName: "robot", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podToken, err := requestToken(t, ns, "robot", authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "p", UID: pod.UID}})
	if err != nil {
		t.Fatal(err)
	}
	k8s := payload(t, podToken.Status.Token)["kubernetes.io"].(map[string]any)
	if p := k8s["pod"].(map[string]any); p["name"] != "p" || p["uid"] != string(pod.UID) {
		t.Errorf("pod claim %v", p)
	}
	secretToken, err := requestToken(t, ns, "robot", authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := requestToken(t, ns, "robot", authenticationv1.TokenRequestSpec{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{podToken.Status.Token, secretToken.Status.Token, plain.Status.Token} {
		if err := listPods(t, ns, tok); err != nil {
			t.Fatalf("fresh token refused: %v", err)
		}
	}
	revoked := func(what, token string) {
		t.Helper()
		testserver.Eventually(t, what, 10*time.Second, func() bool { return apierrors.IsUnauthorized(listPods(t, ns, token)) })
		unauthorized(t, what, listPods(t, ns, token))
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	revoked("the token of a deleted pod", podToken.Status.Token)
	// A pod of the same name is another pod.
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{ServiceAccountName: "robot", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unauthorized(t, "the token of a pod replaced by another of its name", listPods(t, ns, podToken.Status.Token))

	if err := cs.CoreV1().Secrets(ns).Delete(ctx, secret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	revoked("the token of a deleted secret", secretToken.Status.Token)

	if err := listPods(t, ns, plain.Status.Token); err != nil {
		t.Fatalf("unbound token refused: %v", err)
	}
	if err := cs.CoreV1().ServiceAccounts(ns).Delete(ctx, "robot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createAccount(t, ns, "robot")
	revoked("the token of a replaced service account", plain.Status.Token)
}

// TestForgedAndExpiredTokens: tokens that are not the server's own, or no longer valid, get 401
// (a Status with reason Unauthorized); a loopback server without a token file still serves
// requests that present no token at all.
func TestForgedAndExpiredTokens(t *testing.T) {
	ns := namespace(t)
	sa := createAccount(t, ns, "robot")
	key, err := serviceaccount.LoadPrivateKey(server.ServiceAccountKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := serviceaccount.NewSigner(apiserver.DefaultServiceAccountIssuer, key)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := serviceaccount.NewSigner(apiserver.DefaultServiceAccountIssuer, stranger)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := serviceaccount.NewSigner("https://elsewhere", key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := func(from, to time.Time) serviceaccount.Claims {
		return serviceaccount.Claims{
			Subject: serviceaccount.Username(ns, "robot"), Audience: serviceaccount.Audience{apiserver.DefaultServiceAccountIssuer},
			IssuedAt: jwt.NewNumericDate(from), NotBefore: jwt.NewNumericDate(from), Expiry: jwt.NewNumericDate(to),
			Kubernetes: &serviceaccount.Private{Namespace: ns, ServiceAccount: serviceaccount.Ref{Name: "robot", UID: string(sa.UID)}},
		}
	}
	sign := func(s *serviceaccount.Signer, c serviceaccount.Claims) string {
		tok, err := s.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := sign(ours, claims(now, now.Add(time.Hour)))
	if err := listPods(t, ns, good); err != nil {
		t.Fatalf("a token signed with the server's key: %v", err)
	}
	// The payload of a good token swapped for another account's, the signature kept.
	altered := func() string {
		c := claims(now, now.Add(time.Hour))
		c.Issuer = apiserver.DefaultServiceAccountIssuer
		c.Subject = serviceaccount.Username(ns, "admin")
		c.Kubernetes.ServiceAccount.Name = "admin"
		parts := strings.Split(good, ".")
		parts[1] = base64.RawURLEncoding.EncodeToString(mustJSON(t, c))
		return strings.Join(parts, ".")
	}()
	wrongUID := claims(now, now.Add(time.Hour))
	wrongUID.Kubernetes.ServiceAccount.UID = "not-" + string(sa.UID)
	for _, tc := range []struct{ name, token string }{
		{"expired", sign(ours, claims(now.Add(-3*time.Hour), now.Add(-2*time.Hour)))},
		{"not valid yet", sign(ours, claims(now.Add(2*time.Hour), now.Add(3*time.Hour)))},
		{"signed with another key", sign(theirs, claims(now, now.Add(time.Hour)))},
		{"claims altered after signing", altered},
		{"another issuer", sign(elsewhere, claims(now, now.Add(time.Hour)))},
		{"another account UID", sign(ours, wrongUID)},
		{"not a JWT", "s3cret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unauthorized(t, tc.name, listPods(t, ns, tc.token))
			r := do(t, "GET", "/api/v1/namespaces/"+ns+"/pods", nil, "Authorization", "Bearer "+tc.token)
			if r.code != http.StatusUnauthorized || get(r.object(t), "reason") != "Unauthorized" || get(r.object(t), "kind") != "Status" {
				t.Errorf("raw answer %d %s", r.code, r.body)
			}
		})
	}
	// The server serves requests without credentials on loopback.
	if err := listPods(t, ns, ""); err != nil {
		t.Fatalf("anonymous request: %v", err)
	}
	// TokenReview says why a token is refused.
	review, err := clientset(t, "").AuthenticationV1().TokenReviews().Create(context.Background(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: sign(ours, claims(now.Add(-3*time.Hour), now.Add(-2*time.Hour)))}}, metav1.CreateOptions{})
	if err != nil || review.Status.Authenticated || !strings.Contains(review.Status.Error, "expired") {
		t.Errorf("review of an expired token: %+v %v", review, err)
	}
	if _, err := clientset(t, "").AuthenticationV1().TokenReviews().Create(context.Background(),
		&authenticationv1.TokenReview{}, metav1.CreateOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("review without a token: %v", err)
	}
}

// TestLegacyToken: a secret-based token is accepted while its Secret holds it and its account
// exists.
func TestLegacyToken(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	cs := clientset(t, "")
	sa := createAccount(t, ns, "robot")
	key, err := serviceaccount.LoadPrivateKey(server.ServiceAccountKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := serviceaccount.NewSigner(serviceaccount.LegacyIssuer, key)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "robot-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "robot"}},
		Type: corev1.SecretTypeServiceAccountToken}
	token, err := serviceaccount.LegacyToken(legacy, sa, secret)
	if err != nil {
		t.Fatal(err)
	}
	unauthorized(t, "before the secret holds it", listPods(t, ns, token))
	secret.Data = map[string][]byte{corev1.ServiceAccountTokenKey: []byte(token)}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := listPods(t, ns, token); err != nil {
		t.Fatalf("legacy token: %v", err)
	}
	if c := payload(t, token); c["iss"] != "kubernetes/serviceaccount" || c["kubernetes.io/serviceaccount/secret.name"] != "robot-token" || c["exp"] != nil {
		t.Errorf("legacy claims %v", c)
	}
	if err := cs.CoreV1().Secrets(ns).Delete(ctx, "robot-token", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the legacy token refused", 10*time.Second, func() bool { return apierrors.IsUnauthorized(listPods(t, ns, token)) })
}

// TestTLSOnThePlainPort: the loopback server that speaks plain HTTP answers TLS on the same
// port, with the data dir's certificate, valid for the names in-cluster clients dial; client-go
// set up as rest.InClusterConfig sets it up (CA file, bearer token) works over it, with HTTP/2.
func TestTLSOnThePlainPort(t *testing.T) {
	ns := namespace(t)
	createAccount(t, ns, "robot")
	tr, err := requestToken(t, ns, "robot", authenticationv1.TokenRequestSpec{})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(server.URL, "http://")
	ca, err := os.ReadFile(server.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	for _, name := range []string{"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.0.0.1"} {
		conn, err := tls.Dial("tcp", host, &tls.Config{RootCAs: pool, ServerName: name, NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatalf("TLS as %s: %v", name, err)
		}
		if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Errorf("negotiated %q, want h2", p)
		}
		conn.Close()
	}
	// A connection that never speaks holds up no one.
	silent, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: server.CAFile, ServerName: "kubernetes.default.svc"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("client-go over TLS: %v", err)
	}
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || who.Status.UserInfo.Username != "system:serviceaccount:"+ns+":robot" {
		t.Errorf("whoami over TLS: %+v %v", who, err)
	}
	if r := do(t, "GET", "/api/v1/namespaces/"+ns, nil); r.code != http.StatusOK {
		t.Errorf("plain HTTP beside TLS: %d", r.code)
	}
}

// TestKubernetesServiceEndpoints: the kubernetes service points at this server's port, through
// Endpoints and an EndpointSlice, as Kubernetes' endpoint reconciler writes them.
func TestKubernetesServiceEndpoints(t *testing.T) {
	ctx := context.Background()
	cs := clientset(t, "")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(server.URL, "http://"))
	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != "10.0.0.1" || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != port {
		t.Fatalf("kubernetes service %+v %v", svc, err)
	}
	ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(ep.Subsets) != 1 || ep.Subsets[0].Addresses[0].IP != "127.0.0.1" || fmt.Sprint(ep.Subsets[0].Ports[0].Port) != port {
		t.Fatalf("kubernetes endpoints %+v %v", ep, err)
	}
	slice, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || slice.Labels["kubernetes.io/service-name"] != "kubernetes" || slice.Endpoints[0].Addresses[0] != "127.0.0.1" ||
		fmt.Sprint(*slice.Ports[0].Port) != port || *slice.Ports[0].Name != "https" || !*slice.Endpoints[0].Conditions.Ready {
		t.Fatalf("kubernetes endpointslice %+v %v", slice, err)
	}
}

// TestServiceAccountAdmission: pods get their account's credentials projected, as Kubernetes'
// ServiceAccount admission gives them; a pod naming an account that does not exist is refused.
func TestServiceAccountAdmission(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	cs := clientset(t, "")
	pod := func(name string, mutate func(*corev1.PodSpec)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "i"}}, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
		if mutate != nil {
			mutate(&p.Spec)
		}
		return p
	}
	// No "default" account in this namespace (no controller manager here): admitted anyway.
	got, err := cs.CoreV1().Pods(ns).Create(ctx, pod("plain", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	if s.ServiceAccountName != "default" || s.DeprecatedServiceAccount != "default" || len(s.Volumes) != 1 {
		t.Fatalf("admitted spec: account %q/%q, volumes %+v", s.ServiceAccountName, s.DeprecatedServiceAccount, s.Volumes)
	}
	v := s.Volumes[0]
	if !regexp.MustCompile(`^kube-api-access-[a-z0-9]{5}$`).MatchString(v.Name) || v.Projected == nil || !apiequality.Semantic.DeepEqual(v.Projected, serviceaccount.TokenVolumeSource()) {
		t.Errorf("volume %+v", v)
	}
	for _, c := range append(s.InitContainers, s.Containers...) {
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0] != (corev1.VolumeMount{Name: v.Name, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}) {
			t.Errorf("container %s mounts %+v", c.Name, c.VolumeMounts)
		}
	}
	off, err := cs.CoreV1().Pods(ns).Create(ctx, pod("off", func(s *corev1.PodSpec) { s.AutomountServiceAccountToken = new(false) }), metav1.CreateOptions{})
	if err != nil || len(off.Spec.Volumes) != 0 || len(off.Spec.Containers[0].VolumeMounts) != 0 {
		t.Errorf("automount false: %+v %v", off, err)
	}
	createAccount(t, ns, "robot")
	named, err := cs.CoreV1().Pods(ns).Create(ctx, pod("named", func(s *corev1.PodSpec) { s.ServiceAccountName = "robot" }), metav1.CreateOptions{})
	if err != nil || named.Spec.ServiceAccountName != "robot" || len(named.Spec.Volumes) != 1 {
		t.Errorf("pod of robot: %+v %v", named, err)
	}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod("lost", func(s *corev1.PodSpec) { s.ServiceAccountName = "ghost" }), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || err.Error() != `pods "lost" is forbidden: error looking up service account `+ns+`/ghost: serviceaccount "ghost" not found` {
		t.Errorf("pod of a missing account: %v", err)
	}
	if _, err := cs.CoreV1().Pods(ns).Get(ctx, "lost", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused pod was stored: %v", err)
	}
}
