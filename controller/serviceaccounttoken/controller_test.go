package serviceaccounttoken

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver/serviceaccount"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// bearer sends token with every request, as a client of the Secret's token does.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

var (
	c   *client.Client
	srv *testserver.Server
)

func TestMain(m *testing.M) {
	testserver.Main(m, func(s *testserver.Server, cl *client.Client) { srv, c = s, cl })
}

// start runs the controller, signing with the test server's key, until the test ends.
func start(t *testing.T) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx.RootCAFile = srv.CAFile
	o := DefaultOptions()
	o.ServiceAccountKeyFile = srv.ServiceAccountKeyFile
	o.ConcurrentSyncs = 2
	ctrl, err := Entry.New(cctx, o)
	if err != nil || ctrl == nil {
		t.Fatalf("controller: %v %v", ctrl, err)
	}
	testserver.RunControllers(t, cctx, ctrl)
}

func TestOffWithoutKey(t *testing.T) {
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ctrl, err := Entry.Start(cctx); ctrl != nil || err != nil {
		t.Fatalf("without a key: %v %v, want off", ctrl, err)
	}
}

func tokenSecret(name, account string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{corev1.ServiceAccountNameKey: account}},
		Type: corev1.SecretTypeServiceAccountToken}
}

// TestTokenSecrets: a token Secret is filled with a token the API server accepts, the CA and
// the namespace; it goes when its account goes (or never existed), and its token stops working.
func TestTokenSecrets(t *testing.T) {
	ctx := context.Background()
	start(t)
	ns := testserver.Namespace(t, c, "tokens-")
	secrets := client.Resource[*corev1.Secret](c, "secrets").Namespace(ns)
	accounts := client.Resource[*corev1.ServiceAccount](c, "serviceaccounts").Namespace(ns)
	sa, err := accounts.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Create(ctx, tokenSecret("robot-token", "robot")); err != nil {
		t.Fatal(err)
	}
	var filled *corev1.Secret
	testserver.Eventually(t, "the token Secret filled", 10*time.Second, func() bool {
		s, err := secrets.Get(ctx, "robot-token")
		filled = s
		return err == nil && len(s.Data[corev1.ServiceAccountTokenKey]) > 0
	})
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(filled.Data[corev1.ServiceAccountRootCAKey]) != string(ca) || string(filled.Data[corev1.ServiceAccountNamespaceKey]) != ns ||
		filled.Annotations[corev1.ServiceAccountUIDKey] != string(sa.UID) {
		t.Errorf("filled secret: annotations %v, namespace %q, ca.crt %d bytes", filled.Annotations, filled.Data[corev1.ServiceAccountNamespaceKey], len(filled.Data[corev1.ServiceAccountRootCAKey]))
	}
	token := string(filled.Data[corev1.ServiceAccountTokenKey])
	holder, err := client.New(client.Config{Host: srv.URL, Transport: bearer(token), QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Resource[*corev1.Pod](holder, "pods").Namespace(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the Secret's token: %v", err)
	}

	// A CA that changes is rewritten; the token is kept.
	edited := filled.DeepCopy()
	edited.Data[corev1.ServiceAccountRootCAKey] = []byte("stale")
	if _, err := secrets.Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the CA restored", 10*time.Second, func() bool {
		s, err := secrets.Get(ctx, "robot-token")
		return err == nil && string(s.Data[corev1.ServiceAccountRootCAKey]) == string(ca) && string(s.Data[corev1.ServiceAccountTokenKey]) == token
	})

	// A token Secret of an account that does not exist is deleted.
	if _, err := secrets.Create(ctx, tokenSecret("ghost-token", "ghost")); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the orphan token Secret deleted", 10*time.Second, func() bool {
		_, err := secrets.Get(ctx, "ghost-token")
		return client.IsNotFound(err)
	})

	// The account's deletion takes its Secrets, and their tokens stop working.
	if err := accounts.Delete(ctx, "robot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the account's token Secret deleted", 10*time.Second, func() bool {
		_, err := secrets.Get(ctx, "robot-token")
		return client.IsNotFound(err)
	})
	testserver.Eventually(t, "the token refused", 10*time.Second, func() bool {
		_, err := client.Resource[*corev1.Pod](holder, "pods").Namespace(ns).List(ctx, metav1.ListOptions{})
		return apierrors.IsUnauthorized(err)
	})
}

// TestFill: what a token Secret lacks is added, what it has is kept (but the CA, which follows
// the controller's).
func TestFill(t *testing.T) {
	key, err := serviceaccount.LoadPrivateKey(srv.ServiceAccountKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := serviceaccount.NewSigner(serviceaccount.LegacyIssuer, key)
	if err != nil {
		t.Fatal(err)
	}
	ctrl := &Controller{signer: signer, rootCA: []byte("CA")}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "robot", UID: "u1"}}
	for _, tc := range []struct {
		name        string
		data        map[string][]byte
		needsUpdate bool
		keepsToken  bool
	}{
		{"empty", nil, true, false},
		{"complete", map[string][]byte{"token": []byte("t"), "ca.crt": []byte("CA"), "namespace": []byte("ns")}, false, true},
		{"stale CA", map[string][]byte{"token": []byte("t"), "ca.crt": []byte("old"), "namespace": []byte("ns")}, true, true},
		{"no namespace", map[string][]byte{"token": []byte("t"), "ca.crt": []byte("CA")}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tokenSecret("robot-token", "robot")
			s.Namespace, s.Data = "ns", tc.data
			if got := ctrl.needsUpdate(s); got != tc.needsUpdate {
				t.Fatalf("needsUpdate %v", got)
			}
			out, err := ctrl.fill(s, sa)
			if err != nil {
				t.Fatal(err)
			}
			if ctrl.needsUpdate(out) || out.Annotations[corev1.ServiceAccountUIDKey] != "u1" || string(out.Data["ca.crt"]) != "CA" || string(out.Data["namespace"]) != "ns" {
				t.Errorf("filled %+v", out)
			}
			if kept := string(out.Data["token"]) == "t"; kept != tc.keepsToken {
				t.Errorf("token %q", out.Data["token"])
			}
		})
	}
}
