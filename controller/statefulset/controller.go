// Package statefulset is the StatefulSet controller: pods with stable identities <set>-<ordinal>
// (ordinals from spec.ordinals.start), each with a hostname, the set's service as subdomain,
// and claims made from volumeClaimTemplates before it and kept, or deleted by the garbage
// collector, as persistentVolumeClaimRetentionPolicy says; created in order and one at a
// time, each running and ready before the next, and removed in reverse order (OrderedReady),
// or all at once (Parallel); failed pods replaced; templates rolled out from the highest
// ordinal down to the partition (RollingUpdate, maxUnavailable at a time when set) or when
// pods are deleted (OnDelete); a ControllerRevision per template (kubectl rollout history
// and undo); status as kubectl rollout status reads it.
package statefulset

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "statefulset"

// Kind is the kind of the owner references the set puts on its pods, claims and revisions.
var Kind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "statefulset-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentSyncs: StatefulSets synced at once (--concurrent-statefulset-syncs, 5).
	ConcurrentSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentSyncs: 5} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentSyncs, "concurrent-statefulset-syncs", o.ConcurrentSyncs, "workers of the StatefulSet controller")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	if o.ConcurrentSyncs < 1 {
		return []error{errors.New("--concurrent-statefulset-syncs must be at least 1")}
	}
	return nil
}

// Controller syncs StatefulSets: the queue holds StatefulSet keys.
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	sets     *cache.Informer[*appsv1.StatefulSet]
	pods     *cache.Informer[*corev1.Pod]
	claims   *cache.Informer[*corev1.PersistentVolumeClaim]
	revs     *cache.Informer[*appsv1.ControllerRevision]
	loop     *controller.Loop
	writes   *pendingWrites
	now      func() time.Time
}

// New builds the controller on ctx's shared informers.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("statefulset controller: the context needs a client and informers")
	}
	c := &Controller{
		client:   ctx.Client,
		recorder: ctx.Recorder.For("statefulset-controller"),
		sets:     cache.For[*appsv1.StatefulSet](ctx.Informers, "statefulsets"),
		pods:     cache.For[*corev1.Pod](ctx.Informers, "pods"),
		claims:   cache.For[*corev1.PersistentVolumeClaim](ctx.Informers, "persistentvolumeclaims"),
		revs:     cache.For[*appsv1.ControllerRevision](ctx.Informers, "controllerrevisions"),
		loop:     controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentSyncs), controller.WithResync(ctx.ResyncPeriod())),
		writes:   newPendingWrites(nil),
		now:      time.Now,
	}
	controller.For(c.loop, c.sets)
	controller.Owns(c.loop, c.revs, Kind)
	// Claims are read, not watched: a claim's own changes decide nothing here, and the waits
	// that depend on one (a claim the collector has yet to delete) look again on their own.
	c.loop.Reads(c.claims.HasSynced)
	// Not Owns: pod events settle pending writes, and orphans queue the sets that may adopt them.
	controller.Watch(c.loop, c.pods, cache.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod, _ bool) {
			if p.DeletionTimestamp != nil {
				c.podGone(p)
				return
			}
			if key, ok := c.ownerKey(p); ok {
				c.writes.observed(key, cache.MetaNamespaceKey(p), false)
				c.loop.Queue.Add(key)
				return
			}
			c.orphan(p)
		},
		OnUpdate: func(old, p *corev1.Pod) {
			if p.DeletionTimestamp != nil {
				c.podGone(p)
				return
			}
			oldKey, hadOwner := c.ownerKey(old)
			key, ok := c.ownerKey(p)
			if hadOwner && oldKey != key {
				c.loop.Queue.Add(oldKey)
			}
			if ok {
				c.loop.Queue.Add(key)
				return
			}
			if !labels.Equals(old.Labels, p.Labels) || hadOwner {
				c.orphan(p)
			}
		},
		OnDelete: func(p *corev1.Pod, _ bool) { c.podGone(p) },
	}, 0)
	return c, nil
}

// ownerKey is the key of the StatefulSet controlling p, if one does.
func (c *Controller) ownerKey(p *corev1.Pod) (string, bool) {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || ref.Kind != Kind.Kind || ref.APIVersion != Kind.GroupVersion().String() {
		return "", false
	}
	return p.Namespace + "/" + ref.Name, true
}

// podGone: the pod is terminating or deleted.
func (c *Controller) podGone(p *corev1.Pod) {
	if key, ok := c.ownerKey(p); ok {
		c.writes.observed(key, cache.MetaNamespaceKey(p), true)
		c.loop.Queue.Add(key)
	}
}

// orphan queues the sets of the pod's namespace whose selector matches it: one may adopt it.
func (c *Controller) orphan(p *corev1.Pod) {
	set := labels.Set(p.Labels)
	for _, ss := range c.sets.Lister().Namespace(p.Namespace).List(labels.Everything()) {
		sel, err := metav1.LabelSelectorAsSelector(ss.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(set) && isMember(ss, p) {
			c.loop.Queue.Add(cache.MetaNamespaceKey(ss))
		}
	}
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}

// pendingTTL is how long unobserved writes hold a set's syncs back: after that the informer is
// assumed to have missed the events (as podcontrol.ExpectationsTTL).
const pendingTTL = 5 * time.Minute

// pendingWrites remembers, per set, the pods a sync created or deleted that the informer has
// not shown yet. Until it has, the cache is known to be behind the server and a sync would
// decide from a past state (make a pod again, take a second step of an ordered rollout); the
// event that shows the write queues the set again. Pod names are known before creation, so
// both are tracked by pod key.
type pendingWrites struct {
	mu   sync.Mutex
	sets map[string]*pending
	now  func() time.Time
}

type pending struct {
	created, deleted map[string]bool
	since            time.Time
}

func newPendingWrites(now func() time.Time) *pendingWrites {
	if now == nil {
		now = time.Now
	}
	return &pendingWrites{sets: map[string]*pending{}, now: now}
}

func (w *pendingWrites) expect(set, pod string, deletion bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.sets[set]
	if !ok {
		p = &pending{created: map[string]bool{}, deleted: map[string]bool{}}
		w.sets[set] = p
	}
	p.since = w.now()
	if deletion {
		p.deleted[pod] = true
	} else {
		p.created[pod] = true
	}
}

// observed marks the creation (gone false) or deletion (gone true) of pod as seen, or as not
// going to happen.
func (w *pendingWrites) observed(set, pod string, gone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.sets[set]
	if !ok {
		return
	}
	// A deletion settles only deletions: the event of an earlier pod of that name going may
	// come after the cache has shown it gone and a new one has been asked for.
	if gone {
		delete(p.deleted, pod)
	} else {
		delete(p.created, pod)
	}
	if len(p.created)+len(p.deleted) == 0 {
		delete(w.sets, set)
	}
}

// settled reports whether the cache shows every write made for the set (or they are older
// than the TTL).
func (w *pendingWrites) settled(set string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.sets[set]
	return !ok || w.now().Sub(p.since) > pendingTTL
}

func (w *pendingWrites) forget(set string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.sets, set)
}
