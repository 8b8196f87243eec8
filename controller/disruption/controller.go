// Package disruption is the disruption controller: it keeps the status of every
// PodDisruptionBudget in step with the pods it selects, so that the eviction subresource
// (apiserver/eviction.go) can tell whether one more pod may go. For each budget it finds the
// pods expected (the scale of their controllers, or for minAvailable as a count the pods that
// match), the healthy ones (Ready, not being deleted, not recently evicted), how many must
// stay healthy, and so how many disruptions are allowed, with the DisruptionAllowed condition
// saying why (SufficientPods, InsufficientPods, or SyncFailed when the sync itself failed, in
// which case none are allowed). It forgets the pods evictions recorded in
// status.disruptedPods once they are deleted or after two minutes, and clears a
// DisruptionTarget condition left on a pod that was not deleted after all.
package disruption

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/reconcile"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "disruption"

// Entry registers the controller with the manager. Like kube-controller-manager's, it has no
// settings of its own and one worker.
var Entry = controller.Entry{
	Name:    "disruption-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return controller.NoOptions{} },
	New:     controller.Build(New),
}

// staleConditionTimeout is how long a pod may carry a DisruptionTarget condition from an
// eviction without being deleted before the condition is cleared: the eviction failed.
const staleConditionTimeout = 2 * time.Minute

// podKeyPrefix marks the queue keys of pods whose DisruptionTarget condition is to be looked
// at; other keys are budgets ("ns/name"). No namespace name contains a colon.
const podKeyPrefix = "pod:"

// Controller syncs PodDisruptionBudgets.
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	pdbs     *cache.Informer[*policyv1.PodDisruptionBudget]
	pods     *cache.Informer[*corev1.Pod]
	rcs      *cache.Informer[*corev1.ReplicationController]
	rss      *cache.Informer[*appsv1.ReplicaSet]
	deps     *cache.Informer[*appsv1.Deployment]
	scales   *scaleClient
	loop     *controller.Loop
	// staleAfter is staleConditionTimeout (shorter in tests).
	staleAfter time.Duration
	now        func() time.Time
}

// New builds the controller on ctx's shared informers.
func New(ctx *controller.Context, _ controller.NoOptions) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("disruption controller: the context needs a client and informers")
	}
	c := &Controller{
		client:     ctx.Client,
		recorder:   ctx.Recorder.For("controllermanager"),
		pdbs:       cache.For[*policyv1.PodDisruptionBudget](ctx.Informers, "poddisruptionbudgets"),
		pods:       cache.For[*corev1.Pod](ctx.Informers, "pods"),
		rcs:        cache.For[*corev1.ReplicationController](ctx.Informers, "replicationcontrollers"),
		rss:        cache.For[*appsv1.ReplicaSet](ctx.Informers, "replicasets"),
		deps:       cache.For[*appsv1.Deployment](ctx.Informers, "deployments"),
		loop:       controller.NewLoop(ctx, Name, controller.WithResync(ctx.ResyncPeriod())),
		staleAfter: staleConditionTimeout,
		now:        time.Now,
	}
	c.scales = &scaleClient{client: c.client, now: c.now}
	controller.For(c.loop, c.pdbs)
	controller.Map(c.loop, c.pods, c.keysOf)
	// The controllers' scale is read when a budget syncs; their changes come to it through
	// their pods.
	c.loop.Reads(c.rcs.HasSynced, c.rss.HasSynced, c.deps.HasSynced)
	return c, nil
}

// keysOf returns the keys a pod's change queues: the budgets selecting it, and the pod itself
// when it carries a DisruptionTarget condition that may go stale.
func (c *Controller) keysOf(p *corev1.Pod) []string {
	var keys []string
	for _, pdb := range c.pdbs.Lister().Namespace(p.Namespace).List(labels.Everything()) {
		if selects(pdb, p) {
			keys = append(keys, cache.MetaNamespaceKey(pdb))
		}
	}
	if wait, ok := c.staleCondition(p); ok {
		// Not a plain Add: the key must come back when the condition goes stale.
		c.loop.Queue.AddAfter(podKeyPrefix+cache.MetaNamespaceKey(p), wait)
	}
	return keys
}

// selects reports whether the budget's selector matches the pod: a missing selector matches
// nothing, an empty one every pod of the namespace, an invalid one nothing.
func selects(pdb *policyv1.PodDisruptionBudget, p *corev1.Pod) bool {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	return err == nil && sel.Matches(labels.Set(p.Labels))
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, func(ctx context.Context, key string) (reconcile.Result, error) {
		if pod, ok := strings.CutPrefix(key, podKeyPrefix); ok {
			return c.syncPodCondition(ctx, pod)
		}
		return c.sync(ctx, key)
	})
	return nil
}
