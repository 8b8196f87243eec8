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
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var groupVersion = schema.GroupVersion{Group: "webapp.example.com", Version: "v1"}

// Guestbook is the custom type, written as kubebuilder would generate it.
type Guestbook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GuestbookSpec   `json:"spec,omitempty"`
	Status            GuestbookStatus `json:"status,omitempty"`
}

type GuestbookSpec struct {
	Replicas int32  `json:"replicas,omitempty"`
	Greeting string `json:"greeting,omitempty"`
}

type GuestbookStatus struct {
	ObservedReplicas int32 `json:"observedReplicas,omitempty"`
}

type GuestbookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Guestbook `json:"items"`
}

func (g *Guestbook) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func (l *GuestbookList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Guestbook, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Guestbook)
	}
	return &out
}

func guestbookCRD() *apiextv1.CustomResourceDefinition {
	return &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "guestbooks.webapp.example.com"},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: groupVersion.Group, Scope: apiextv1.NamespaceScoped,
			Names: apiextv1.CustomResourceDefinitionNames{Plural: "guestbooks", Singular: "guestbook", Kind: "Guestbook", ListKind: "GuestbookList"},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{
							"replicas": {Type: "integer", Minimum: new(float64(0))},
							"greeting": {Type: "string", Default: &apiextv1.JSON{Raw: []byte(`"hello"`)}},
						}},
						"status": {Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{
							"observedReplicas": {Type: "integer"},
						}},
					},
				}},
			}},
		},
	}
}

// reconciler keeps a ConfigMap per Guestbook holding its replicas and greeting, and reports
// the replicas it saw in the Guestbook's status.
type reconciler struct{ client.Client }

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var gb Guestbook
	if err := r.Get(ctx, req.NamespacedName, &gb); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gb-" + gb.Name, Namespace: gb.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		cm.Data = map[string]string{"replicas": strconv.Itoa(int(gb.Spec.Replicas)), "greeting": gb.Spec.Greeting}
		return controllerutil.SetControllerReference(&gb, cm, r.Scheme())
	}); err != nil {
		return reconcile.Result{}, err
	}
	if gb.Status.ObservedReplicas != gb.Spec.Replicas {
		gb.Status.ObservedReplicas = gb.Spec.Replicas
		if err := r.Status().Update(ctx, &gb); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

func TestManagerReconcilesCustomResources(t *testing.T) {
	log.SetLogger(logr.Discard())
	srv, err := testserver.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cfg := &rest.Config{Host: srv.URL}

	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, apiextv1.AddToScheme} {
		if err := add(sch); err != nil {
			t.Fatal(err)
		}
	}
	sch.AddKnownTypes(groupVersion, &Guestbook{}, &GuestbookList{})
	metav1.AddToGroupVersion(sch, groupVersion)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, guestbookCRD()); err != nil {
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
	if err := ctrl.NewControllerManagedBy(mgr).For(&Guestbook{}).Owns(&corev1.ConfigMap{}).Complete(&reconciler{mgr.GetClient()}); err != nil {
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
	gb := &Guestbook{ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: ns.Name}, Spec: GuestbookSpec{Replicas: 3}}
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
			var got Guestbook
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
