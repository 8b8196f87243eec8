package resourcequota

import (
	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/quota"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// watchCounted registers every namespaced resource kplane serves as one the controller counts
// (count/<resource>.<group>, and the special evaluators' names for pods, services and claims).
// Events are left out, as quota ignores them. The informers are the manager's shared ones, so
// the garbage collector's watches serve this controller too; the two lists name the same
// resources (a resource listed here that the server does not serve keeps the controller
// waiting for its cache).
// TODO: discover resources (ServerResources) instead of this fixed list once kplane serves more.
func watchCounted(c *Controller, f *cache.Factory) {
	count(c, f, "pods", func(old, p *corev1.Pod) bool {
		now := c.now()
		return quota.IsTerminating(old) != quota.IsTerminating(p) || quota.Charged(old, now) && !quota.Charged(p, now)
	})
	count(c, f, "services", func(old, s *corev1.Service) bool {
		return quota.QuotaServiceType(old) != quota.QuotaServiceType(s)
	})
	count(c, f, "persistentvolumeclaims", func(old, pvc *corev1.PersistentVolumeClaim) bool {
		return quota.ClaimNeedsRecount(pvc, old)
	})
	count[*corev1.Endpoints](c, f, "endpoints", nil)
	count[*corev1.ConfigMap](c, f, "configmaps", nil)
	count[*corev1.Secret](c, f, "secrets", nil)
	count[*corev1.ServiceAccount](c, f, "serviceaccounts", nil)
	count[*corev1.ReplicationController](c, f, "replicationcontrollers", nil)
	count[*corev1.ResourceQuota](c, f, "resourcequotas", nil)
	count[*corev1.LimitRange](c, f, "limitranges", nil)
	count[*discoveryv1.EndpointSlice](c, f, "endpointslices", nil)
	count[*coordinationv1.Lease](c, f, "leases", nil)
	count[*appsv1.ReplicaSet](c, f, "replicasets", nil)
	count[*appsv1.Deployment](c, f, "deployments", nil)
	count[*appsv1.DaemonSet](c, f, "daemonsets", nil)
	count[*appsv1.StatefulSet](c, f, "statefulsets", nil)
	count[*appsv1.ControllerRevision](c, f, "controllerrevisions", nil)
	count[*batchv1.Job](c, f, "jobs", nil)
	count[*batchv1.CronJob](c, f, "cronjobs", nil)
	count[*policyv1.PodDisruptionBudget](c, f, "poddisruptionbudgets", nil)
	count[*autoscalingv2.HorizontalPodAutoscaler](c, f, "horizontalpodautoscalers", nil)
}

// count makes resource's objects T countable: their lister feeds the recount, and their
// deletions (and the updates released says give back what they were charged) queue the
// quotas of their namespace that count them.
func count[T cache.Object](c *Controller, f *cache.Factory, resource string, released func(old, obj T) bool) {
	gr := schema.GroupResource{Group: client.Resource[T](c.client, resource).GroupVersionKind().Group, Resource: resource}
	inf := cache.For[T](f, resource)
	c.listers[gr] = func(ns string) ([]runtime.Object, error) {
		items := inf.Lister().Namespace(ns).List(labels.Everything())
		out := make([]runtime.Object, len(items))
		for i, o := range items {
			out[i] = o
		}
		return out, nil
	}
	h := cache.Handler[T]{OnDelete: func(obj T, _ bool) { c.replenish(gr, obj.GetNamespace()) }}
	if released != nil {
		h.OnUpdate = func(old, obj T) {
			if released(old, obj) {
				c.replenish(gr, obj.GetNamespace())
			}
		}
	}
	controller.Watch(c.loop, inf, h, 0)
}
