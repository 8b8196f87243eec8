package serviceaccount

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// objects is an in-memory Objects: what exists, by "kind/namespace/name".
type objects map[string]metav1.Object

func (o objects) get(kind, ns, name string) (metav1.Object, error) {
	if obj, ok := o[kind+"/"+ns+"/"+name]; ok {
		return obj, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: kind}, name)
}

func lookup[T metav1.Object](o objects, kind, ns, name string) (T, error) {
	obj, err := o.get(kind, ns, name)
	if err != nil {
		var zero T
		return zero, err
	}
	return obj.(T), nil
}

func (o objects) ServiceAccount(_ context.Context, ns, name string) (*corev1.ServiceAccount, error) {
	return lookup[*corev1.ServiceAccount](o, "serviceaccounts", ns, name)
}
func (o objects) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	return lookup[*corev1.Pod](o, "pods", ns, name)
}
func (o objects) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	return lookup[*corev1.Secret](o, "secrets", ns, name)
}
func (o objects) Node(_ context.Context, name string) (*corev1.Node, error) {
	return lookup[*corev1.Node](o, "nodes", "", name)
}

func meta(ns, name, uid string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}
}

const issuer = "https://kubernetes.default.svc.cluster.local"

var audiences = []string{issuer}

// TestIssueAndAuthenticate: tokens the Issuer makes are accepted while what they name exists,
// and refused once it does not, is replaced, or the token's times are out of range.
func TestIssueAndAuthenticate(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := NewSigner(issuer, key)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := NewPublicKeys([]crypto.PublicKey{key.Public()})
	if err != nil {
		t.Fatal(err)
	}
	deleting := metav1.NewTime(time.Now().Add(-2 * time.Minute))
	base := func() objects {
		return objects{
			"serviceaccounts/ns/robot": &corev1.ServiceAccount{ObjectMeta: meta("ns", "robot", "sa-1")},
			"pods/ns/web":              &corev1.Pod{ObjectMeta: meta("ns", "web", "pod-1"), Spec: corev1.PodSpec{ServiceAccountName: "robot", NodeName: "n1"}},
			"nodes//n1":                &corev1.Node{ObjectMeta: meta("", "n1", "node-1")},
			"secrets/ns/s":             &corev1.Secret{ObjectMeta: meta("ns", "s", "secret-1")},
		}
	}
	issue := func(t *testing.T, objs objects, spec authenticationv1.TokenRequestSpec) string {
		t.Helper()
		tr, err := NewIssuer(signer, audiences).RequestToken(context.Background(), objs, "ns", "robot", &authenticationv1.TokenRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	podRef := &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web"}
	for _, tc := range []struct {
		name   string
		spec   authenticationv1.TokenRequestSpec
		change func(objects) // applied after the token is issued
		at     time.Duration // the authenticator's clock, from now
		want   string        // "" accepted, else part of the error
		extra  map[string]string
	}{
		{name: "unbound", want: ""},
		{name: "pod-bound", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef},
			extra: map[string]string{extraPodName: "web", extraPodUID: "pod-1", extraNodeName: "n1", extraNodeUID: "node-1"}},
		{name: "pod deleted", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef},
			change: func(o objects) { delete(o, "pods/ns/web") }, want: "invalidated"},
		{name: "pod replaced", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef},
			change: func(o objects) { o["pods/ns/web"] = &corev1.Pod{ObjectMeta: meta("ns", "web", "pod-2")} }, want: "does not match service account pod ref claim"},
		{name: "pod being deleted for over a minute", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef},
			change: func(o objects) { o["pods/ns/web"].SetDeletionTimestamp(&deleting) }, want: "invalidated"},
		{name: "secret deleted", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "s"}},
			change: func(o objects) { delete(o, "secrets/ns/s") }, want: "invalidated"},
		{name: "node-bound, node replaced", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "n1"}},
			change: func(o objects) { o["nodes//n1"] = &corev1.Node{ObjectMeta: meta("", "n1", "node-2")} }, want: "does not match service account node ref claim"},
		{name: "account replaced", change: func(o objects) {
			o["serviceaccounts/ns/robot"] = &corev1.ServiceAccount{ObjectMeta: meta("ns", "robot", "sa-2")}
		}, want: "does not match claim"},
		{name: "account deleted", change: func(o objects) { delete(o, "serviceaccounts/ns/robot") }, want: "not found"},
		{name: "expired (beyond the leeway)", at: time.Hour + 2*time.Minute, want: "expired"},
		{name: "expired within the leeway", at: time.Hour + 30*time.Second},
		{name: "before nbf", at: -2 * time.Minute, want: "not valid yet"},
		{name: "another audience", spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}}, want: "invalid for the target audiences"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := base()
			token := issue(t, objs, tc.spec)
			if tc.change != nil {
				tc.change(objs)
			}
			a := NewAuthenticator([]string{issuer}, keys, audiences, objs)
			a.now = func() time.Time { return time.Now().Add(tc.at) }
			resp, ok, err := a.AuthenticateToken(context.Background(), token, nil)
			if tc.want != "" {
				if ok || err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got ok=%v err=%v, want an error containing %q", ok, err, tc.want)
				}
				return
			}
			if !ok || err != nil {
				t.Fatalf("refused: %v", err)
			}
			if resp.User.Username != "system:serviceaccount:ns:robot" || resp.User.UID != "sa-1" ||
				strings.Join(resp.User.Groups, ",") != "system:serviceaccounts,system:serviceaccounts:ns" {
				t.Errorf("user %+v", resp.User)
			}
			for k, v := range tc.extra {
				if got := resp.User.Extra[k]; len(got) != 1 || got[0] != v {
					t.Errorf("extra %s = %v, want %s", k, got, v)
				}
			}
		})
	}
}

// TestProjectedTokenLifetime: the kubelet's 3607-second pod-bound request gets a year-long
// token with warnafter at the hour; other lifetimes are what was asked.
func TestProjectedTokenLifetime(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signer, _ := NewSigner(issuer, key)
	keys, _ := NewPublicKeys([]crypto.PublicKey{key.Public()})
	objs := objects{
		"serviceaccounts/ns/robot": &corev1.ServiceAccount{ObjectMeta: meta("ns", "robot", "sa-1")},
		"pods/ns/web":              &corev1.Pod{ObjectMeta: meta("ns", "web", "pod-1"), Spec: corev1.PodSpec{ServiceAccountName: "robot"}},
	}
	for _, tc := range []struct {
		name      string
		seconds   int64
		pod       bool
		lifetime  int64
		warnAfter bool
	}{
		{"projected", ProjectedExpirationSeconds, true, extendedExpirationSeconds, true},
		{"projected lifetime without a pod", ProjectedExpirationSeconds, false, ProjectedExpirationSeconds, false},
		{"other lifetime with a pod", 3600, true, 3600, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: &tc.seconds}
			if tc.pod {
				spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web"}
			}
			tr, err := NewIssuer(signer, audiences).RequestToken(context.Background(), objs, "ns", "robot", &authenticationv1.TokenRequest{Spec: spec})
			if err != nil {
				t.Fatal(err)
			}
			c, err := verify(tr.Status.Token, keys)
			if err != nil {
				t.Fatal(err)
			}
			if got := int64(*c.Expiry) - int64(*c.IssuedAt); got != tc.lifetime {
				t.Errorf("lifetime %d, want %d", got, tc.lifetime)
			}
			if (c.Kubernetes.WarnAfter != nil) != tc.warnAfter {
				t.Errorf("warnafter %v", c.Kubernetes.WarnAfter)
			}
			if got := tr.Status.ExpirationTimestamp.Sub(tr.CreationTimestamp.Time); got != time.Duration(tc.seconds)*time.Second {
				t.Errorf("status says %v", got)
			}
		})
	}
}

// TestLegacyTokens: a secret-based token is accepted only while its Secret holds exactly it.
func TestLegacyTokens(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	signer, err := NewSigner(LegacyIssuer, key)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := NewPublicKeys([]crypto.PublicKey{key.Public()})
	sa := &corev1.ServiceAccount{ObjectMeta: meta("ns", "robot", "sa-1")}
	secret := &corev1.Secret{ObjectMeta: meta("ns", "robot-token", "s-1")}
	token, err := LegacyToken(signer, sa, secret)
	if err != nil {
		t.Fatal(err)
	}
	withData := func(data string) *corev1.Secret {
		s := secret.DeepCopy()
		s.Data = map[string][]byte{corev1.ServiceAccountTokenKey: []byte(data)}
		return s
	}
	for _, tc := range []struct {
		name string
		objs objects
		want string
	}{
		{"held", objects{"serviceaccounts/ns/robot": sa, "secrets/ns/robot-token": withData(token)}, ""},
		{"secret gone", objects{"serviceaccounts/ns/robot": sa}, "invalidated"},
		{"secret holds another token", objects{"serviceaccounts/ns/robot": sa, "secrets/ns/robot-token": withData("other")}, "does not match"},
		{"account gone", objects{"secrets/ns/robot-token": withData(token)}, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ok, err := NewAuthenticator([]string{issuer}, keys, audiences, tc.objs).AuthenticateToken(context.Background(), token, nil)
			if tc.want == "" && (!ok || err != nil) {
				t.Fatalf("refused: %v", err)
			}
			if tc.want != "" && (ok || err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got ok=%v err=%v, want %q", ok, err, tc.want)
			}
		})
	}
	// Tokens of other issuers are not this authenticator's to judge.
	if _, ok, err := NewAuthenticator([]string{issuer}, keys, audiences, objects{}).AuthenticateToken(context.Background(), "abc.def.ghi", nil); ok || err != nil {
		t.Errorf("a foreign token: ok=%v err=%v", ok, err)
	}
}

// TestKeyFiles: the PEM forms Kubernetes' key flags take.
func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	generated := filepath.Join(dir, "sa.key")
	if err := EnsurePrivateKey(generated); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(generated)
	if err := EnsurePrivateKey(generated); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(generated); string(after) != string(before) {
		t.Fatal("EnsurePrivateKey replaced an existing key")
	}
	if _, err := LoadPrivateKey(generated); err != nil {
		t.Fatal(err)
	}
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	pub, _ := x509.MarshalPKIXPublicKey(rsaKey.Public())
	write := func(name string, blocks ...*pem.Block) string {
		var data []byte
		for _, b := range blocks {
			data = append(data, pem.EncodeToMemory(b)...)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name            string
		file            string
		private, public int // keys found (private: 1 or 0)
	}{
		{"PKCS#1", write("a", &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}), 1, 1},
		{"PKCS#8", write("b", &pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 1, 1},
		{"public key and private key", write("c", &pem.Block{Type: "PUBLIC KEY", Bytes: pub}, &pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 1, 2},
		{"public only", write("d", &pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0, 1},
		{"nothing", write("e", &pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("x")}), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPrivateKey(tc.file)
			if (err == nil) != (tc.private == 1) {
				t.Errorf("LoadPrivateKey: %v", err)
			}
			keys, err := LoadPublicKeys(tc.file)
			if len(keys) != tc.public || (err == nil) != (tc.public > 0) {
				t.Errorf("LoadPublicKeys: %d keys, %v", len(keys), err)
			}
		})
	}
	// A token's header names its key, as Kubernetes derives it.
	signer, _ := NewSigner(issuer, rsaKey)
	tok, _ := signer.Sign(Claims{Subject: "x", Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))})
	parsed, err := jwt.ParseSigned(tok, signedAlgorithms)
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := keyID(rsaKey.Public())
	if h := parsed.Headers[0]; h.KeyID != kid || h.Algorithm != "RS256" {
		t.Errorf("header %+v, want kid %s RS256", h, kid)
	}
}
