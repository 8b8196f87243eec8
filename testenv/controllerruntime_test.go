package testenv_test

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/kplane/kplane/testenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var widgetGV = schema.GroupVersion{Group: "example.com", Version: "v1"}

// Widget is the custom type of testdata/crds, as kubebuilder would write it.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec,omitempty"`
	Status            WidgetStatus `json:"status,omitempty"`
}

type WidgetSpec struct {
	Size int64 `json:"size,omitempty"`
}

type WidgetStatus struct {
	Ready bool `json:"ready,omitempty"`
}

type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func (l *WidgetList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Widget, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Widget)
	}
	return &out
}

// widgetReconciler keeps a ConfigMap owned by each Widget and marks the Widget ready.
type widgetReconciler struct{ client.Client }

func (r *widgetReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var w Widget
	if err := r.Get(ctx, req.NamespacedName, &w); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "widget-" + w.Name, Namespace: w.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		return controllerutil.SetControllerReference(&w, cm, r.Scheme())
	}); err != nil {
		return reconcile.Result{}, err
	}
	if !w.Status.Ready {
		w.Status.Ready = true
		return reconcile.Result{}, r.Status().Update(ctx, &w)
	}
	return reconcile.Result{}, nil
}

// A controller-runtime manager, as a kubebuilder project runs it in its suite_test.go, on
// testenv instead of envtest: the reconciler's owned ConfigMap is garbage-collected with its
// Widget, which envtest cannot show.
func TestControllerRuntimeManager(t *testing.T) {
	t.Parallel()
	log.SetLogger(logr.Discard())
	env := testenv.Start(t, testenv.WithCRDs("testdata/crds"))
	// TODO(lead): the Widget's validating webhook, served by the manager's webhook server and
	// registered with testenv.WithValidatingWebhooks, once the apiserver calls webhooks.
	sch := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	sch.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(sch, widgetGV)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: sch, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&Widget{}).Owns(&corev1.ConfigMap{}).Complete(&widgetReconciler{mgr.GetClient()}); err != nil {
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
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "default"}, Spec: WidgetSpec{Size: 2}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	cmKey := types.NamespacedName{Namespace: "default", Name: "widget-w"}
	eventually(t, "the Widget ready and its ConfigMap", func() bool {
		var got Widget
		var cm corev1.ConfigMap
		return c.Get(ctx, client.ObjectKeyFromObject(w), &got) == nil && got.Status.Ready &&
			c.Get(ctx, cmKey, &cm) == nil && len(cm.OwnerReferences) == 1
	})
	if err := c.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the owned ConfigMap collected", func() bool {
		return client.IgnoreNotFound(c.Get(ctx, cmKey, &corev1.ConfigMap{})) == nil && c.Get(ctx, cmKey, &corev1.ConfigMap{}) != nil
	})
}
