// Package scheduler binds pods that name no node to a ready, schedulable node that their
// nodeSelector, required node affinity, tolerations and volumes allow and whose allocatable
// resources, less the requests of the pods already there, hold the pod's requests (fit.go,
// kube-scheduler's NodeResourcesFit), spreading them by the number of pods each node runs.
// Pods that fit nowhere get the PodScheduled=False condition (reason Unschedulable) and a
// FailedScheduling Warning event, and are tried again when nodes, volumes or the room on
// nodes change and, with growing delays, on their own. A pod that names its node already is
// not this scheduler's, even if that node does not exist: it stays Pending until the pod
// garbage collector removes it.
//
// Volumes (volumes.go) follow Kubernetes' VolumeBinding plugin: a pod waits while a claim it
// uses is missing or not yet bound by the binder (Immediate classes); a bound claim's volume
// keeps the pod to the nodes it reaches; for an unbound claim of a WaitForFirstConsumer class
// the scheduler picks the node, then binds the claim to an Available volume reachable from it
// or asks for one to be provisioned there (volume.kubernetes.io/selected-node), and binds the
// pod only once every claim is bound.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/internal/pv"
	"github.com/kplane/kplane/reconcile"
	"github.com/kplane/kplane/workqueue"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// DefaultSchedulerName is the spec.schedulerName this scheduler serves (an empty one too).
const DefaultSchedulerName = corev1.DefaultSchedulerName

// Name names the scheduler's work queue, metrics and logs.
const Name = "scheduler"

// Retry pacing of an unschedulable pod when nothing changes: 1 s doubling up to 60 s.
const (
	unschedulableBase = time.Second
	unschedulableMax  = 60 * time.Second
	// volumeWait is how often a pod whose claims are being bound or provisioned is looked at
	// again, besides when its claims change.
	volumeWait = 5 * time.Second
)

// Scheduler binds the unscheduled pods of its informers. The work queue holds pod keys
// ("ns/name"); events only queue keys and sync does the work.
type Scheduler struct {
	client   *client.Client
	pods     *cache.Informer[*corev1.Pod]
	nodes    *cache.Informer[*corev1.Node]
	claims   *cache.Informer[*corev1.PersistentVolumeClaim]
	volumes  *cache.Informer[*corev1.PersistentVolume]
	classes  *cache.Informer[*storagev1.StorageClass]
	handlers []cache.Registration
	queue    *workqueue.RateLimitingQueue[string]
	// events records FailedScheduling, as kube-scheduler's "default-scheduler".
	events *events.Recorder

	// mu serialises choosing a node with recording the choice, so that concurrent workers
	// (and bindings the pod cache has not seen yet) spread instead of piling up.
	mu sync.Mutex
	// assumed holds the node each pod was bound to until the pod cache shows the binding.
	assumed map[string]string
	// waiting holds the unschedulable pods and how often each failed in a row.
	waiting map[string]int
	// binding holds the pods placed on a node (the value) whose claims are being bound there.
	binding map[string]string
	// binds are the Binding writes in flight: a pod's binding goes on while the next pod is
	// placed (kube-scheduler's binding cycle), so placing is not paced by the API's writes.
	binds sync.WaitGroup
}

// New builds a scheduler on the pods and nodes informers of f and registers its event
// handlers; the caller starts f, then calls Run.
func New(c *client.Client, f *cache.Factory) *Scheduler {
	s := &Scheduler{
		client:  c,
		pods:    cache.For[*corev1.Pod](f, "pods"),
		nodes:   cache.For[*corev1.Node](f, "nodes"),
		claims:  cache.For[*corev1.PersistentVolumeClaim](f, "persistentvolumeclaims"),
		volumes: cache.For[*corev1.PersistentVolume](f, "persistentvolumes"),
		classes: cache.For[*storagev1.StorageClass](f, "storageclasses"),
		queue:   workqueue.NewRateLimited[string](workqueue.DefaultControllerRateLimiter[string](), workqueue.WithName(Name)),
		events:  events.NewRecorder(c).For(corev1.DefaultSchedulerName),
		assumed: map[string]string{},
		waiting: map[string]int{},
		binding: map[string]string{},
	}
	s.handlers = []cache.Registration{
		s.pods.AddHandler(cache.Handler[*corev1.Pod]{
			OnAdd:    func(p *corev1.Pod, _ bool) { s.onPod(p, false) },
			OnUpdate: func(_, p *corev1.Pod) { s.onPod(p, false) },
			OnDelete: func(p *corev1.Pod, _ bool) { s.onPod(p, true) },
		}, 0),
		s.nodes.AddHandler(cache.Handler[*corev1.Node]{
			OnAdd:    func(*corev1.Node, bool) { s.retryWaiting() },
			OnUpdate: s.onNodeUpdate,
		}, 0),
		// A claim bound or created, a volume made Available, a class added: waiting pods may go on.
		s.claims.AddHandler(cache.Handler[*corev1.PersistentVolumeClaim]{
			OnAdd:    func(*corev1.PersistentVolumeClaim, bool) { s.retryWaiting() },
			OnUpdate: func(_, _ *corev1.PersistentVolumeClaim) { s.retryWaiting() },
		}, 0),
		s.volumes.AddHandler(cache.Handler[*corev1.PersistentVolume]{
			OnAdd:    func(*corev1.PersistentVolume, bool) { s.retryWaiting() },
			OnUpdate: func(_, _ *corev1.PersistentVolume) { s.retryWaiting() },
		}, 0),
		s.classes.AddHandler(cache.Handler[*storagev1.StorageClass]{
			OnAdd: func(*storagev1.StorageClass, bool) { s.retryWaiting() },
		}, 0),
	}
	return s
}

// responsible reports whether pod is one this scheduler should place.
func responsible(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		(pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == DefaultSchedulerName) &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

func (s *Scheduler) onPod(pod *corev1.Pod, deleted bool) {
	key := cache.MetaNamespaceKey(pod)
	if deleted || !responsible(pod) {
		s.mu.Lock()
		if deleted || pod.Spec.NodeName != "" {
			delete(s.assumed, key)
		}
		delete(s.waiting, key)
		delete(s.binding, key)
		s.mu.Unlock()
		if pod.Spec.NodeName != "" && (deleted || terminal(pod)) {
			s.retryWaiting() // its requests are free again
		}
		return
	}
	s.queue.Add(key)
}

// onNodeUpdate retries the waiting pods when a change may let one fit; status heartbeats
// that change nothing of that kind are ignored.
func (s *Scheduler) onNodeUpdate(old, cur *corev1.Node) {
	if NodeReady(old) != NodeReady(cur) || old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		!labels.Equals(old.Labels, cur.Labels) || !taintsEqual(old.Spec.Taints, cur.Spec.Taints) ||
		!equality.Semantic.DeepEqual(old.Status.Allocatable, cur.Status.Allocatable) {
		s.retryWaiting()
	}
}

func taintsEqual(a, b []corev1.Taint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value || a[i].Effect != b[i].Effect {
			return false
		}
	}
	return true
}

func (s *Scheduler) retryWaiting() {
	s.mu.Lock()
	keys := make([]string, 0, len(s.waiting)+len(s.binding))
	for k := range s.waiting {
		keys = append(keys, k)
	}
	for k := range s.binding {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	for _, k := range keys {
		s.queue.Add(k)
	}
}

// Run waits for the caches and schedules with workers goroutines until ctx is cancelled. It
// returns once every goroutine it started has ended.
func (s *Scheduler) Run(ctx context.Context, workers int) {
	var recorder sync.WaitGroup
	defer recorder.Wait()
	recorder.Go(func() { s.events.Run(ctx) })
	defer s.binds.Wait()
	reconcile.Workers{Name: Name, Queue: s.queue, Count: workers, Sync: reconcile.Ignore(s.sync),
		Synced:   []func() bool{s.pods.HasSynced, s.nodes.HasSynced, s.claims.HasSynced, s.volumes.HasSynced, s.classes.HasSynced},
		Handlers: s.handlers}.Run(ctx)
}

// sync places one pod: it binds it to the best node, or records why it fits nowhere and
// retries it later.
func (s *Scheduler) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return nil
	}
	pod, err := s.pods.Lister().Namespace(ns).Get(name)
	if err != nil || !responsible(pod) {
		return nil // deleted or placed: its events say so
	}
	s.mu.Lock()
	if _, done := s.assumed[key]; done {
		s.mu.Unlock()
		return nil // bound already; the cache has not caught up
	}
	nodes := s.nodes.Lister().List(labels.Everything())
	claims, why := claimsOf(pod, s.lookup())
	if why != "" && len(nodes) > 0 {
		s.mu.Unlock()
		return s.unschedulable(ctx, key, pod, fmt.Sprintf("0/%d nodes are available: %s.", len(nodes), why))
	}
	fit, misfits := Filter(pod, nodes)
	usage := s.usage(key)
	fit = fitResources(pod, fit, usage, misfits) // fit.go: room for the pod's requests
	fit, plans := s.filterVolumes(claims, fit, nodes, misfits)
	var chosen *corev1.Node
	if len(fit) > 0 {
		chosen = Choose(fit, func(n string) int {
			if u := usage[n]; u != nil {
				return u.Pods
			}
			return 0
		})
		delete(s.waiting, key)
		if plan := plans[chosen.Name]; len(plan.bind)+len(plan.provision) > 0 {
			// The claims come first; the pod is bound once they are (a later sync).
			s.binding[key] = chosen.Name
			s.mu.Unlock()
			return s.bindVolumes(ctx, key, chosen.Name, plan)
		}
		s.assumed[key] = chosen.Name
		delete(s.binding, key)
	}
	s.mu.Unlock()

	if chosen == nil {
		return s.unschedulable(ctx, key, pod, UnschedulableMessage(len(nodes), misfits))
	}
	s.binds.Go(func() { s.bind(ctx, key, pod, chosen.Name) })
	return nil
}

// bind writes pod's Binding to node; on a failure the pod is placed again later.
func (s *Scheduler) bind(ctx context.Context, key string, pod *corev1.Pod, node string) {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	err := client.Resource[*corev1.Pod](s.client, "pods").Namespace(pod.Namespace).CreateSubresource(ctx, pod.Name, "binding", binding, nil)
	if err == nil {
		slog.Debug("bound pod", "pod", key, "node", node)
		return
	}
	s.mu.Lock()
	delete(s.assumed, key)
	s.mu.Unlock()
	switch {
	case client.IsNotFound(err): // deleted meanwhile
	case client.IsConflict(err):
		// Bound by someone else, being deleted, or recreated under the same name: the pod's
		// next event decides.
		slog.Debug("binding conflict", "pod", key, "err", err)
	case ctx.Err() == nil:
		slog.Error("binding pod", "pod", key, "node", node, "err", err)
		s.queue.AddRateLimited(key)
	}
}

// unschedulable writes the PodScheduled=False condition when it differs from the pod's, and
// queues the pod again after its backoff.
func (s *Scheduler) unschedulable(ctx context.Context, key string, pod *corev1.Pod, msg string) error {
	s.mu.Lock()
	failures := s.waiting[key]
	s.waiting[key] = failures + 1
	s.mu.Unlock()
	delay := unschedulableBase << min(failures, 16)
	s.queue.AddAfter(key, min(delay, unschedulableMax))
	// On every attempt, as kube-scheduler does; the recorder counts repeats in one Event.
	s.events.Eventf(pod, corev1.EventTypeWarning, "FailedScheduling", "%s", msg)

	if cond := podScheduledCondition(pod); cond != nil && cond.Status == corev1.ConditionFalse &&
		cond.Reason == corev1.PodReasonUnschedulable && cond.Message == msg {
		return nil
	}
	slog.Debug("pod is unschedulable", "pod", key, "why", msg)
	updated := pod.DeepCopy()
	setUnschedulable(updated, msg, metav1.Now())
	_, err := client.Resource[*corev1.Pod](s.client, "pods").Namespace(pod.Namespace).UpdateStatus(ctx, updated)
	if client.IsNotFound(err) || client.IsConflict(err) {
		return nil // the pod changed; its event queues it again
	}
	if err != nil {
		return errors.Join(fmt.Errorf("recording that pod %s is unschedulable", key), err)
	}
	return nil
}

func podScheduledCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// setUnschedulable sets pod's PodScheduled condition to False with reason Unschedulable and
// msg; the transition time changes only when the status does.
func setUnschedulable(pod *corev1.Pod, msg string, now metav1.Time) {
	cond := podScheduledCondition(pod)
	if cond == nil {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled})
		cond = &pod.Status.Conditions[len(pod.Status.Conditions)-1]
	}
	if cond.Status != corev1.ConditionFalse {
		cond.LastTransitionTime = now
	}
	cond.Status = corev1.ConditionFalse
	cond.Reason = corev1.PodReasonUnschedulable
	cond.Message = msg
	cond.LastProbeTime = now
}

// filterVolumes keeps the nodes of fit where the pod's claims can be served, counting the
// others' reasons into misfits, and returns what each kept node needs for the claims.
func (s *Scheduler) filterVolumes(claims podClaims, fit, all []*corev1.Node, misfits map[string]int) ([]*corev1.Node, map[string]volumePlan) {
	if len(claims.bound)+len(claims.delayed) == 0 {
		return fit, nil
	}
	names := map[string]bool{}
	for _, n := range all {
		names[n.Name] = true
	}
	exists := func(name string) bool { return names[name] }
	var kept []*corev1.Node
	plans := map[string]volumePlan{}
	for _, n := range fit {
		reasons, plan := volumesFit(claims, n, s.lookup(), exists)
		for _, r := range reasons {
			misfits[r]++
		}
		if len(reasons) == 0 {
			kept = append(kept, n)
			plans[n.Name] = plan
		}
	}
	return kept, plans
}

// bindVolumes writes what placing the pod of key on node takes for its claims: each volume
// chosen gets its claimRef (the binder binds the claim to it), each claim to provision gets
// the node. The pod is looked at again when its claims change, or after volumeWait.
func (s *Scheduler) bindVolumes(ctx context.Context, key, node string, plan volumePlan) error {
	defer s.queue.AddAfter(key, volumeWait)
	for _, b := range plan.bind {
		v, c := b.volume, b.claim
		if pv.IsBoundToClaim(v, c) && v.Spec.ClaimRef.UID == c.UID {
			continue // done on an earlier attempt
		}
		next := v.DeepCopy()
		next.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: c.Namespace,
			Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion}
		if !pv.IsBoundToClaim(v, c) {
			metav1.SetMetaDataAnnotation(&next.ObjectMeta, pv.AnnBoundByController, "yes")
		}
		if _, err := client.Resource[*corev1.PersistentVolume](s.client, "persistentvolumes").Update(ctx, next); err != nil {
			return s.volumeBindFailed(key, fmt.Errorf("binding volume %s to claim %s/%s: %w", v.Name, c.Namespace, c.Name, err))
		}
		slog.Debug("bound volume for pod", "pod", key, "volume", v.Name, "claim", c.Namespace+"/"+c.Name, "node", node)
	}
	for _, c := range plan.provision {
		if c.Annotations[pv.AnnSelectedNode] == node {
			continue
		}
		next := c.DeepCopy()
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, pv.AnnSelectedNode, node)
		if _, err := client.Resource[*corev1.PersistentVolumeClaim](s.client, "persistentvolumeclaims").Namespace(c.Namespace).Update(ctx, next); err != nil {
			return s.volumeBindFailed(key, fmt.Errorf("selecting node %s for claim %s/%s: %w", node, c.Namespace, c.Name, err))
		}
		slog.Debug("selected node for claim", "pod", key, "claim", c.Namespace+"/"+c.Name, "node", node)
	}
	return nil
}

// volumeBindFailed forgets the node chosen for the pod of key, so that the next attempt starts
// afresh; a conflict (someone changed the volume or claim meanwhile) is no error.
func (s *Scheduler) volumeBindFailed(key string, err error) error {
	s.mu.Lock()
	delete(s.binding, key)
	s.mu.Unlock()
	if client.IsConflict(err) || client.IsNotFound(err) {
		slog.Debug("volume binding conflict", "pod", key, "err", err)
		return nil
	}
	return err
}

// informerLookup is volumeLookup over the scheduler's informers.
type informerLookup struct{ s *Scheduler }

func (s *Scheduler) lookup() informerLookup { return informerLookup{s} }

func (l informerLookup) Claim(ns, name string) *corev1.PersistentVolumeClaim {
	c, _ := l.s.claims.Indexer().Get(ns + "/" + name)
	return c
}

func (l informerLookup) Volume(name string) *corev1.PersistentVolume {
	v, _ := l.s.volumes.Indexer().Get(name)
	return v
}

func (l informerLookup) Volumes() []*corev1.PersistentVolume {
	return l.s.volumes.Lister().List(labels.Everything())
}

func (l informerLookup) Class(name string) *storagev1.StorageClass {
	if name == "" {
		return nil
	}
	c, _ := l.s.classes.Indexer().Get(name)
	return c
}
