package garbagecollector

import (
	"context"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// kind is one served resource the collector watches, with the writes it makes to its objects.
type kind struct {
	gvk        schema.GroupVersionKind
	resource   string
	namespaced bool
	get        func(ctx context.Context, ns, name string) (metav1.Object, error)
	delete     func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error
	patch      func(ctx context.Context, ns, name string, pt types.PatchType, data []byte) error
}

// watchAll registers an informer handler for every resource kplane serves that can own or be
// owned. Events are left out: nothing owns them in practice and they churn the most.
// TODO: discover resources (ServerResources) instead of this fixed list once kplane serves more.
func (c *Controller) watchAll(f *cache.Factory) {
	watch[*corev1.Namespace](c, f, "namespaces", false)
	watch[*corev1.Node](c, f, "nodes", false)
	watch[*corev1.Pod](c, f, "pods", true)
	watch[*corev1.Service](c, f, "services", true)
	watch[*corev1.Endpoints](c, f, "endpoints", true)
	watch[*corev1.ConfigMap](c, f, "configmaps", true)
	watch[*corev1.Secret](c, f, "secrets", true)
	watch[*corev1.ServiceAccount](c, f, "serviceaccounts", true)
	watch[*corev1.ReplicationController](c, f, "replicationcontrollers", true)
	watch[*discoveryv1.EndpointSlice](c, f, "endpointslices", true)
	watch[*coordinationv1.Lease](c, f, "leases", true)
	watch[*appsv1.ReplicaSet](c, f, "replicasets", true)
	watch[*appsv1.Deployment](c, f, "deployments", true)
	watch[*appsv1.DaemonSet](c, f, "daemonsets", true)
	watch[*appsv1.StatefulSet](c, f, "statefulsets", true)
	watch[*appsv1.ControllerRevision](c, f, "controllerrevisions", true)
	watch[*corev1.PersistentVolume](c, f, "persistentvolumes", false)
	watch[*corev1.PersistentVolumeClaim](c, f, "persistentvolumeclaims", true)
	watch[*storagev1.StorageClass](c, f, "storageclasses", false)
	watch[*batchv1.Job](c, f, "jobs", true)
	watch[*batchv1.CronJob](c, f, "cronjobs", true)
	watch[*policyv1.PodDisruptionBudget](c, f, "poddisruptionbudgets", true)
	watch[*autoscalingv2.HorizontalPodAutoscaler](c, f, "horizontalpodautoscalers", true)
	// Objects no kplane controller acts on, which operators commonly own (and which are
	// deleted with their owner).
	watch[*rbacv1.Role](c, f, "roles", true)
	watch[*rbacv1.RoleBinding](c, f, "rolebindings", true)
	watch[*rbacv1.ClusterRole](c, f, "clusterroles", false)
	watch[*rbacv1.ClusterRoleBinding](c, f, "clusterrolebindings", false)
	watch[*certificatesv1.CertificateSigningRequest](c, f, "certificatesigningrequests", false)
	watch[*admissionregistrationv1.ValidatingWebhookConfiguration](c, f, "validatingwebhookconfigurations", false)
	watch[*admissionregistrationv1.MutatingWebhookConfiguration](c, f, "mutatingwebhookconfigurations", false)
}

// watch adds the resource of objects T to the collector: its informer feeds the graph, and typed
// clients do the reads and writes.
func watch[T cache.Object](c *Controller, f *cache.Factory, resource string, namespaced bool) {
	api := client.Resource[T](c.client, resource)
	gvk := api.GroupVersionKind()
	inf := cache.For[T](f, resource)
	k := &kind{
		gvk:        gvk,
		resource:   resource,
		namespaced: namespaced,
		get: func(ctx context.Context, ns, name string) (metav1.Object, error) {
			return api.Namespace(ns).Get(ctx, name)
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return api.Namespace(ns).Delete(ctx, name, opts)
		},
		patch: func(ctx context.Context, ns, name string, pt types.PatchType, data []byte) error {
			_, err := api.Namespace(ns).Patch(ctx, name, pt, data, metav1.PatchOptions{})
			return err
		},
	}
	// The graph needs every change, and its keys are UIDs: a handler of its own.
	controller.Watch(c.loop, inf, cache.Handler[T]{
		OnAdd:    func(obj T, _ bool) { c.observe(nodeOf(obj, gvk)) },
		OnUpdate: func(_, obj T) { c.observe(nodeOf(obj, gvk)) },
		OnDelete: func(obj T, _ bool) { c.forget(obj.GetUID()) },
	}, 0)
	c.kinds[gvk.GroupKind()] = k
}

// nodeOf is the graph's view of obj.
func nodeOf(obj metav1.Object, gvk schema.GroupVersionKind) *node {
	return &node{
		uid:        obj.GetUID(),
		kind:       gvk,
		namespace:  obj.GetNamespace(),
		name:       obj.GetName(),
		owners:     obj.GetOwnerReferences(),
		deleting:   obj.GetDeletionTimestamp() != nil,
		finalizers: obj.GetFinalizers(),
	}
}
