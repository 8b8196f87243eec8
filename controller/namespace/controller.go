// Package namespace is the namespace controller: when a namespace is deleted (it has a
// deletionTimestamp and phase Terminating) it deletes everything in it — every namespaced
// resource discovery lists — waits until nothing is left, then removes the "kubernetes"
// finalizer through namespaces/<name>/finalize, after which the API server removes the
// namespace. The namespace's status conditions tell how far it got.
//
// The resources are discovered at each pass over a namespace (from the aggregated discovery
// documents, which cost two requests, or two 304s while nothing changed), so resources served
// later (custom resources) are emptied too; objects are listed and deleted one by one as
// metadata only, where a resource takes no deletecollection.
package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/reconcile"
	"github.com/kplane/kplane/workqueue"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "namespace"

// Entry registers the controller with the manager.
var Entry = controller.Entry{
	Name:    "namespace-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// ConcurrentSyncs: namespaces emptied at once (--concurrent-namespace-syncs, 10).
	ConcurrentSyncs int
	// SyncPeriod: how often every namespace is looked at again (--namespace-sync-period, 5m).
	SyncPeriod time.Duration
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentSyncs: 10, SyncPeriod: 5 * time.Minute} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentSyncs, "concurrent-namespace-syncs", o.ConcurrentSyncs, "workers of the namespace controller")
	fs.DurationVar(&o.SyncPeriod, "namespace-sync-period", o.SyncPeriod, "how often the namespace controller looks at every namespace again")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConcurrentSyncs < 1 {
		errs = append(errs, errors.New("--concurrent-namespace-syncs must be at least 1"))
	}
	if o.SyncPeriod <= 0 {
		errs = append(errs, errors.New("--namespace-sync-period must be positive"))
	}
	return errs
}

// Retry pacing: per namespace 5 ms doubling up to a minute (a stuck namespace is looked at
// again at least every minute), at most 10 retries a second after a burst of 100 overall.
const (
	retryBase  = 5 * time.Millisecond
	retryMax   = time.Minute
	retryQPS   = 10
	retryBurst = 100
)

// settleDelay: a deleted namespace is first synced this long after the event, so that other
// API servers see the deletion and objects created a moment before it are stored everywhere.
const settleDelay = 5 * time.Second

// Controller queues the names of deleted namespaces; sync empties and finalizes them.
type Controller struct {
	client *client.Client
	nss    *cache.Informer[*corev1.Namespace]
	loop   *controller.Loop
	settle time.Duration
	// heldWait: how long to expect objects held by finalizers to take (finalizerEstimate).
	heldWait time.Duration
	now      func() time.Time
}

// New builds the controller on ctx's shared namespace informer.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("namespace controller: the context needs a client and informers")
	}
	limiter := workqueue.NewMaxOfRateLimiter[string](
		workqueue.NewItemExponentialFailureRateLimiter[string](retryBase, retryMax),
		workqueue.NewBucketRateLimiter[string](retryQPS, retryBurst),
	)
	c := &Controller{
		client:   ctx.Client,
		nss:      cache.For[*corev1.Namespace](ctx.Informers, "namespaces"),
		loop:     controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentSyncs), controller.WithRateLimiter(limiter)),
		settle:   settleDelay,
		heldWait: finalizerEstimate,
		now:      time.Now,
	}
	queue := func(ns *corev1.Namespace) {
		if ns.DeletionTimestamp != nil {
			c.loop.Queue.AddAfter(ns.Name, c.settle)
		}
	}
	controller.Watch(c.loop, c.nss, cache.Handler[*corev1.Namespace]{
		OnAdd:    func(ns *corev1.Namespace, _ bool) { queue(ns) },
		OnUpdate: func(_, ns *corev1.Namespace) { queue(ns) },
	}, o.SyncPeriod)
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the cache and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, c.sync)
	return nil
}

// remainingError: content is still going away on its own (pods terminating, finalizers
// running); look again after about half the estimate.
type remainingError struct{ estimate time.Duration }

func (e *remainingError) Error() string {
	return fmt.Sprintf("content remains in the namespace, expected gone within %s", e.estimate)
}

func (c *Controller) sync(ctx context.Context, name string) (reconcile.Result, error) {
	err := c.syncNamespace(ctx, name)
	if re := (*remainingError)(nil); errors.As(err, &re) {
		return reconcile.After(re.estimate/2 + time.Second), nil
	}
	return reconcile.Result{}, err
}

// syncNamespace reads the namespace from the API server (the cache may lag what another
// controller just did), and if it is being deleted and still has our finalizer, empties it
// and finalizes it.
func (c *Controller) syncNamespace(ctx context.Context, name string) error {
	nss := client.Resource[*corev1.Namespace](c.client, "namespaces")
	ns, err := nss.Get(ctx, name)
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp == nil || !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
		return nil
	}
	if ns.Status.Phase != corev1.NamespaceTerminating {
		ns.Status.Phase = corev1.NamespaceTerminating
		if ns, err = nss.UpdateStatus(ctx, ns); err != nil {
			return ignoreNotFound(err)
		}
	}

	out, estimate := c.deleteContent(ctx, ns)
	if err := c.writeConditions(ctx, ns, out); err != nil {
		return ignoreNotFound(err)
	}
	switch {
	case out.discoveryErr != nil:
		return out.discoveryErr
	case len(out.deleteErrs) > 0:
		return fmt.Errorf("namespace %s: %d resources failed: %v", name, len(out.deleteErrs), out.deleteErrs)
	case estimate > 0:
		return &remainingError{estimate}
	case len(out.remaining) > 0:
		return fmt.Errorf("namespace %s: content still remains: %s", name, counts(out.remaining, "instances"))
	}
	return ignoreNotFound(c.finalize(ctx, name))
}

// finalize removes our finalizer from the namespace's spec, retrying on conflicts.
func (c *Controller) finalize(ctx context.Context, name string) error {
	nss := client.Resource[*corev1.Namespace](c.client, "namespaces")
	for attempt := 0; ; attempt++ {
		ns, err := nss.Get(ctx, name)
		if err != nil {
			return err
		}
		if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
			return nil
		}
		ns.Spec.Finalizers = slices.DeleteFunc(ns.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
		_, err = nss.UpdateSubresource(ctx, ns, "finalize")
		if !client.IsConflict(err) || attempt >= 5 {
			return err
		}
	}
}

// writeConditions records out on the namespace when its conditions change.
func (c *Controller) writeConditions(ctx context.Context, ns *corev1.Namespace, out outcome) error {
	status, changed := withConditions(ns.Status, out.conditions(metav1.NewTime(c.now())))
	if !changed {
		return nil
	}
	next := ns.DeepCopy()
	next.Status = status
	_, err := client.Resource[*corev1.Namespace](c.client, "namespaces").UpdateStatus(ctx, next)
	if client.IsConflict(err) {
		return nil // changed meanwhile: the next sync writes them
	}
	return err
}

// deleteContent deletes every object of every namespaced resource in ns and reports what is
// left, and how long the rest should still take to go away on its own (0: it should not).
func (c *Controller) deleteContent(ctx context.Context, ns *corev1.Namespace) (outcome, time.Duration) {
	out := outcome{remaining: map[string]int{}, finalizers: map[string]int{}}
	lists, err := c.client.ServerResources(ctx)
	if err != nil {
		out.discoveryErr = err
		return out, 0
	}
	// Pods go first, and nothing else until they are gone (ordered namespace deletion, on by
	// default since Kubernetes v1.34): a pod still running keeps the Secrets, ConfigMaps and
	// claims it uses, and a Service keeps its endpoints while its pods terminate.
	resources := contentResources(lists)
	slices.SortStableFunc(resources, func(a, b contentResource) int { return boolFirst(isPods(a)) - boolFirst(isPods(b)) })
	var estimate time.Duration
	for _, r := range resources {
		if !isPods(r) && out.remaining[podsName] > 0 {
			break
		}
		est, left, err := c.deleteResource(ctx, r, ns)
		if err != nil {
			out.deleteErrs = append(out.deleteErrs, r.String()+": "+err.Error())
			continue
		}
		if len(left) == 0 {
			continue
		}
		out.remaining[r.String()] = len(left)
		held := false
		for _, m := range left {
			for _, f := range m.Finalizers {
				out.finalizers[r.String()+" "+f]++
				held = true
			}
		}
		if est == 0 && held {
			est = c.heldWait
		}
		estimate = max(estimate, est)
	}
	return out, estimate
}

// podsName is the pods resource as outcome counts it.
var podsName = contentResource{GroupVersion: "v1", Resource: "pods"}.String()

func isPods(r contentResource) bool { return r.GroupVersion == "v1" && r.Resource == "pods" }

func boolFirst(b bool) int {
	if b {
		return 0
	}
	return 1
}

// deleteResource deletes the objects of one resource in ns and returns the pods' grace
// estimate (pods only) and what is still listed afterwards.
func (c *Controller) deleteResource(ctx context.Context, r contentResource, ns *corev1.Namespace) (time.Duration, []metav1.ObjectMeta, error) {
	path := r.path(ns.Name)
	var estimate time.Duration
	if isPods(r) {
		pods, err := client.Resource[*corev1.Pod](c.client, "pods").Namespace(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, nil, err
		}
		plain := make([]corev1.Pod, len(pods.Items))
		for i, p := range pods.Items {
			plain[i] = *p
		}
		estimate = podGraceEstimate(plain, ns.DeletionTimestamp.Time, c.now())
	}
	body, err := json.Marshal(&metav1.DeleteOptions{
		TypeMeta:          metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "v1"},
		PropagationPolicy: new(metav1.DeletePropagationBackground),
	})
	if err != nil {
		return 0, nil, err
	}
	collection := r.DeleteCollection
	if collection {
		_, err := c.client.Raw(ctx, http.MethodDelete, path, nil, body)
		switch {
		case apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err):
			collection = false
		case err != nil:
			return 0, nil, err
		}
	}
	objects := client.Metadata(c.client, r.gvr()).Namespace(ns.Name)
	left, err := c.list(ctx, objects)
	if err != nil {
		return 0, nil, err
	}
	if !collection {
		for _, m := range left {
			if m.DeletionTimestamp != nil {
				continue
			}
			err := objects.Delete(ctx, m.Name, metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationBackground)})
			if err != nil && !apierrors.IsNotFound(err) {
				return 0, nil, err
			}
		}
		if left, err = c.list(ctx, objects); err != nil {
			return 0, nil, err
		}
	}
	return estimate, left, nil
}

// list returns the metadata of every object of a resource in the namespace, read as metadata
// only.
func (c *Controller) list(ctx context.Context, objects *client.Typed[*metav1.PartialObjectMetadata]) ([]metav1.ObjectMeta, error) {
	list, err := objects.ListAll(ctx, metav1.ListOptions{}, 500)
	if err != nil {
		return nil, err
	}
	out := make([]metav1.ObjectMeta, len(list.Items))
	for i, it := range list.Items {
		out[i] = it.ObjectMeta
	}
	return out, nil
}

func ignoreNotFound(err error) error {
	if client.IsNotFound(err) {
		return nil
	}
	return err
}
