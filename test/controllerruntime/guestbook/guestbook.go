// Package guestbook is a custom type, its CRD and a reconciler as a kubebuilder project would
// write them, for the tests that run a controller-runtime manager against kplane
// (test/controllerruntime against a shared apiserver, testenv against its own).
package guestbook

import (
	"context"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// GroupVersion is the custom type's.
var GroupVersion = schema.GroupVersion{Group: "webapp.example.com", Version: "v1"}

// Guestbook is the custom type, written as kubebuilder would generate it.
type Guestbook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GuestbookSpec   `json:"spec,omitempty"`
	Status            GuestbookStatus `json:"status,omitempty"`
}

// GuestbookSpec is what a Guestbook asks for.
type GuestbookSpec struct {
	Replicas int32  `json:"replicas,omitempty"`
	Greeting string `json:"greeting,omitempty"`
}

// GuestbookStatus is what the reconciler saw.
type GuestbookStatus struct {
	ObservedReplicas int32 `json:"observedReplicas,omitempty"`
}

// GuestbookList is a list of Guestbooks.
type GuestbookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Guestbook `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (g *Guestbook) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *GuestbookList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Guestbook, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Guestbook)
	}
	return &out
}

// CRD defines Guestbook: spec.replicas at least 0, spec.greeting defaulted to "hello", a
// status subresource.
func CRD() *apiextv1.CustomResourceDefinition {
	return &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "guestbooks.webapp.example.com"},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: GroupVersion.Group, Scope: apiextv1.NamespaceScoped,
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

// Reconciler keeps a ConfigMap per Guestbook holding its replicas and greeting, owned by the
// Guestbook, and reports the replicas it saw in the Guestbook's status.
type Reconciler struct{ client.Client }

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
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

// AddToScheme adds Guestbook and GuestbookList to sch, as kubebuilder's generated code does.
func AddToScheme(sch *runtime.Scheme) error {
	sch.AddKnownTypes(GroupVersion, &Guestbook{}, &GuestbookList{})
	metav1.AddToGroupVersion(sch, GroupVersion)
	return nil
}
