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
	"github.com/kplane/kplane/reconcile"
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
		Name:    "persistentvolumeclaim-protection-controller",
		Aliases: []string{PVCName},
		Options: func() controller.Options { return controller.NoOptions{} },
		New:     controller.Build(NewPVC),
	}
	PVEntry = controller.Entry{
		Name:    "persistentvolume-protection-controller",
		Aliases: []string{PVName},
		Options: func() controller.Options { return controller.NoOptions{} },
		New:     controller.Build(NewPV),
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

// Controller keeps one protection finalizer on the objects of one resource.
type Controller[T cache.Object] struct {
	name      string
	finalizer string
	api       *client.Typed[T]
	objects   *cache.Informer[T]
	// inUse reports whether obj, being deleted, is still in use.
	inUse func(ctx context.Context, obj T) (bool, error)
	loop  *controller.Loop
}

func newController[T cache.Object](ctx *controller.Context, name, resource, finalizer, queue string) *Controller[T] {
	c := &Controller[T]{
		name:      name,
		finalizer: finalizer,
		api:       client.Resource[T](ctx.Client, resource),
		objects:   cache.For[T](ctx.Informers, resource),
		loop:      controller.NewLoop(ctx, name, controller.WithQueueName(queue)),
	}
	// Most events need nothing done (a live object with the finalizer); a deleted object is
	// gone from the cache and needs nothing either.
	changed := func(obj T) {
		if interesting(obj, finalizer) {
			c.loop.Queue.Add(cache.MetaNamespaceKey(obj))
		}
	}
	controller.Watch(c.loop, c.objects, cache.Handler[T]{
		OnAdd:    func(obj T, _ bool) { changed(obj) },
		OnUpdate: func(_, obj T) { changed(obj) },
	}, 0)
	return c
}

// NewPVC builds the claim protection controller on ctx's shared informers: a claim is in use
// while a pod on a node has it among its volumes.
func NewPVC(ctx *controller.Context, _ controller.NoOptions) (*Controller[*corev1.PersistentVolumeClaim], error) {
	c := newController[*corev1.PersistentVolumeClaim](ctx, PVCName, "persistentvolumeclaims", pv.PVCProtectionFinalizer, "pvcprotection")
	pods := cache.For[*corev1.Pod](ctx.Informers, "pods")
	persistentvolume.AddClaimIndex(pods)
	// A pod that ends, leaves its node or goes away may free its claims.
	podChanged := func(p *corev1.Pod, deleted bool) {
		if deleted || pv.PodTerminated(p) || p.Spec.NodeName == "" {
			for _, name := range pv.ClaimNames(p) {
				c.loop.Queue.Add(p.Namespace + "/" + name)
			}
		}
	}
	controller.Watch(c.loop, pods, cache.Handler[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod, _ bool) { podChanged(p, false) },
		OnUpdate: func(_, p *corev1.Pod) { podChanged(p, false) },
		OnDelete: func(p *corev1.Pod, _ bool) { podChanged(p, true) },
	}, 0)
	// The cache first; then, before letting the claim go, the API server, since the cache may
	// not show a pod created a moment ago.
	livePods := client.Resource[*corev1.Pod](ctx.Client, "pods")
	c.inUse = func(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
		for _, p := range persistentvolume.PodsUsingClaim(pods, pvc.Namespace, pvc.Name) {
			if podUsesClaim(p, pvc.Name) {
				return true, nil
			}
		}
		list, err := livePods.Namespace(pvc.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, fmt.Errorf("live list of pods failed: %w", err)
		}
		return slices.ContainsFunc(list.Items, func(p *corev1.Pod) bool { return podUsesClaim(p, pvc.Name) }), nil
	}
	return c, nil
}

// NewPV builds the volume protection controller on ctx's shared informers: a volume is in use
// while it is Bound.
func NewPV(ctx *controller.Context, _ controller.NoOptions) (*Controller[*corev1.PersistentVolume], error) {
	c := newController[*corev1.PersistentVolume](ctx, PVName, "persistentvolumes", pv.PVProtectionFinalizer, "pvprotection")
	c.inUse = func(_ context.Context, v *corev1.PersistentVolume) (bool, error) {
		return v.Status.Phase == corev1.VolumeBound, nil
	}
	return c, nil
}

// Name implements controller.Controller.
func (c *Controller[T]) Name() string { return c.name }

// Run syncs objects until ctx is cancelled.
func (c *Controller[T]) Run(ctx context.Context) error {
	c.loop.Run(ctx, reconcile.Ignore(c.sync))
	return nil
}

func (c *Controller[T]) sync(ctx context.Context, key string) error {
	obj, ok := c.objects.Indexer().Get(key)
	if !ok {
		return nil
	}
	a := decide(obj, c.finalizer, true)
	if a == keep && obj.GetDeletionTimestamp() != nil && slices.Contains(obj.GetFinalizers(), c.finalizer) {
		used, err := c.inUse(ctx, obj)
		if err != nil {
			return err
		}
		a = decide(obj, c.finalizer, used)
	}
	if a == keep {
		return nil
	}
	next := obj.DeepCopyObject().(T)
	next.SetFinalizers(withFinalizers(obj.GetFinalizers(), c.finalizer, a))
	_, err := c.api.Namespace(obj.GetNamespace()).Update(ctx, next)
	if client.IsNotFound(err) {
		return nil
	}
	return err
}
