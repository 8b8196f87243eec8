// Package podgc is the pod garbage collector. Every period it looks at every pod in the cache
// and force-deletes (grace period 0):
//
//   - the oldest terminated pods (phase Succeeded or Failed) beyond a threshold, evicted
//     pods first;
//   - pods bound to a node that has been missing for a quarantine period (and is still
//     missing when asked of the API server, not only of the cache), after marking them Failed
//     with a DisruptionTarget condition, since no node agent will ever do so;
//   - pods being deleted that were never bound to a node, which no node agent will finish.
package podgc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Name is the controller's short name (of its loop and logs), which --controllers also takes.
const Name = "podgc"

// Entry registers the controller with the manager. It has one loop, not workers.
var Entry = controller.Entry{
	Name:    "pod-garbage-collector-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the collector's settings.
type Options struct {
	// TerminatedPodGCThreshold: terminated pods kept before the oldest are deleted
	// (--terminated-pod-gc-threshold, 12500); 0 keeps them all.
	TerminatedPodGCThreshold int
	// PodGCPeriod: how often every pod is looked at (20s; kube-controller-manager has no
	// flag for it).
	PodGCPeriod time.Duration
	// PodGCQuarantine: how long a node must stay missing before its pods are deleted (40s; no
	// flag either), so that a node registering a moment late does not lose its pods.
	PodGCQuarantine time.Duration
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options {
	return &Options{TerminatedPodGCThreshold: 12500, PodGCPeriod: 20 * time.Second, PodGCQuarantine: 40 * time.Second}
}

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.TerminatedPodGCThreshold, "terminated-pod-gc-threshold", o.TerminatedPodGCThreshold, "terminated pods kept before the pod garbage collector deletes the oldest (0 = never delete them)")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.TerminatedPodGCThreshold < 0 {
		errs = append(errs, errors.New("--terminated-pod-gc-threshold must be a whole number, 0 or more"))
	}
	// No flags set these, but a caller may: a period of 0 would make the pass loop panic.
	if o.PodGCPeriod <= 0 {
		errs = append(errs, errors.New("PodGCPeriod must be positive"))
	}
	if o.PodGCQuarantine < 0 {
		errs = append(errs, errors.New("PodGCQuarantine must not be negative"))
	}
	return errs
}

// parallelDeletes bounds the deletions in flight during one pass.
const parallelDeletes = 10

// evictedReason is the status reason a node agent gives a pod it evicted.
const evictedReason = "Evicted"

// Controller is the pod garbage collector.
type Controller struct {
	client     *client.Client
	pods       *cache.Informer[*corev1.Pod]
	nodes      *cache.Informer[*corev1.Node]
	threshold  int // 0: terminated pods are kept
	period     time.Duration
	quarantine *quarantine
	loop       *controller.Loop
}

// New builds the controller on ctx's shared informers (pods, nodes).
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("pod garbage collector: the context needs a client and informers")
	}
	if err := errors.Join(o.Validate()...); err != nil {
		return nil, fmt.Errorf("pod garbage collector: %w", err)
	}
	c := &Controller{
		client:     ctx.Client,
		pods:       cache.For[*corev1.Pod](ctx.Informers, "pods"),
		nodes:      cache.For[*corev1.Node](ctx.Informers, "nodes"),
		threshold:  o.TerminatedPodGCThreshold,
		period:     o.PodGCPeriod,
		quarantine: newQuarantine(o.PodGCQuarantine),
		loop:       controller.NewLoop(ctx, Name),
	}
	// One pass over the caches at a time is enough: no handlers, no queue.
	c.loop.Reads(c.pods.HasSynced, c.nodes.HasSynced)
	c.loop.Every(c.period, func(ctx context.Context) { c.collect(ctx, time.Now()) })
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches, then collects every period until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	slog.Info("starting pod garbage collector", "threshold", c.threshold, "period", c.period)
	defer slog.Info("pod garbage collector stopped")
	c.loop.Run(ctx, nil)
	return nil
}

// collect is one pass over the cache.
func (c *Controller) collect(ctx context.Context, now time.Time) {
	pods := c.pods.Lister().List(labels.Everything())
	nodes := c.nodes.Lister().List(labels.Everything())
	if c.threshold > 0 {
		c.deleteAll(ctx, terminatedToDelete(pods, c.threshold), "terminated", nil)
	}
	c.deleteAll(ctx, orphans(pods, c.goneNodes(ctx, pods, nodes, now)), "orphaned", &corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC",
		Message: "PodGC: node no longer exists",
	})
	c.deleteAll(ctx, unscheduledTerminating(pods), "unscheduled terminating", nil)
}

// goneNodes returns the nodes pods are bound to that have been missing from the cache for the
// quarantine period and that the API server confirms are gone.
func (c *Controller) goneNodes(ctx context.Context, pods []*corev1.Pod, nodes []*corev1.Node, now time.Time) map[string]bool {
	gone := map[string]bool{}
	nodeAPI := client.Resource[*corev1.Node](c.client, "nodes")
	for _, name := range c.quarantine.observe(missingNodes(pods, nodes), now) {
		_, err := nodeAPI.Get(ctx, name)
		switch {
		case client.IsNotFound(err):
			gone[name] = true
		case err != nil:
			slog.Warn("pod gc: could not check node", "node", name, "err", err)
		}
	}
	return gone
}

// deleteAll force-deletes pods, up to parallelDeletes at a time; pods not yet terminated are
// first marked Failed (with cond, if not nil).
func (c *Controller) deleteAll(ctx context.Context, pods []*corev1.Pod, why string, cond *corev1.PodCondition) {
	if len(pods) == 0 {
		return
	}
	slog.Info("pod gc: deleting pods", "reason", why, "count", len(pods))
	sem := make(chan struct{}, parallelDeletes)
	var wg sync.WaitGroup
	for _, pod := range pods {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.forceDelete(ctx, pod, cond); err != nil && !client.IsNotFound(err) && ctx.Err() == nil {
				slog.Warn("pod gc: could not delete pod", "pod", pod.Namespace+"/"+pod.Name, "reason", why, "err", err)
			}
		})
	}
	wg.Wait()
}

func (c *Controller) forceDelete(ctx context.Context, pod *corev1.Pod, cond *corev1.PodCondition) error {
	pods := client.Resource[*corev1.Pod](c.client, "pods").Namespace(pod.Namespace)
	if !terminated(pod) {
		if _, err := pods.Patch(ctx, pod.Name, types.StrategicMergePatchType, failedPatch(pod.UID, cond), metav1.PatchOptions{}, "status"); err != nil {
			return err
		}
	}
	zero := int64(0)
	uid := pod.UID
	return pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
}

// failedPatch is the strategic merge patch setting a pod's phase to Failed and adding cond; the
// uid guards against patching a namesake.
func failedPatch(uid types.UID, cond *corev1.PodCondition) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"metadata":{"uid":%q},"status":{"phase":"Failed"`, uid)
	if cond != nil {
		fmt.Fprintf(&b, `,"conditions":[{"type":%q,"status":%q,"reason":%q,"message":%q,"lastTransitionTime":%q}]`,
			cond.Type, cond.Status, cond.Reason, cond.Message, time.Now().UTC().Format(time.RFC3339))
	}
	b.WriteString("}}")
	return []byte(b.String())
}

func terminated(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// terminatedToDelete returns the terminated pods beyond threshold, in deletion order: evicted
// pods first, then the oldest, then by name.
func terminatedToDelete(pods []*corev1.Pod, threshold int) []*corev1.Pod {
	var done []*corev1.Pod
	for _, p := range pods {
		if terminated(p) {
			done = append(done, p)
		}
	}
	excess := len(done) - threshold
	if excess <= 0 {
		return nil
	}
	slices.SortFunc(done, func(a, b *corev1.Pod) int {
		ae, be := a.Status.Phase == corev1.PodFailed && a.Status.Reason == evictedReason, b.Status.Phase == corev1.PodFailed && b.Status.Reason == evictedReason
		switch {
		case ae && !be:
			return -1
		case be && !ae:
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return done[:excess]
}

// missingNodes returns the names of nodes pods are bound to that are not in nodes.
func missingNodes(pods []*corev1.Pod, nodes []*corev1.Node) map[string]bool {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.Name] = true
	}
	missing := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName != "" && !known[p.Spec.NodeName] {
			missing[p.Spec.NodeName] = true
		}
	}
	return missing
}

// orphans returns the pods bound to one of the gone nodes.
func orphans(pods []*corev1.Pod, gone map[string]bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != "" && gone[p.Spec.NodeName] {
			out = append(out, p)
		}
	}
	return out
}

// unscheduledTerminating returns the pods being deleted that no node was ever given.
func unscheduledTerminating(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil && p.Spec.NodeName == "" {
			out = append(out, p)
		}
	}
	return out
}

// quarantine remembers since when each node has been seen missing. A pure state machine: the
// caller gives the time.
type quarantine struct {
	period time.Duration
	since  map[string]time.Time
}

func newQuarantine(period time.Duration) *quarantine {
	return &quarantine{period: period, since: map[string]time.Time{}}
}

// observe records the nodes missing now, forgets those no longer missing, and returns, sorted,
// those missing for at least the period.
func (q *quarantine) observe(missing map[string]bool, now time.Time) []string {
	var due []string
	for name := range q.since {
		if !missing[name] {
			delete(q.since, name)
		}
	}
	for name := range missing {
		first, ok := q.since[name]
		if !ok {
			q.since[name] = now
			first = now
		}
		if now.Sub(first) >= q.period {
			due = append(due, name)
		}
	}
	slices.Sort(due)
	return due
}
