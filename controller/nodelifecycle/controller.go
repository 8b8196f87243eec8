// Package nodelifecycle is the node lifecycle controller. Every monitor period it looks at
// every node:
//
//   - A node's heartbeat is its Lease (kube-node-lease/<node>) being renewed or its Ready
//     condition's lastHeartbeatTime moving on, timed by this controller's clock when it sees
//     the change. After a grace period with no heartbeat, the node's Ready, MemoryPressure,
//     DiskPressure and PIDPressure conditions are set to Unknown (NodeStatusUnknown) and its
//     pods' Ready conditions to False, so that endpoints drop them.
//   - A node whose Ready condition is Unknown gets the NoExecute taint
//     node.kubernetes.io/unreachable; one whose Ready is False (as its agent reports) gets
//     node.kubernetes.io/not-ready. Both go once Ready is True again. Adding one to a node
//     that had neither is rate-limited to one node every 10 s (--node-eviction-rate 0.1).
//   - Pods on a node with one of these taints are evicted (deleted gracefully) once the taint
//     is older than the pod eviction timeout, or, for pods tolerating it, older than their
//     tolerationSeconds; a pod tolerating it without tolerationSeconds stays (see evictionTime).
//
// TODO: not done yet, as Kubernetes does: zone disruption states (no evictions when every
// node of a zone is down, a slower secondary rate when most are), NodeStartupGracePeriod for
// nodes that never reported, the NoSchedule taints of not-ready and unreachable nodes,
// eviction for other NoExecute taints, --node-eviction-rate as a flag, metrics.
package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "nodelifecycle"

// LeaseNamespace holds the nodes' heartbeat Leases, one per node, named after it.
const LeaseNamespace = "kube-node-lease"

// evictionInterval is the wait between two nodes tainted for eviction (0.1 node/s).
const evictionInterval = 10 * time.Second

// Entry registers the controller with the manager. It has one loop, not workers.
var Entry = controller.Entry{
	Name:    "node-lifecycle-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return DefaultOptions() },
	New:     controller.Build(New),
}

// Options are the controller's settings.
type Options struct {
	// NodeMonitorGracePeriod: how long a node may go without a heartbeat (Lease renewal or
	// Ready condition update) before it is marked unreachable (--node-monitor-grace-period, 50s).
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod: how often every node is looked at (--node-monitor-period, 5s).
	NodeMonitorPeriod time.Duration
	// PodEvictionTimeout: how long pods that do not tolerate the unreachable or not-ready taint
	// stay on such a node before they are evicted (--pod-eviction-timeout, 5m, seed 000's).
	PodEvictionTimeout time.Duration
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options {
	return &Options{NodeMonitorGracePeriod: 50 * time.Second, NodeMonitorPeriod: 5 * time.Second, PodEvictionTimeout: 5 * time.Minute}
}

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.NodeMonitorGracePeriod, "node-monitor-grace-period", o.NodeMonitorGracePeriod, "how long a node may go without a heartbeat before it is marked unreachable")
	fs.DurationVar(&o.NodeMonitorPeriod, "node-monitor-period", o.NodeMonitorPeriod, "how often the node lifecycle controller looks at every node")
	fs.DurationVar(&o.PodEvictionTimeout, "pod-eviction-timeout", o.PodEvictionTimeout, "how long pods stay on an unreachable or not-ready node before they are evicted (unless they tolerate it)")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	if o.NodeMonitorGracePeriod <= 0 || o.NodeMonitorPeriod <= 0 || o.PodEvictionTimeout <= 0 {
		return []error{errors.New("--node-monitor-grace-period, --node-monitor-period and --pod-eviction-timeout must be positive")}
	}
	return nil
}

// Controller is the node lifecycle controller.
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	nodes    *cache.Informer[*corev1.Node]
	leases   *cache.Informer[*coordinationv1.Lease]
	pods     *cache.Informer[*corev1.Pod]
	period   time.Duration
	timeout  time.Duration
	now      func() time.Time
	loop     *controller.Loop

	// Used by the one monitoring goroutine only.
	monitor *monitor
	limiter *limiter
}

// New builds the controller on ctx's shared informers (nodes, leases, pods).
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("node lifecycle controller: the context needs a client and informers")
	}
	if err := errors.Join(o.Validate()...); err != nil {
		return nil, fmt.Errorf("node lifecycle controller: %w", err)
	}
	c := &Controller{
		client:  ctx.Client,
		nodes:   cache.For[*corev1.Node](ctx.Informers, "nodes"),
		leases:  cache.For[*coordinationv1.Lease](ctx.Informers, "leases"),
		pods:    cache.For[*corev1.Pod](ctx.Informers, "pods"),
		period:  o.NodeMonitorPeriod,
		timeout: o.PodEvictionTimeout,
		now:     time.Now,
		loop:    controller.NewLoop(ctx, Name),
		monitor: newMonitor(o.NodeMonitorGracePeriod),
		limiter: &limiter{interval: evictionInterval},
	}
	if ctx.Recorder != nil {
		c.recorder = ctx.Recorder.For("node-controller")
	}
	// One pass over the caches at a time: no handlers, no queue.
	c.loop.Reads(c.nodes.HasSynced, c.leases.HasSynced, c.pods.HasSynced)
	c.loop.Every(c.period, func(ctx context.Context) { c.pass(ctx, c.now()) })
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches, then monitors every period until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	slog.Info("starting node lifecycle controller", "grace", c.monitor.grace, "period", c.period, "evictionTimeout", c.timeout)
	defer slog.Info("node lifecycle controller stopped")
	c.loop.Run(ctx, nil)
	return nil
}

// pass looks at every node once.
func (c *Controller) pass(ctx context.Context, now time.Time) {
	byNode := map[string][]*corev1.Pod{}
	for _, p := range c.pods.Lister().List(labels.Everything()) {
		if p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	seen := map[string]bool{}
	for _, node := range c.nodes.Lister().List(labels.Everything()) {
		if ctx.Err() != nil {
			return
		}
		seen[node.Name] = true
		if err := c.syncNode(ctx, node, byNode[node.Name], now); err != nil && ctx.Err() == nil {
			// Conflicts come from a stale cache or the agent writing at the same moment; the
			// next pass tries again.
			slog.Warn("node lifecycle: could not update node", "node", node.Name, "err", err)
		}
	}
	c.monitor.forget(seen)
}

// syncNode updates one node's conditions and taints, then its pods.
func (c *Controller) syncNode(ctx context.Context, node *corev1.Node, pods []*corev1.Pod, now time.Time) error {
	var renew time.Time
	if l, err := c.leases.Lister().Namespace(LeaseNamespace).Get(node.Name); err == nil && l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	stale := c.monitor.observe(node.Name, readyHeartbeat(node), renew, now)
	if node.DeletionTimestamp != nil {
		return nil
	}
	nodes := client.Resource[*corev1.Node](c.client, "nodes")
	if stale {
		if conds, changed := unknownConditions(node.Status.Conditions, now); changed {
			cp := node.DeepCopy()
			cp.Status.Conditions = conds
			updated, err := nodes.UpdateStatus(ctx, cp)
			if err != nil {
				return fmt.Errorf("marking unknown: %w", err)
			}
			slog.Info("node lifecycle: node stopped posting status", "node", node.Name)
			c.event(node, corev1.EventTypeNormal, "NodeNotReady", "Node %s status is now: NodeNotReady", node.Name)
			node = updated
		}
	}
	ready := readyStatus(node)
	if taints, added, changed := wantTaints(node.Spec.Taints, ready, now); changed && (!added || c.limiter.ready(now)) {
		cp := node.DeepCopy()
		cp.Spec.Taints = taints
		updated, err := nodes.Update(ctx, cp)
		if err != nil {
			return fmt.Errorf("tainting: %w", err)
		}
		if added {
			c.limiter.took(now)
		}
		slog.Info("node lifecycle: node taints changed", "node", node.Name, "ready", ready)
		node = updated
	}
	if ready == corev1.ConditionUnknown {
		c.markNotReady(ctx, pods, now)
	}
	c.evict(ctx, node, pods, now)
	return nil
}

// markNotReady sets the Ready condition of pods to False.
func (c *Controller) markNotReady(ctx context.Context, pods []*corev1.Pod, now time.Time) {
	for _, p := range pods {
		if !needsNotReady(p) || ctx.Err() != nil {
			continue
		}
		_, err := client.Resource[*corev1.Pod](c.client, "pods").Namespace(p.Namespace).
			Patch(ctx, p.Name, types.StrategicMergePatchType, notReadyPatch(p.UID, now), metav1.PatchOptions{}, "status")
		if err != nil && !client.IsNotFound(err) && ctx.Err() == nil {
			slog.Warn("node lifecycle: could not mark pod not ready", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
}

// notReadyPatch is the strategic merge patch setting a pod's Ready condition to False; the uid
// guards against patching a namesake.
func notReadyPatch(uid types.UID, now time.Time) []byte {
	return fmt.Appendf(nil, `{"metadata":{"uid":%q},"status":{"conditions":[{"type":"Ready","status":"False","lastTransitionTime":%q}]}}`,
		uid, now.UTC().Format(time.RFC3339))
}

// evict deletes, gracefully, the pods whose eviction time on node has come.
func (c *Controller) evict(ctx context.Context, node *corev1.Node, pods []*corev1.Pod, now time.Time) {
	for _, p := range pods {
		if p.DeletionTimestamp != nil || ctx.Err() != nil {
			continue
		}
		at, ok := evictionTime(p, node.Spec.Taints, c.timeout)
		if !ok || now.Before(at) {
			continue
		}
		uid := p.UID
		err := client.Resource[*corev1.Pod](c.client, "pods").Namespace(p.Namespace).
			Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			slog.Info("node lifecycle: evicted pod", "pod", p.Namespace+"/"+p.Name, "node", node.Name)
			c.event(p, corev1.EventTypeNormal, "TaintManagerEviction", "Marking for deletion Pod %s/%s", p.Namespace, p.Name)
		case !client.IsNotFound(err) && !client.IsConflict(err) && ctx.Err() == nil:
			slog.Warn("node lifecycle: could not evict pod", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
}

func (c *Controller) event(obj metav1.Object, typ, reason, format string, args ...any) {
	if c.recorder != nil {
		c.recorder.Eventf(obj, typ, reason, format, args...)
	}
}
