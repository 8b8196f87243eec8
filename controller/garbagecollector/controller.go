// Package garbagecollector is the owner-reference garbage collector: it deletes objects whose
// owners (metadata.ownerReferences) are all gone, and carries out the two deletions that wait
// for it, marked by finalizers the apiserver sets from DeleteOptions.propagationPolicy:
// "orphan" (detach the dependents, then let the owner go) and "foregroundDeletion" (delete the
// dependents, then let the owner go). Background deletion needs no finalizer: the owner is
// removed at once and its dependents, their owners now gone, are collected afterwards.
//
// It keeps a graph of every object of the served kinds (UID → owners, owner UID → dependents)
// and queues UIDs whose situation changed. The kinds are those discovery lists as listable,
// watchable and deletable (events left out), asked for again every 30 seconds, so resources
// served later (custom resources) are collected from then on; each is watched through the
// typed informer other controllers share, or else one of the objects' metadata only. A UID's sync reads the
// graph, checks owners the graph does not know with a live GET (an informer may lag), and acts
// through the API: deletes with a UID precondition, JSON patches that test what they remove.
package garbagecollector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/reconcile"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "garbagecollector"

// Entry registers the garbage collector with the controller manager.
var Entry = controller.Entry{
	Name:    "garbage-collector-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the garbage collector's settings.
type Options struct {
	// ConcurrentGCSyncs: objects synced at once (--concurrent-gc-syncs, 20).
	ConcurrentGCSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentGCSyncs: 20} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentGCSyncs, "concurrent-gc-syncs", o.ConcurrentGCSyncs, "workers of the garbage collector")
}

// Validate reports every invalid setting. Kubernetes checks nothing here, and at 0 it runs no
// workers and so collects nothing; like every other controller's workers, at least one is
// required.
func (o *Options) Validate() []error {
	if o.ConcurrentGCSyncs < 1 {
		return []error{errors.New("--concurrent-gc-syncs must be at least 1")}
	}
	return nil
}

// discoveryPeriod is how often the collector asks the server what it serves (Kubernetes'
// collector does every 30 seconds).
const discoveryPeriod = 30 * time.Second

// Controller is the garbage collector.
type Controller struct {
	client    *client.Client
	informers *cache.Factory
	graph     *graph
	loop      *controller.Loop // its queue holds object UIDs
	// serverResources is discovery (tests narrow it to show resources appearing).
	serverResources func(context.Context) ([]*metav1.APIResourceList, error)

	mu      sync.Mutex
	watched controller.Discovered[watched]
	kinds   map[schema.GroupKind]*kind // of the watched resources
	started bool                       // the loop runs: new handlers are not waited for

	unknown sync.Map // schema.GroupKind → struct{}: owner kinds not served, logged once
}

// New builds the collector on ctx's shared informers. Which resources it watches it learns
// from discovery when it runs, by which time the other controllers have made their typed
// informers, which it then shares.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("garbage collector: the context needs a client and informers")
	}
	c := &Controller{
		client:    ctx.Client,
		informers: ctx.Informers,
		graph:     newGraph(),
		kinds:     map[schema.GroupKind]*kind{},
		loop:      controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentGCSyncs)),
	}
	c.serverResources = c.client.ServerResources
	return c, nil
}

// Name is the controller's registry name.
func (c *Controller) Name() string { return Name }

// Run discovers the served resources and watches them, waits until every one is in the graph
// (each handler has seen its informer's initial list), then syncs until ctx is cancelled,
// discovering again every discoveryPeriod.
func (c *Controller) Run(ctx context.Context) error {
	c.rediscover(ctx)
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	defer c.stopWatching()
	c.loop.Every(discoveryPeriod, c.rediscover)
	c.loop.Run(ctx, reconcile.Ignore(c.sync))
	return nil
}

func (c *Controller) observe(n *node) {
	for _, uid := range c.graph.upsert(n) {
		c.loop.Queue.Add(string(uid))
	}
}

func (c *Controller) forget(uid types.UID) {
	for _, u := range c.graph.remove(uid) {
		c.loop.Queue.Add(string(u))
	}
}

// sync looks at one object: as an owner being deleted with orphan or foreground propagation,
// or as a dependent whose owners may be gone or waiting for it.
func (c *Controller) sync(ctx context.Context, key string) error {
	n, deps := c.graph.get(types.UID(key))
	if n == nil {
		return nil
	}
	k := c.kindOf(n.kind.GroupKind())
	switch {
	case n.deleting && n.has(metav1.FinalizerOrphanDependents):
		return c.orphan(ctx, k, n, deps)
	case n.waitingForDependents():
		return c.foreground(ctx, k, n, deps)
	case n.deleting || len(n.owners) == 0:
		return nil
	}
	states := make([]ownerState, len(n.owners))
	for i, r := range n.owners {
		s, err := c.ownerState(ctx, n, r)
		if err != nil {
			return err
		}
		states[i] = s
	}
	v := judge(n, states, len(deps) > 0)
	switch {
	case len(v.detach) > 0:
		return c.detach(ctx, k, n, v.detach)
	case v.delete != "":
		return c.deleteObject(ctx, k, n, v.delete)
	}
	return nil
}

// ownerState finds out about owner r of n: from the graph when it has the owner, else with a
// GET (the owner's informer may not have seen it yet). An owner of a kind kplane does not
// serve cannot be checked and counts as present.
func (c *Controller) ownerState(ctx context.Context, n *node, r metav1.OwnerReference) (ownerState, error) {
	if o := c.graph.lookup(r.UID); o != nil {
		if o.waitingForDependents() {
			return ownerWaiting, nil
		}
		return ownerSolid, nil
	}
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	gk := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
	k := c.kindOf(gk)
	if err != nil || k == nil {
		if _, seen := c.unknown.LoadOrStore(gk, struct{}{}); !seen {
			slog.Info("garbage collector: owner kind not served, leaving its dependents alone",
				"apiVersion", r.APIVersion, "kind", r.Kind, "dependent", n.namespace+"/"+n.name)
		}
		return ownerSolid, nil
	}
	ns := ""
	if k.namespaced {
		ns = n.namespace
	}
	obj, err := k.get(ctx, ns, r.Name)
	switch {
	case client.IsNotFound(err):
		return ownerGone, nil
	case err != nil:
		return ownerSolid, err
	case obj.GetUID() != r.UID:
		return ownerGone, nil
	case obj.GetDeletionTimestamp() != nil && slices.Contains(obj.GetFinalizers(), metav1.FinalizerDeleteDependents):
		return ownerWaiting, nil
	}
	return ownerSolid, nil
}

// orphan detaches every dependent of n, then removes n's "orphan" finalizer.
func (c *Controller) orphan(ctx context.Context, k *kind, n *node, deps []*node) error {
	for _, d := range deps {
		if err := c.detach(ctx, c.kindOf(d.kind.GroupKind()), d, []types.UID{n.uid}); err != nil {
			return fmt.Errorf("orphaning %s %s/%s: %w", d.kind.Kind, d.namespace, d.name, err)
		}
	}
	return c.removeFinalizer(ctx, k, n, metav1.FinalizerOrphanDependents)
}

// foreground has n's dependents deleted and removes n's "foregroundDeletion" finalizer once no
// dependent that blocks its deletion (blockOwnerDeletion) is left. The dependents delete
// themselves in their own syncs, which find their owner waiting.
//
// Owners in a circle (A owns B owns C owns A) would each wait for the next forever once all
// are being deleted in the foreground: a blocking dependent that is itself waiting and leads
// back to n through its own dependents stops blocking n (its reference to n is unblocked), so
// n goes first and the rest follow in turn, as in Kubernetes, which unblocks a dependent's
// references when it finds the circle.
func (c *Controller) foreground(ctx context.Context, k *kind, n *node, deps []*node) error {
	blocked := false
	for _, d := range deps {
		if d.blocks(n.uid) {
			if d.waitingForDependents() && c.graph.reaches(d.uid, n.uid) {
				if err := c.unblock(ctx, d, n.uid); err != nil {
					return err
				}
				continue
			}
			blocked = true
		}
		if !d.deleting {
			c.loop.Queue.Add(string(d.uid))
		}
	}
	if blocked {
		return nil // each blocking dependent's removal queues n again
	}
	return c.removeFinalizer(ctx, k, n, metav1.FinalizerDeleteDependents)
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// detach removes n's owner references to the given UIDs with a JSON patch that tests each
// reference it removes, so a stale cache makes it fail (and retry) rather than remove another.
func (c *Controller) detach(ctx context.Context, k *kind, n *node, owners []types.UID) error {
	ops := []patchOp{{Op: "test", Path: "/metadata/uid", Value: n.uid}}
	for i := len(n.owners) - 1; i >= 0; i-- {
		if slices.Contains(owners, n.owners[i].UID) {
			p := fmt.Sprintf("/metadata/ownerReferences/%d", i)
			ops = append(ops, patchOp{Op: "test", Path: p + "/uid", Value: n.owners[i].UID}, patchOp{Op: "remove", Path: p})
		}
	}
	if len(ops) == 1 {
		return nil
	}
	return c.patch(ctx, k, n, ops)
}

// unblock sets blockOwnerDeletion false on n's reference to owner, testing that the reference
// is where the cache saw it.
func (c *Controller) unblock(ctx context.Context, n *node, owner types.UID) error {
	for i, r := range n.owners {
		if r.UID == owner {
			p := fmt.Sprintf("/metadata/ownerReferences/%d", i)
			slog.Info("garbage collector: owners in a circle, unblocking a reference", "kind", n.kind.Kind,
				"object", n.namespace+"/"+n.name, "owner", r.Kind+"/"+r.Name)
			return c.patch(ctx, c.kindOf(n.kind.GroupKind()), n, []patchOp{{Op: "test", Path: "/metadata/uid", Value: n.uid},
				{Op: "test", Path: p + "/uid", Value: owner}, {Op: "replace", Path: p + "/blockOwnerDeletion", Value: false}})
		}
	}
	return nil
}

// removeFinalizer removes finalizer f from n, testing that it is where the cache saw it.
func (c *Controller) removeFinalizer(ctx context.Context, k *kind, n *node, f string) error {
	ops := []patchOp{{Op: "test", Path: "/metadata/uid", Value: n.uid}}
	for i := len(n.finalizers) - 1; i >= 0; i-- {
		if n.finalizers[i] == f {
			p := fmt.Sprintf("/metadata/finalizers/%d", i)
			ops = append(ops, patchOp{Op: "test", Path: p, Value: f}, patchOp{Op: "remove", Path: p})
		}
	}
	if len(ops) == 1 {
		return nil
	}
	return c.patch(ctx, k, n, ops)
}

func (c *Controller) patch(ctx context.Context, k *kind, n *node, ops []patchOp) error {
	if k == nil {
		return nil
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	err = k.patch(ctx, n.namespace, n.name, types.JSONPatchType, data)
	if client.IsNotFound(err) {
		return nil
	}
	return err
}

// deleteObject deletes n with propagation policy p, only if it is still the object with n's UID.
func (c *Controller) deleteObject(ctx context.Context, k *kind, n *node, p metav1.DeletionPropagation) error {
	if k == nil {
		return nil
	}
	uid := n.uid
	slog.Debug("garbage collector: deleting", "kind", n.kind.Kind, "object", n.namespace+"/"+n.name, "propagation", p)
	err := k.delete(ctx, n.namespace, n.name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: &p,
	})
	if client.IsNotFound(err) || client.IsConflict(err) {
		return nil // gone already, or replaced by a new object of the same name
	}
	return err
}
