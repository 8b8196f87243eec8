package persistentvolume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/internal/pv"
	"github.com/kplane/kplane/reconcile"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the controller's name in --controllers: kube-controller-manager's alias of
// persistentvolume-binder-controller.
const Name = "persistentvolume-binder"

// eventSource names the controller in the Events it records, as Kubernetes does.
const eventSource = "persistentvolume-controller"

// Entry registers the controller with the manager. One worker: decisions read the caches, and
// one sync at a time never races another for the same volume.
var Entry = controller.Entry{
	Name:    "persistentvolume-binder-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// SyncPeriod: how often every volume and claim is looked at again
	// (--pvclaimbinder-sync-period, 15s).
	SyncPeriod time.Duration
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{SyncPeriod: 15 * time.Second} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.SyncPeriod, "pvclaimbinder-sync-period", o.SyncPeriod, "how often the PersistentVolume binder looks at every volume and claim again")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	if o.SyncPeriod <= 0 {
		return []error{errors.New("--pvclaimbinder-sync-period must be positive")}
	}
	return nil
}

// claimIndex indexes pods by the claims their volumes use ("ns/claim").
const claimIndex = "kplane.io/pvc"

// Queue keys: "volume/<name>" and "claim/<namespace>/<name>".
const (
	volumePrefix = "volume/"
	claimPrefix  = "claim/"
)

// Controller binds claims to volumes and reclaims released volumes.
type Controller struct {
	client   *client.Client
	volumes  *cache.Informer[*corev1.PersistentVolume]
	claims   *cache.Informer[*corev1.PersistentVolumeClaim]
	classes  *cache.Informer[*storagev1.StorageClass]
	pods     *cache.Informer[*corev1.Pod]
	loop     *controller.Loop
	recorder *events.Recorder

	// written holds the objects this controller wrote that the informers do not show yet, so
	// that the next decision starts from them rather than from an older version.
	written *written
	// backoff holds, by volume name, when recycling may be tried again after a failure.
	backoffMu sync.Mutex
	backoff   map[string]recycleBackoff
	now       func() time.Time
}

type recycleBackoff struct {
	failures int
	until    time.Time
}

// New builds the controller on ctx's shared informers and registers its handlers.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	c := &Controller{
		client:  ctx.Client,
		volumes: cache.For[*corev1.PersistentVolume](ctx.Informers, "persistentvolumes"),
		claims:  cache.For[*corev1.PersistentVolumeClaim](ctx.Informers, "persistentvolumeclaims"),
		classes: cache.For[*storagev1.StorageClass](ctx.Informers, "storageclasses"),
		pods:    cache.For[*corev1.Pod](ctx.Informers, "pods"),
		loop:    controller.NewLoop(ctx, Name, controller.WithQueueName("persistentvolume")),
		written: newWritten(),
		backoff: map[string]recycleBackoff{},
		now:     time.Now,
	}
	if ctx.Recorder != nil {
		c.recorder = ctx.Recorder.For(eventSource)
	}
	AddClaimIndex(c.pods)
	// The handlers do more than queue keys: they follow what this controller wrote
	// (written), and one object's change may concern others (a free volume, waiting claims).
	resync := o.SyncPeriod
	controller.Watch(c.loop, c.volumes, cache.Handler[*corev1.PersistentVolume]{
		OnAdd:    func(v *corev1.PersistentVolume, _ bool) { c.volumeChanged(v) },
		OnUpdate: func(_, v *corev1.PersistentVolume) { c.volumeChanged(v) },
		OnDelete: func(v *corev1.PersistentVolume, _ bool) {
			c.written.forget(volumePrefix + v.Name)
			if ref := v.Spec.ClaimRef; ref != nil {
				c.loop.Queue.Add(claimPrefix + ref.Namespace + "/" + ref.Name) // it has lost its volume
			}
		},
	}, resync)
	controller.Watch(c.loop, c.claims, cache.Handler[*corev1.PersistentVolumeClaim]{
		OnAdd:    func(pvc *corev1.PersistentVolumeClaim, _ bool) { c.claimChanged(pvc) },
		OnUpdate: func(_, pvc *corev1.PersistentVolumeClaim) { c.claimChanged(pvc) },
		OnDelete: func(pvc *corev1.PersistentVolumeClaim, _ bool) {
			c.written.forget(claimPrefix + claimKey(pvc))
			if pvc.Spec.VolumeName != "" {
				c.loop.Queue.Add(volumePrefix + pvc.Spec.VolumeName) // released
			}
		},
	}, resync)
	controller.Watch(c.loop, c.classes, cache.Handler[*storagev1.StorageClass]{
		// A new class (a new default) may let waiting claims go on.
		OnAdd:    func(*storagev1.StorageClass, bool) { c.queuePendingClaims() },
		OnUpdate: func(old, sc *storagev1.StorageClass) { c.queuePendingClaims() },
	}, 0)
	controller.Watch(c.loop, c.pods, cache.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod, _ bool) {
			c.podChanged(p)
			if p.Spec.NodeName == "" {
				// A new pod waits for its claims: their WaitForFirstConsumer events name it.
				for _, name := range pv.ClaimNames(p) {
					c.loop.Queue.Add(claimPrefix + p.Namespace + "/" + name)
				}
			}
		},
		OnUpdate: func(_, p *corev1.Pod) { c.podChanged(p) },
		OnDelete: func(p *corev1.Pod, _ bool) { c.podChanged(p) },
	}, 0)
	return c, nil
}

// AddClaimIndex adds the index of pods by claim to a pods informer (once: controllers sharing
// the informer share it).
func AddClaimIndex(pods *cache.Informer[*corev1.Pod]) {
	_ = pods.Indexer().AddIndexers(cache.Indexers[*corev1.Pod]{claimIndex: func(p *corev1.Pod) ([]string, error) {
		var keys []string
		for _, name := range pv.ClaimNames(p) {
			keys = append(keys, p.Namespace+"/"+name)
		}
		return keys, nil
	}})
}

// PodsUsingClaim returns the pods of an informer indexed by AddClaimIndex that use a claim.
func PodsUsingClaim(pods *cache.Informer[*corev1.Pod], ns, claim string) []*corev1.Pod {
	list, _ := pods.Indexer().ByIndex(claimIndex, ns+"/"+claim)
	return list
}

// Name implements controller.Controller.
func (c *Controller) Name() string { return Name }

// Run syncs volumes and claims until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}

func (c *Controller) volumeChanged(v *corev1.PersistentVolume) {
	c.written.seen(volumePrefix+v.Name, v)
	c.loop.Queue.Add(volumePrefix + v.Name)
	// A free volume may be what a waiting claim needs: look at them now rather than at the
	// next resync (Kubernetes waits for that).
	switch ref := v.Spec.ClaimRef; {
	case ref == nil && v.DeletionTimestamp == nil:
		c.queuePendingClaims()
	case ref != nil && ref.UID == "":
		c.loop.Queue.Add(claimPrefix + ref.Namespace + "/" + ref.Name)
	}
}

func (c *Controller) claimChanged(pvc *corev1.PersistentVolumeClaim) {
	c.written.seen(claimPrefix+claimKey(pvc), pvc)
	c.loop.Queue.Add(claimPrefix + claimKey(pvc))
}

// queuePendingClaims queues the claims not bound yet.
func (c *Controller) queuePendingClaims() {
	for _, pvc := range c.claims.Lister().List(labels.Everything()) {
		if !metav1.HasAnnotation(pvc.ObjectMeta, pv.AnnBindCompleted) {
			c.loop.Queue.Add(claimPrefix + claimKey(pvc))
		}
	}
}

// podChanged follows recycler pods, and the pods that keep a released volume from being
// recycled: the volume is looked at again when they change.
func (c *Controller) podChanged(p *corev1.Pod) {
	if name, ok := strings.CutPrefix(p.Name, "recycler-for-"); ok && p.Namespace == recyclerNamespace {
		c.loop.Queue.Add(volumePrefix + name)
		return
	}
	if !pv.PodTerminated(p) && p.DeletionTimestamp == nil {
		return
	}
	for _, name := range pv.ClaimNames(p) {
		if pvc, err := c.claims.Lister().Namespace(p.Namespace).Get(name); err == nil && pvc.Spec.VolumeName != "" {
			c.loop.Queue.Add(volumePrefix + pvc.Spec.VolumeName)
		}
	}
}

func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	if name, ok := strings.CutPrefix(key, volumePrefix); ok {
		return c.syncVolume(ctx, name)
	}
	ns, name, _ := cache.SplitKey(strings.TrimPrefix(key, claimPrefix))
	w := c.world()
	pvc := w.claim(ns, name)
	if pvc == nil {
		return reconcile.Result{}, nil
	}
	return c.execute(ctx, syncClaim(pvc, w), nil, pvc)
}

func (c *Controller) syncVolume(ctx context.Context, name string) (reconcile.Result, error) {
	w := c.world()
	v := w.Volume(name)
	if v == nil {
		return reconcile.Result{}, nil
	}
	var pvc *corev1.PersistentVolumeClaim
	if ref := v.Spec.ClaimRef; ref != nil && ref.UID != "" {
		pvc = w.claim(ref.Namespace, ref.Name)
		// Before releasing a volume, make sure its claim is really gone or replaced: the cache
		// may not show a claim just created (by a provisioner, with the volume) yet.
		unsure := pvc == nil && v.Status.Phase != corev1.VolumeReleased && v.Status.Phase != corev1.VolumeFailed
		if unsure || pvc != nil && pvc.UID != ref.UID {
			live, err := client.Resource[*corev1.PersistentVolumeClaim](c.client, "persistentvolumeclaims").Namespace(ref.Namespace).Get(ctx, ref.Name)
			switch {
			case client.IsNotFound(err):
				pvc = nil
			case err != nil:
				return reconcile.Result{}, err
			default:
				pvc = live
			}
		}
	}
	return c.execute(ctx, syncVolume(v, pvc, w), v, pvc)
}

// execute carries out a plan: the writes in order, each on the result of the one before, then
// the recycler pod, the events and the follow-up syncs. After a failed recycling the volume
// (the key synced: only a volume's sync recycles) is looked at again when its backoff ends.
func (c *Controller) execute(ctx context.Context, p plan, volume *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) (reconcile.Result, error) {
	if p.target != nil {
		volume = p.target
	}
	volumes := client.Resource[*corev1.PersistentVolume](c.client, "persistentvolumes")
	if p.volume != nil {
		updated, err := volumes.Update(ctx, p.volume)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("updating volume %s: %w", p.volume.Name, err)
		}
		volume = remember(c.written, volumePrefix+updated.Name, updated)
	}
	if p.volumeStatus != nil {
		next := volume.DeepCopy()
		next.Status = *p.volumeStatus
		updated, err := volumes.UpdateStatus(ctx, next)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("updating the status of volume %s: %w", next.Name, err)
		}
		volume = remember(c.written, volumePrefix+updated.Name, updated)
	}
	if pvc != nil {
		claims := client.Resource[*corev1.PersistentVolumeClaim](c.client, "persistentvolumeclaims").Namespace(pvc.Namespace)
		if p.claim != nil {
			updated, err := claims.Update(ctx, p.claim)
			if err != nil {
				return reconcile.Result{}, fmt.Errorf("updating claim %s: %w", claimKey(p.claim), err)
			}
			pvc = remember(c.written, claimPrefix+claimKey(updated), updated)
		}
		if p.claimStatus != nil {
			next := pvc.DeepCopy()
			next.Status = *p.claimStatus
			updated, err := claims.UpdateStatus(ctx, next)
			if err != nil {
				return reconcile.Result{}, fmt.Errorf("updating the status of claim %s: %w", claimKey(next), err)
			}
			pvc = remember(c.written, claimPrefix+claimKey(updated), updated)
		}
	}
	retry, err := c.recyclerWrites(ctx, p, volume)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, e := range p.events {
		var obj metav1.Object = volume
		if e.onClaim {
			obj = pvc
		}
		c.recorder.Eventf(obj, e.eventType, e.reason, "%s", e.message)
	}
	if p.syncClaim != "" {
		c.loop.Queue.Add(claimPrefix + p.syncClaim)
	}
	return reconcile.After(retry), p.err
}

// recyclerWrites creates or deletes the volume's recycler pod as planned and keeps the backoff
// of failed recyclings; after a failure it returns the backoff, when to try again.
func (c *Controller) recyclerWrites(ctx context.Context, p plan, volume *corev1.PersistentVolume) (retry time.Duration, err error) {
	pods := client.Resource[*corev1.Pod](c.client, "pods").Namespace(recyclerNamespace)
	if d := p.deleteRecycler; d != nil {
		err := pods.Delete(ctx, d.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &d.UID}})
		if err != nil && !client.IsNotFound(err) && !client.IsConflict(err) {
			return 0, fmt.Errorf("deleting recycler pod %s: %w", d.Name, err)
		}
	}
	if p.recycler != nil {
		_, err := pods.Create(ctx, p.recycler)
		switch {
		case err == nil:
			slog.Info("recycling volume", "controller", Name, "volume", volume.Name, "pod", p.recycler.Name)
		case !client.IsAlreadyExists(err): // already there: the informer has not shown it yet
			return 0, fmt.Errorf("creating recycler pod for volume %s: %w", volume.Name, err)
		}
	}
	c.backoffMu.Lock()
	defer c.backoffMu.Unlock()
	switch {
	case p.recycled:
		delete(c.backoff, volume.Name)
	case p.recycleFailed:
		b := c.backoff[volume.Name]
		b.failures++
		delay := min(10*time.Second<<min(b.failures-1, 4), 2*time.Minute)
		b.until = c.now().Add(delay)
		c.backoff[volume.Name] = b
		return delay, nil
	}
	return 0, nil
}

// informerWorld is the world of decisions: the informers' caches, with what this controller
// wrote itself and the informers do not show yet.
type informerWorld struct{ c *Controller }

func (c *Controller) world() informerWorld { return informerWorld{c} }

func (w informerWorld) Volume(name string) *corev1.PersistentVolume {
	v, ok := w.c.volumes.Indexer().Get(name)
	return latest(w.c.written, volumePrefix+name, v, ok)
}

func (w informerWorld) Volumes() []*corev1.PersistentVolume {
	list := w.c.volumes.Lister().List(labels.Everything())
	for i, v := range list {
		list[i] = latest(w.c.written, volumePrefix+v.Name, v, true)
	}
	return list
}

func (w informerWorld) claim(ns, name string) *corev1.PersistentVolumeClaim {
	pvc, ok := w.c.claims.Indexer().Get(ns + "/" + name)
	return latest(w.c.written, claimPrefix+ns+"/"+name, pvc, ok)
}

func (w informerWorld) Class(name string) *storagev1.StorageClass {
	if name == "" {
		return nil
	}
	sc, _ := w.c.classes.Indexer().Get(name)
	return sc
}

func (w informerWorld) Classes() []*storagev1.StorageClass {
	return w.c.classes.Lister().List(labels.Everything())
}

func (w informerWorld) PodsUsing(ns, claim string) []*corev1.Pod {
	return PodsUsingClaim(w.c.pods, ns, claim)
}

func (w informerWorld) Pod(ns, name string) *corev1.Pod {
	p, _ := w.c.pods.Indexer().Get(ns + "/" + name)
	return p
}

func (w informerWorld) RecycleWaiting(volume string) bool {
	w.c.backoffMu.Lock()
	defer w.c.backoffMu.Unlock()
	return w.c.now().Before(w.c.backoff[volume].until)
}

// written remembers the last object this controller wrote under each key until the informer
// delivers that version or a newer one, so that the next decision does not start from an
// older version (and fail on a conflict, or decide twice).
type written struct {
	mu   sync.Mutex
	objs map[string]metav1.Object
}

func newWritten() *written { return &written{objs: map[string]metav1.Object{}} }

// remember records obj as the latest version under key and returns it.
func remember[T metav1.Object](w *written, key string, obj T) T {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.objs[key] = obj
	return obj
}

// seen forgets what was written under key once the informer shows obj, that version or newer.
func (w *written) seen(key string, obj metav1.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if o, ok := w.objs[key]; ok && !newer(o, obj) {
		delete(w.objs, key)
	}
}

func (w *written) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.objs, key)
}

// latest returns what was written under key if it is newer than the cached object, else the
// cached one. An object missing from the cache stays missing: the informer saw it deleted.
func latest[T metav1.Object](w *written, key string, cached T, found bool) T {
	w.mu.Lock()
	defer w.mu.Unlock()
	if o, ok := w.objs[key]; ok && found && newer(o, cached) {
		return o.(T)
	}
	return cached
}

// newer reports whether a has a later resourceVersion than b. Resource versions are etcd
// revisions, so they compare as numbers (as Kubernetes' binder compares them); anything else
// counts as not newer, which falls back to the informer's copy.
func newer(a, b metav1.Object) bool {
	ra, errA := strconv.ParseInt(a.GetResourceVersion(), 10, 64)
	rb, errB := strconv.ParseInt(b.GetResourceVersion(), 10, 64)
	return errA == nil && errB == nil && ra > rb
}
