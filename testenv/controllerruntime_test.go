package testenv_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/test/controllerruntime/guestbook"
	"github.com/kplane/kplane/testenv"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// A controller-runtime manager, as a kubebuilder project runs it in its suite_test.go, on
// testenv instead of envtest: its validating webhook refuses what it should, and the
// reconciler's owned ConfigMap is garbage-collected with its Guestbook, which envtest cannot
// show.
func TestControllerRuntimeManager(t *testing.T) {
	t.Parallel()
	log.SetLogger(logr.Discard())
	// The manager's webhook server listens on a port and certificate chosen before testenv
	// starts, so that the webhook configuration is installed with the CRD.
	certDir, caPEM := webhookCert(t)
	port := freePort(t)
	env := testenv.Start(t, testenv.WithCRDObjects(guestbook.CRD()),
		testenv.WithValidatingWebhooks(guestbookWebhook(fmt.Sprintf("https://127.0.0.1:%d/validate-webapp-example-com-v1-guestbook", port), caPEM)))
	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, guestbook.AddToScheme} {
		if err := add(sch); err != nil {
			t.Fatal(err)
		}
	}
	// Controller names are unique per process unless told otherwise; tests run the same one
	// more than once (-count).
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: sch, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller:    config.Controller{SkipNameValidation: new(true)},
		WebhookServer: webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&guestbook.Guestbook{}).Owns(&corev1.ConfigMap{}).Complete(&guestbook.Reconciler{Client: mgr.GetClient()}); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &guestbook.Guestbook{}).WithValidator(replicasValidator{}).Complete(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	c, err := client.New(env.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	started := mgr.GetWebhookServer().StartedChecker()
	testserver.Eventually(t, "the webhook server serving", 15*time.Second, func() bool { return started(nil) == nil })
	tooBig := &guestbook.Guestbook{ObjectMeta: ctrl.ObjectMeta{Name: "huge", Namespace: "default"}, Spec: guestbook.GuestbookSpec{Replicas: 20}}
	if err := c.Create(ctx, tooBig); err == nil || !strings.Contains(err.Error(), `admission webhook "vguestbook.example.com" denied the request`) ||
		!strings.Contains(err.Error(), "replicas must be at most 10") {
		t.Fatalf("a Guestbook the webhook refuses: %v", err)
	}
	gb := &guestbook.Guestbook{ObjectMeta: ctrl.ObjectMeta{Name: "front", Namespace: "default"}, Spec: guestbook.GuestbookSpec{Replicas: 2}}
	if err := c.Create(ctx, gb); err != nil {
		t.Fatal(err)
	}
	cmKey := types.NamespacedName{Namespace: "default", Name: "gb-front"}
	testserver.Eventually(t, "the Guestbook's status and its ConfigMap", 15*time.Second, func() bool {
		var got guestbook.Guestbook
		var cm corev1.ConfigMap
		return c.Get(ctx, client.ObjectKeyFromObject(gb), &got) == nil && got.Status.ObservedReplicas == 2 &&
			c.Get(ctx, cmKey, &cm) == nil && len(cm.OwnerReferences) == 1
	})
	if err := c.Delete(ctx, gb); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the owned ConfigMap collected", 15*time.Second, func() bool {
		err := c.Get(ctx, cmKey, &corev1.ConfigMap{})
		return err != nil && client.IgnoreNotFound(err) == nil
	})
}

// replicasValidator is the Guestbook's validating webhook: at most 10 replicas.
type replicasValidator struct{}

func (replicasValidator) ValidateCreate(_ context.Context, g *guestbook.Guestbook) (admission.Warnings, error) {
	return nil, checkReplicas(g)
}

func (replicasValidator) ValidateUpdate(_ context.Context, _, g *guestbook.Guestbook) (admission.Warnings, error) {
	return nil, checkReplicas(g)
}

func (replicasValidator) ValidateDelete(context.Context, *guestbook.Guestbook) (admission.Warnings, error) {
	return nil, nil
}

func checkReplicas(g *guestbook.Guestbook) error {
	if g.Spec.Replicas > 10 {
		return errors.New("replicas must be at most 10")
	}
	return nil
}

// guestbookWebhook registers the validator's path, as kubebuilder's generated manifest does.
func guestbookWebhook(url string, caPEM []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	none, fail := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "guestbook-validation"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "vguestbook.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"webapp.example.com"}, APIVersions: []string{"v1"}, Resources: []string{"guestbooks"}},
			}},
			SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// webhookCert writes a self-signed certificate for 127.0.0.1 where controller-runtime's
// webhook server looks (tls.crt, tls.key) and returns the directory and the certificate.
func webhookCert(t *testing.T) (string, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, certPEM
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
