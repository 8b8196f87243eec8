package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/test/controllerruntime/guestbook"
	"github.com/kplane/kplane/testenv"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// A controller-runtime manager, as a kubebuilder project runs it in its suite_test.go, on
// testenv instead of envtest: the reconciler's owned ConfigMap is garbage-collected with its
// Guestbook, which envtest cannot show.
func TestControllerRuntimeManager(t *testing.T) {
	t.Parallel()
	log.SetLogger(logr.Discard())
	env := testenv.Start(t, testenv.WithCRDObjects(guestbook.CRD()))
	// TODO(lead): the Guestbook's validating webhook, served by the manager's webhook server
	// and registered with testenv.WithValidatingWebhooks, once the apiserver calls webhooks.
	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, guestbook.AddToScheme} {
		if err := add(sch); err != nil {
			t.Fatal(err)
		}
	}
	// Controller names are unique per process unless told otherwise; tests run the same one
	// more than once (-count).
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: sch, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: new(true)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&guestbook.Guestbook{}).Owns(&corev1.ConfigMap{}).Complete(&guestbook.Reconciler{Client: mgr.GetClient()}); err != nil {
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
