package testenv_test

import (
	"context"
	"errors"
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
	// The webhook configuration names a Service, as kubebuilder generates it; testenv points
	// it at env.WebhookServer, where the manager's webhook server then listens.
	env := testenv.Start(t, testenv.WithCRDObjects(guestbook.CRD()), testenv.WithValidatingWebhooks(guestbookWebhook()))
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
		WebhookServer: webhook.NewServer(webhook.Options{Host: env.WebhookServer.Host, Port: env.WebhookServer.Port, CertDir: env.WebhookServer.CertDir})})
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
func guestbookWebhook() *admissionregistrationv1.ValidatingWebhookConfiguration {
	none, fail := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail
	path := "/validate-webapp-example-com-v1-guestbook"
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "guestbook-validation"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "vguestbook.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: "system", Name: "webhook-service", Path: &path}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"webapp.example.com"}, APIVersions: []string{"v1"}, Resources: []string{"guestbooks"}},
			}},
			SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
		}},
	}
}
