// Package controllerruntime runs a controller-runtime manager (the framework most operators
// are built with) against kplane's apiserver: a custom type defined by a CRD, a reconciler
// that owns a ConfigMap per object and writes the object's status, as a kubebuilder project
// would. controller-runtime is a test-only dependency, a real peer like client-go.
package controllerruntime

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/test/controllerruntime/guestbook"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func TestManagerReconcilesCustomResources(t *testing.T) {
	log.SetLogger(logr.Discard())
	srv, err := testserver.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cfg := &rest.Config{Host: srv.URL}

	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, apiextv1.AddToScheme, guestbook.AddToScheme} {
		if err := add(sch); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, guestbook.CRD()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "CRD established", func() bool {
		var crd apiextv1.CustomResourceDefinition
		if c.Get(ctx, types.NamespacedName{Name: "guestbooks.webapp.example.com"}, &crd) != nil {
			return false
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
				return true
			}
		}
		return false
	})

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: sch, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&guestbook.Guestbook{}).Owns(&corev1.ConfigMap{}).Complete(&guestbook.Reconciler{Client: mgr.GetClient()}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("cr-", os.Getpid())}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	gb := &guestbook.Guestbook{ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: ns.Name}, Spec: guestbook.GuestbookSpec{Replicas: 3}}
	if err := c.Create(ctx, gb); err != nil {
		t.Fatal(err)
	}
	if gb.Spec.Greeting != "hello" {
		t.Errorf("greeting %q: the schema's default is not in the created object", gb.Spec.Greeting)
	}
	key := types.NamespacedName{Namespace: ns.Name, Name: "front"}
	cmKey := types.NamespacedName{Namespace: ns.Name, Name: "gb-front"}
	expectState := func(replicas string) {
		t.Helper()
		eventually(t, "status and ConfigMap at "+replicas, func() bool {
			var got guestbook.Guestbook
			var cm corev1.ConfigMap
			if c.Get(ctx, key, &got) != nil || c.Get(ctx, cmKey, &cm) != nil {
				return false
			}
			owned := len(cm.OwnerReferences) == 1 && cm.OwnerReferences[0].Kind == "Guestbook" && cm.OwnerReferences[0].UID == got.UID
			return strconv.Itoa(int(got.Status.ObservedReplicas)) == replicas && cm.Data["replicas"] == replicas && owned
		})
	}
	expectState("3")

	// A spec change reaches the reconciler through the custom resource's watch.
	if err := c.Get(ctx, key, gb); err != nil {
		t.Fatal(err)
	}
	gb.Spec.Replicas = 5
	if err := c.Update(ctx, gb); err != nil {
		t.Fatal(err)
	}
	expectState("5")

	// The owned ConfigMap, deleted, comes back through the Owns watch.
	if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmKey.Name, Namespace: cmKey.Namespace}}); err != nil {
		t.Fatal(err)
	}
	expectState("5")

	// The schema still holds for typed clients: a negative replica count is refused.
	gb.Spec.Replicas = -1
	if err := c.Get(ctx, key, gb); err == nil {
		gb.Spec.Replicas = -1
		if err := c.Update(ctx, gb); !apierrors.IsInvalid(err) {
			t.Errorf("update with replicas -1: %v, want Invalid", err)
		}
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
