package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/node/cgroups"
	"github.com/kplane/kplane/node/localpath"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// LeaseNamespace holds the nodes' heartbeat Leases.
const LeaseNamespace = "kube-node-lease"

// Run connects to the API server named by o and runs the agent until ctx is cancelled.
func Run(ctx context.Context, o Options) error {
	c, err := client.FromKubeconfigAndMaster(o.Kubeconfig, o.Master, 50, 100)
	if err != nil {
		return err
	}
	a, err := New(c, o)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// Agent is a running node agent: it registers its Node, heartbeats it, and runs the pods bound
// to it as local processes.
type Agent struct {
	c    *client.Client
	o    Options
	name string
	ips  *ipam
	// events records the pods' events (Started, BackOff, ...) as the "kubelet" component.
	events *events.Recorder
	// port is the HTTP port bound (Options.Port may be 0), reported in the Node's status.
	port atomic.Int32
	// clock is the time the pods' lifecycles run on (Options.Clock, or the real one).
	clock clock.WithTicker
	// cgroups holds the containers' cgroups (cgroup.go); set by Run.
	cgroups *cgroups.Manager
	// services are the cluster's Services, for containers' environment variables; set by Run.
	services *cache.Informer[*corev1.Service]

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	wg      sync.WaitGroup // every pod worker
}

// New checks o and prepares an agent for c; Run starts it.
func New(c *client.Client, o Options) (*Agent, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	name := o.HostnameOverride
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node name: %w", err)
		}
		name = h
	}
	name = strings.ToLower(strings.TrimSpace(name))
	ips, err := newIPAM(o.PodCIDR)
	if err != nil {
		return nil, err
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Agent{c: c, o: o, name: name, ips: ips, events: events.NewRecorder(c).For("kubelet"), clock: clk,
		workers: map[types.UID]*podWorker{}}, nil
}

// Name is the Node's name.
func (a *Agent) Name() string { return a.name }

// Run registers the Node (retrying until it succeeds), then heartbeats it and runs its pods
// until ctx is cancelled. It returns once every container process has been stopped and every
// goroutine it started has ended; the error is nil unless its HTTP port (Options.Address,
// Options.Port) cannot be bound or ctx ended before registration.
func (a *Agent) Run(ctx context.Context) error {
	slog.Info("starting node agent", "node", a.name, "podCIDR", a.o.PodCIDR, "dataDir", a.o.DataDir)
	defer slog.Info("node agent stopped", "node", a.name)
	if err := a.prepareDirs(); err != nil {
		return err
	}
	a.startCgroups()
	defer a.cgroups.Close()
	// Listening comes first: the Node registered next carries the port actually bound.
	ln, err := a.listen()
	if err != nil {
		return err
	}
	var loops sync.WaitGroup
	defer loops.Wait()
	loops.Go(func() { a.serve(ctx, ln) })
	for {
		err := a.register(ctx)
		if err == nil {
			break
		}
		slog.Error("registering node", "node", a.name, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not registered: %w", a.name, err)
		case <-time.After(time.Second):
		}
	}

	a.reportCgroups(ctx)
	loops.Go(func() { every(ctx, a.o.RenewInterval, a.renewLease) })
	loops.Go(func() { a.events.Run(ctx) })
	loops.Go(func() { every(ctx, a.o.StatusInterval, a.postStatus) })
	// The node provisions the claims of the local-path class whose pods come to it.
	loops.Go(func() {
		if err := localpath.New(a.c, a.name, a.localPathDir()).Run(ctx); err != nil && ctx.Err() == nil {
			slog.Error("local-path provisioner", "node", a.name, "err", err)
		}
	})

	f := cache.NewFactory(a.c, "")
	pods := cache.For[*corev1.Pod](f, "pods", cache.WithSelectors[*corev1.Pod]("", "spec.nodeName="+a.name))
	// Every container's environment has the variables of its namespace's Services (env.go).
	a.services = cache.For[*corev1.Service](f, "services")
	reg := pods.AddHandler(cache.Handler[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod, _ bool) { a.podChanged(ctx, p) },
		OnUpdate: func(_, p *corev1.Pod) { a.podChanged(ctx, p) },
		OnDelete: func(p *corev1.Pod, _ bool) { a.podGone(p) },
	}, 0)
	f.Start(ctx)
	<-ctx.Done()
	reg.Remove()
	f.Shutdown()
	a.wg.Wait()
	// Every container has stopped: nothing uses the tmpfs mounts any more, and a stopped
	// agent leaves none behind (its next start writes its pods' volumes again).
	a.unmountAll()
	return nil
}

// localPathDir holds the volumes the local-path provisioner makes: <data-dir>/local-path,
// absolute, since the volumes' hostPath records it.
func (a *Agent) localPathDir() string {
	dir, err := filepath.Abs(filepath.Join(a.o.DataDir, "local-path"))
	if err != nil {
		return filepath.Join(a.o.DataDir, "local-path")
	}
	return dir
}

// every calls f at once and then every period until ctx is cancelled.
func every(ctx context.Context, period time.Duration, f func(context.Context) error) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if err := f(ctx); err != nil && ctx.Err() == nil {
			slog.Error("node heartbeat", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// register creates the Node, or brings an existing one's labels, addresses and status up to date.
func (a *Agent) register(ctx context.Context) error {
	nodes := client.Resource[*corev1.Node](a.c, "nodes")
	want := a.nodeObject()
	n, err := nodes.Create(ctx, want)
	if client.IsAlreadyExists(err) {
		n, err = nodes.Get(ctx, a.name)
		if err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range want.Labels {
			n.Labels[k] = v
		}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = want.Spec.PodCIDR, want.Spec.PodCIDRs
		if n, err = nodes.Update(ctx, n); err != nil {
			return err
		}
		a.fillStatus(n)
		_, err = nodes.UpdateStatus(ctx, n)
		return err
	}
	if err != nil {
		return err
	}
	slog.Info("node registered", "node", n.Name)
	return nil
}

func (a *Agent) nodeObject() *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: a.name, Labels: map[string]string{
			corev1.LabelHostname: a.name, corev1.LabelOSStable: runtime.GOOS, corev1.LabelArchStable: runtime.GOARCH,
		}},
		Spec: corev1.NodeSpec{PodCIDR: a.o.PodCIDR, PodCIDRs: []string{a.o.PodCIDR}},
	}
	a.fillStatus(n)
	return n
}

// fillStatus sets the status the agent reports: addresses, capacity, node info and a fresh
// Ready heartbeat (the transition time kept while Ready stays True).
func (a *Agent) fillStatus(n *corev1.Node) {
	n.Status.Capacity, n.Status.Allocatable = machineResources(a.o.DataDir)
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: a.name}}
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	n.Status.NodeInfo.KubeletVersion = "kplane"
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = a.port.Load()
	n.Status.Phase = corev1.NodeRunning
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kplane node agent is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
	for i, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				ready.LastTransitionTime = c.LastTransitionTime
			}
			n.Status.Conditions[i] = ready
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, ready)
}

// allocatable is what pods may use of the machine (machineResources): the downward API's
// value of a limit a container does not set, as the kubelet gives it.
func (a *Agent) allocatable() corev1.ResourceList {
	_, allocatable := machineResources(a.o.DataDir)
	return allocatable
}

// postStatus refreshes the Node's status (the Ready heartbeat), retrying once on a conflict.
func (a *Agent) postStatus(ctx context.Context) error {
	nodes := client.Resource[*corev1.Node](a.c, "nodes")
	var err error
	for range 2 {
		var n *corev1.Node
		if n, err = nodes.Get(ctx, a.name); err != nil {
			if client.IsNotFound(err) { // deleted under us: register again
				return a.register(ctx)
			}
			return err
		}
		a.fillStatus(n)
		if _, err = nodes.UpdateStatus(ctx, n); !client.IsConflict(err) {
			return err
		}
	}
	return err
}

// renewLease creates or renews the node's Lease in kube-node-lease (creating the namespace
// if it is missing).
func (a *Agent) renewLease(ctx context.Context) error {
	leases := client.Resource[*coordinationv1.Lease](a.c, "leases").Namespace(LeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(a.o.LeaseDuration / time.Second)
	l, err := leases.Get(ctx, a.name)
	if client.IsNotFound(err) {
		_, err = client.Resource[*corev1.Namespace](a.c, "namespaces").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}})
		if err != nil && !client.IsAlreadyExists(err) {
			return err
		}
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: LeaseNamespace}}
		if n, err := client.Resource[*corev1.Node](a.c, "nodes").Get(ctx, a.name); err == nil {
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
		}
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &a.name, LeaseDurationSeconds: &secs, RenewTime: &now}
		_, err = leases.Create(ctx, l)
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &a.name, &secs, &now
	_, err = leases.Update(ctx, l)
	return err
}

// podChanged hands the pod's latest state to its worker, starting one for a pod not seen yet.
// Pods already finished are not run again; a finished or never-run pod being deleted is
// deleted at once.
func (a *Agent) podChanged(ctx context.Context, p *corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w, ok := a.workers[p.UID]; ok {
		w.update(p)
		return
	}
	if ctx.Err() != nil {
		return
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
		if p.DeletionTimestamp != nil {
			a.wg.Go(func() { a.deletePod(ctx, p) })
		}
		return
	}
	w := newPodWorker(a, p)
	a.workers[p.UID] = w
	a.wg.Go(func() {
		w.run(ctx)
		if err := a.cgroups.RemovePod(p.UID); err != nil {
			slog.Error("removing pod cgroup", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
		a.mu.Lock()
		delete(a.workers, p.UID)
		a.mu.Unlock()
		a.ips.release(p.UID)
	})
}

// podGone stops the worker of a pod deleted from the API without waiting for us.
func (a *Agent) podGone(p *corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w, ok := a.workers[p.UID]; ok {
		w.remove()
	}
}

// deletePod removes the pod's directory once its processes are stopped, then the pod object
// (grace period 0, only if it is still the same pod): as the kubelet reclaims a pod's
// resources before its final delete, so whoever sees the object gone sees its files gone.
func (a *Agent) deletePod(ctx context.Context, p *corev1.Pod) {
	uid := p.UID
	if err := a.removePodDirs(uid); err != nil {
		slog.Error("removing pod directory", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
	err := client.Resource[*corev1.Pod](a.c, "pods").Namespace(p.Namespace).Delete(ctx, p.Name,
		metav1.DeleteOptions{GracePeriodSeconds: new(int64(0)), Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !client.IsNotFound(err) && !client.IsConflict(err) && ctx.Err() == nil {
		slog.Error("deleting pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}
