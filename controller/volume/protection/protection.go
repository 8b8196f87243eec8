// Package protection holds the two storage-object-in-use protection controllers of the
// controller manager. The API server puts a finalizer on every new claim
// (kubernetes.io/pvc-protection) and volume (kubernetes.io/pv-protection); these controllers
// add it where it is missing and remove it once the object, being deleted, is no longer used,
// so that deleting a claim a pod still mounts, or a volume a claim is still bound to, waits
// instead of pulling the storage from under it.
//
// A claim is in use while a pod scheduled to a node has it among its volumes, whatever the
// pod's phase: as in Kubernetes v1.36, only deleting the pod frees the claim, since the node
// may still have the volume mounted. A volume is in use while it is Bound.
package protection

import (
	"context"
	"fmt"
	"slices"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/volume/persistentvolume"
	"github.com/kplane/kplane/internal/pv"
	"github.com/kplane/kplane/workqueue"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names in --controllers: kube-controller-manager's aliases of
// persistentvolumeclaim-protection-controller and persistentvolume-protection-controller.
const (
	PVCName = "pvc-protection"
	PVName  = "pv-protection"
)

// Entries register the controllers with the manager, one worker each as in Kubernetes.
var (
	PVCEntry = controller.Entry{
		Name:    PVCName,
		Workers: func(controller.Config) int { return 1 },
		New:     func(ctx *controller.Context) (controller.Controller, error) { return NewPVC(ctx), nil },
	}
	PVEntry = controller.Entry{
		Name:    PVName,
		Workers: func(controller.Config) int { return 1 },
		New:     func(ctx *controller.Context) (controller.Controller, error) { return NewPV(ctx), nil },
	}
)

// action is what a protection controller does to one object's finalizers.
type action int

const (
	keep action = iota
	addFinalizer
	removeFinalizer
)

// decide is the protection rule for an object carrying finalizer f: add it to a live object
// that lacks it; remove it from an object being deleted once nothing uses it.
func decide(obj metav1.Object, f string, used bool) action {
	has := slices.Contains(obj.GetFinalizers(), f)
	switch {
	case obj.GetDeletionTimestamp() == nil && !has:
		return addFinalizer
	case obj.GetDeletionTimestamp() != nil && has && !used:
		return removeFinalizer
	}
	return keep
}

// interesting reports whether an event about obj may call for an action.
func interesting(obj metav1.Object, f string) bool {
	has := slices.Contains(obj.GetFinalizers(), f)
	return obj.GetDeletionTimestamp() == nil && !has || obj.GetDeletionTimestamp() != nil && has
}

// podUsesClaim reports whether pod keeps the claim named claim (in its namespace) in use: it
// is on a node and one of its volumes is the claim.
func podUsesClaim(pod *corev1.Pod, claim string) bool {
	return pod.Spec.NodeName != "" && pv.PodUsesClaim(pod, claim)
}

// withFinalizers returns a copy of obj's finalizers with f added or removed.
func withFinalizers(finalizers []string, f string, a action) []string {
	out := slices.DeleteFunc(slices.Clone(finalizers), func(s string) bool { return s == f })
	if a == addFinalizer {
		out = append(out, f)
	}
	return out
}

// PVCController keeps kubernetes.io/pvc-protection on claims.
type PVCController struct {
	client   *client.Client
	claims   *cache.Informer[*corev1.PersistentVolumeClaim]
	pods     *cache.Informer[*corev1.Pod]
	handlers []cache.Registration
	queue    *workqueue.RateLimitingQueue[string]
	syncs    *controller.SyncMetrics
}

// NewPVC builds the claim protection controller on ctx's shared informers.
func NewPVC(ctx *controller.Context) *PVCController {
	c := &PVCController{
		client: ctx.Client,
		claims: cache.For[*corev1.PersistentVolumeClaim](ctx.Informers, "persistentvolumeclaims"),
		pods:   cache.For[*corev1.Pod](ctx.Informers, "pods"),
		queue: workqueue.NewRateLimited[string](workqueue.DefaultControllerRateLimiter[string](),
			workqueue.WithName("pvcprotection"), workqueue.WithMetrics(ctx.QueueMetrics)),
		syncs: ctx.Syncs,
	}
	persistentvolume.AddClaimIndex(c.pods)
	claimChanged := func(pvc *corev1.PersistentVolumeClaim) {
		if interesting(pvc, pv.PVCProtectionFinalizer) {
			c.queue.Add(pvc.Namespace + "/" + pvc.Name)
		}
	}
	// A pod that ends, leaves its node or goes away may free its claims.
	podChanged := func(p *corev1.Pod, deleted bool) {
		if deleted || pv.PodTerminated(p) || p.Spec.NodeName == "" {
			for _, name := range pv.ClaimNames(p) {
				c.queue.Add(p.Namespace + "/" + name)
			}
		}
	}
	c.handlers = []cache.Registration{
		c.claims.AddHandler(cache.Handler[*corev1.PersistentVolumeClaim]{
			OnAdd:    func(pvc *corev1.PersistentVolumeClaim, _ bool) { claimChanged(pvc) },
			OnUpdate: func(_, pvc *corev1.PersistentVolumeClaim) { claimChanged(pvc) },
		}, 0),
		c.pods.AddHandler(cache.Handler[*corev1.Pod]{
			OnAdd:    func(p *corev1.Pod, _ bool) { podChanged(p, false) },
			OnUpdate: func(_, p *corev1.Pod) { podChanged(p, false) },
			OnDelete: func(p *corev1.Pod, _ bool) { podChanged(p, true) },
		}, 0),
	}
	return c
}

// Name implements controller.Controller.
func (c *PVCController) Name() string { return PVCName }

// Run syncs claims until ctx is cancelled.
func (c *PVCController) Run(ctx context.Context, workers int) error {
	controller.Workers{Name: PVCName, Queue: c.queue, Count: workers, Sync: c.sync, Metrics: c.syncs,
		Synced: []func() bool{c.claims.HasSynced, c.pods.HasSynced}, Handlers: c.handlers}.Run(ctx)
	return nil
}

func (c *PVCController) sync(ctx context.Context, key string) error {
	pvc, ok := c.claims.Indexer().Get(key)
	if !ok {
		return nil
	}
	a := decide(pvc, pv.PVCProtectionFinalizer, true)
	if a == keep && pvc.DeletionTimestamp != nil && slices.Contains(pvc.Finalizers, pv.PVCProtectionFinalizer) {
		used, err := c.inUse(ctx, pvc)
		if err != nil {
			return err
		}
		a = decide(pvc, pv.PVCProtectionFinalizer, used)
	}
	if a == keep {
		return nil
	}
	next := pvc.DeepCopy()
	next.Finalizers = withFinalizers(pvc.Finalizers, pv.PVCProtectionFinalizer, a)
	_, err := client.Resource[*corev1.PersistentVolumeClaim](c.client, "persistentvolumeclaims").Namespace(pvc.Namespace).Update(ctx, next)
	if client.IsNotFound(err) {
		return nil
	}
	return err
}

// inUse reports whether a pod uses pvc: first from the cache, then, before letting the claim
// go, from the API server, since the cache may not show a pod created a moment ago.
func (c *PVCController) inUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	for _, p := range persistentvolume.PodsUsingClaim(c.pods, pvc.Namespace, pvc.Name) {
		if podUsesClaim(p, pvc.Name) {
			return true, nil
		}
	}
	list, err := client.Resource[*corev1.Pod](c.client, "pods").Namespace(pvc.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("live list of pods failed: %w", err)
	}
	return slices.ContainsFunc(list.Items, func(p *corev1.Pod) bool { return podUsesClaim(p, pvc.Name) }), nil
}

// PVController keeps kubernetes.io/pv-protection on volumes.
type PVController struct {
	client   *client.Client
	volumes  *cache.Informer[*corev1.PersistentVolume]
	handlers []cache.Registration
	queue    *workqueue.RateLimitingQueue[string]
	syncs    *controller.SyncMetrics
}

// NewPV builds the volume protection controller on ctx's shared informers.
func NewPV(ctx *controller.Context) *PVController {
	c := &PVController{
		client:  ctx.Client,
		volumes: cache.For[*corev1.PersistentVolume](ctx.Informers, "persistentvolumes"),
		queue: workqueue.NewRateLimited[string](workqueue.DefaultControllerRateLimiter[string](),
			workqueue.WithName("pvprotection"), workqueue.WithMetrics(ctx.QueueMetrics)),
		syncs: ctx.Syncs,
	}
	changed := func(v *corev1.PersistentVolume) {
		if interesting(v, pv.PVProtectionFinalizer) {
			c.queue.Add(v.Name)
		}
	}
	c.handlers = []cache.Registration{c.volumes.AddHandler(cache.Handler[*corev1.PersistentVolume]{
		OnAdd:    func(v *corev1.PersistentVolume, _ bool) { changed(v) },
		OnUpdate: func(_, v *corev1.PersistentVolume) { changed(v) },
	}, 0)}
	return c
}

// Name implements controller.Controller.
func (c *PVController) Name() string { return PVName }

// Run syncs volumes until ctx is cancelled.
func (c *PVController) Run(ctx context.Context, workers int) error {
	controller.Workers{Name: PVName, Queue: c.queue, Count: workers, Sync: c.sync, Metrics: c.syncs,
		Synced: []func() bool{c.volumes.HasSynced}, Handlers: c.handlers}.Run(ctx)
	return nil
}

func (c *PVController) sync(ctx context.Context, name string) error {
	v, ok := c.volumes.Indexer().Get(name)
	if !ok {
		return nil
	}
	a := decide(v, pv.PVProtectionFinalizer, v.Status.Phase == corev1.VolumeBound)
	if a == keep {
		return nil
	}
	next := v.DeepCopy()
	next.Finalizers = withFinalizers(v.Finalizers, pv.PVProtectionFinalizer, a)
	_, err := client.Resource[*corev1.PersistentVolume](c.client, "persistentvolumes").Update(ctx, next)
	if client.IsNotFound(err) {
		return nil
	}
	return err
}
