package garbagecollector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

func start(t *testing.T) *Controller {
	t.Helper()
	return startWith(t, nil)
}

// startWith runs a collector whose discovery is narrowed by hide (nil: none), which the test
// may change while it runs.
func startWith(t *testing.T, hide func(schema.GroupVersionResource) bool) *Controller {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.ConcurrentGCSyncs = 2
	ctrl, err := New(cctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if hide != nil {
		ctrl.serverResources = testserver.Discovery(c, hide)
	}
	testserver.RunControllers(t, cctx, ctrl)
	return ctrl
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, what, 15*time.Second, cond)
}

func owner(apiVersion, kind, name string, m metav1.Object, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: m.GetUID(), BlockOwnerDeletion: &block}
}

func replicaSet(t *testing.T, ns, name string) *appsv1.ReplicaSet {
	t.Helper()
	labels := map[string]string{"app": name}
	zero := int32(0)
	rs, err := client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns).Create(context.Background(), &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func configMap(t *testing.T, ns, name string, finalizers []string, owners ...metav1.OwnerReference) {
	t.Helper()
	_, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners, Finalizers: finalizers},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func gone[T client.Object](t *testing.T, resource, ns, name string) func() bool {
	return func() bool {
		_, err := client.Resource[T](c, resource).Namespace(ns).Get(context.Background(), name)
		if err != nil && !client.IsNotFound(err) {
			t.Fatal(err)
		}
		return client.IsNotFound(err)
	}
}

func getCM(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func deleteRS(t *testing.T, ns, name string, p metav1.DeletionPropagation) {
	t.Helper()
	if err := client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &p}); err != nil {
		t.Fatal(err)
	}
}

// TestBackground: the owner goes at once; dependents whose owners are all gone follow; one with
// another live owner only loses the reference; one owned by an unserved kind stays.
func TestBackground(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "gc-bg")
	rs := replicaSet(t, ns, "rs")
	other := replicaSet(t, ns, "other")
	configMap(t, ns, "dep", nil, owner("apps/v1", "ReplicaSet", "rs", rs, false))
	configMap(t, ns, "shared", nil, owner("apps/v1", "ReplicaSet", "rs", rs, true), owner("apps/v1", "ReplicaSet", "other", other, false))
	configMap(t, ns, "alien", nil, metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "no-such-uid"})
	_, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod", OwnerReferences: []metav1.OwnerReference{owner("apps/v1", "ReplicaSet", "rs", rs, true)}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	deleteRS(t, ns, "rs", metav1.DeletePropagationBackground)
	waitFor(t, "the owner to be gone", gone[*appsv1.ReplicaSet](t, "replicasets", ns, "rs"))
	waitFor(t, "the configmap to be collected", gone[*corev1.ConfigMap](t, "configmaps", ns, "dep"))
	waitFor(t, "the pod to be collected", gone[*corev1.Pod](t, "pods", ns, "pod"))
	waitFor(t, "the shared configmap to lose its reference", func() bool {
		refs := getCM(t, ns, "shared").OwnerReferences
		return len(refs) == 1 && refs[0].UID == other.UID
	})
	if refs := getCM(t, ns, "alien").OwnerReferences; len(refs) != 1 {
		t.Fatalf("configmap owned by an unserved kind changed: %v", refs)
	}
}

// TestOrphan: the dependents stay without their reference, then the owner goes.
func TestOrphan(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "gc-orphan")
	rs := replicaSet(t, ns, "rs")
	configMap(t, ns, "dep", nil, owner("apps/v1", "ReplicaSet", "rs", rs, true))
	deleteRS(t, ns, "rs", metav1.DeletePropagationOrphan)
	waitFor(t, "the owner to be gone", gone[*appsv1.ReplicaSet](t, "replicasets", ns, "rs"))
	if refs := getCM(t, ns, "dep").OwnerReferences; len(refs) != 0 {
		t.Fatalf("orphaned dependent still has owner references: %v", refs)
	}
	time.Sleep(200 * time.Millisecond)
	if refs := getCM(t, ns, "dep").OwnerReferences; len(refs) != 0 {
		t.Fatalf("orphaned dependent changed: %v", refs)
	}
}

// TestForeground: the owner stays, marked, until every dependent blocking it is gone.
func TestForeground(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "gc-fg")
	rs := replicaSet(t, ns, "rs")
	configMap(t, ns, "held", []string{"example.com/hold"}, owner("apps/v1", "ReplicaSet", "rs", rs, true))
	configMap(t, ns, "free", nil, owner("apps/v1", "ReplicaSet", "rs", rs, true))
	configMap(t, ns, "nonblocking", nil, owner("apps/v1", "ReplicaSet", "rs", rs, false))
	deleteRS(t, ns, "rs", metav1.DeletePropagationForeground)
	waitFor(t, "the free dependent to be collected", gone[*corev1.ConfigMap](t, "configmaps", ns, "free"))
	waitFor(t, "the held dependent to be marked", func() bool { return getCM(t, ns, "held").DeletionTimestamp != nil })
	got, err := client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns).Get(context.Background(), "rs")
	if err != nil {
		t.Fatalf("owner gone before its blocking dependent: %v", err)
	}
	if got.DeletionTimestamp == nil || len(got.Finalizers) != 1 || got.Finalizers[0] != metav1.FinalizerDeleteDependents {
		t.Fatalf("owner not waiting for its dependents: deletionTimestamp %v, finalizers %v", got.DeletionTimestamp, got.Finalizers)
	}
	if _, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Patch(context.Background(), "held", "application/merge-patch+json",
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held dependent to be gone", gone[*corev1.ConfigMap](t, "configmaps", ns, "held"))
	waitFor(t, "the owner to be gone", gone[*appsv1.ReplicaSet](t, "replicasets", ns, "rs"))
	waitFor(t, "the non-blocking dependent to be collected", gone[*corev1.ConfigMap](t, "configmaps", ns, "nonblocking"))
}

// TestForegroundCircle: owners in a circle (a owns b owns c owns a, every reference
// blocking) all go when one is deleted in the foreground, instead of each waiting for the
// next; in a chain (x owns y owns z, z held by a finalizer) the wait is kept.
func TestForegroundCircle(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "gc-circle")
	cms := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns)
	link := func(name, ownerName string) {
		t.Helper()
		o := getCM(t, ns, ownerName)
		cm := getCM(t, ns, name)
		cm.OwnerReferences = []metav1.OwnerReference{owner("v1", "ConfigMap", ownerName, o, true)}
		if _, err := cms.Update(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		configMap(t, ns, name, nil)
	}
	link("b", "a")
	link("c", "b")
	link("a", "c")
	fg := metav1.DeletePropagationForeground
	if err := cms.Delete(context.Background(), "a", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		waitFor(t, name+" of the circle to be gone", gone[*corev1.ConfigMap](t, "configmaps", ns, name))
	}

	configMap(t, ns, "x", nil)
	configMap(t, ns, "y", nil)
	configMap(t, ns, "z", []string{"example.com/hold"})
	link("y", "x")
	link("z", "y")
	if err := cms.Delete(context.Background(), "x", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "z to be marked", func() bool { return getCM(t, ns, "z").DeletionTimestamp != nil })
	time.Sleep(300 * time.Millisecond)
	if x := getCM(t, ns, "x"); x.DeletionTimestamp == nil || len(x.Finalizers) != 1 {
		t.Fatalf("x of the chain did not wait: finalizers %v", x.Finalizers)
	}
	if _, err := cms.Patch(context.Background(), "z", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"z", "y", "x"} {
		waitFor(t, name+" of the chain to be gone", gone[*corev1.ConfigMap](t, "configmaps", ns, name))
	}
}

// TestServiceEndpointSlices: the slices of a deleted Service are collected.
func TestServiceEndpointSlices(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "gc-svc")
	svc, err := client.Resource[*corev1.Service](c, "services").Namespace(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ready := true
	_, err = client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ns).Create(context.Background(), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            "web-abc",
			Labels:          map[string]string{discoveryv1.LabelServiceName: "web"},
			OwnerReferences: []metav1.OwnerReference{owner("v1", "Service", "web", svc, true)},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Resource[*corev1.Service](c, "services").Namespace(ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slice to be collected", gone[*discoveryv1.EndpointSlice](t, "endpointslices", ns, "web-abc"))
}

// TestRoleBinding: an operator's RoleBinding (an API no kplane controller acts on) is
// collected with the object that owns it.
func TestRoleBinding(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "gc-rbac")
	rs := replicaSet(t, ns, "rs")
	_, err := client.Resource[*rbacv1.RoleBinding](c, "rolebindings").Namespace(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "rb", OwnerReferences: []metav1.OwnerReference{owner("apps/v1", "ReplicaSet", "rs", rs, true)}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	deleteRS(t, ns, "rs", metav1.DeletePropagationBackground)
	waitFor(t, "the binding to be collected", gone[*rbacv1.RoleBinding](t, "rolebindings", ns, "rb"))
}

func TestOptionsValidate(t *testing.T) {
	if errs := DefaultOptions().Validate(); len(errs) > 0 {
		t.Errorf("defaults: %v", errs)
	}
	o := DefaultOptions()
	o.ConcurrentGCSyncs = 0
	if errs := o.Validate(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "--concurrent-gc-syncs") {
		t.Errorf("no workers: errors %v, want one naming --concurrent-gc-syncs", errs)
	}
}
