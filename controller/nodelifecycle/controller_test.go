package nodelifecycle

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

// agent plays a node agent: it registers a Node and its Lease and, while alive, renews the
// Lease every 300 ms.
type agent struct {
	t     *testing.T
	name  string
	alive atomic.Bool
}

func startAgent(t *testing.T, ctx context.Context, name string) *agent {
	t.Helper()
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}); err != nil && !client.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	nodes := client.Resource[*corev1.Node](c, "nodes")
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	a := &agent{t: t, name: name}
	a.postStatus(ctx, corev1.ConditionTrue, n)
	now := metav1.NewMicroTime(time.Now())
	holder, secs := name, int32(40)
	if _, err := client.Resource[*coordinationv1.Lease](c, "leases").Namespace(LeaseNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now},
	}); err != nil {
		t.Fatal(err)
	}
	a.alive.Store(true)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if a.alive.Load() {
				a.renew(ctx)
			}
		}
	})
	return a
}

func (a *agent) renew(ctx context.Context) {
	leases := client.Resource[*coordinationv1.Lease](c, "leases").Namespace(LeaseNamespace)
	l, err := leases.Get(ctx, a.name)
	if err != nil {
		return
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	_, _ = leases.Update(ctx, l)
}

// postStatus writes the Ready condition with a fresh heartbeat (n: the node, nil to read it).
func (a *agent) postStatus(ctx context.Context, ready corev1.ConditionStatus, n *corev1.Node) {
	a.t.Helper()
	nodes := client.Resource[*corev1.Node](c, "nodes")
	for range 20 {
		var err error
		if n == nil {
			if n, err = nodes.Get(ctx, a.name); err != nil {
				a.t.Fatal(err)
			}
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}}
		if _, err = nodes.UpdateStatus(ctx, n); err == nil {
			return
		} else if !client.IsConflict(err) {
			a.t.Fatal(err)
		}
		n = nil
	}
	a.t.Fatal("could not post node status")
}

func makePod(t *testing.T, ctx context.Context, ns, name, node string, tols ...corev1.Toleration) {
	t.Helper()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	p, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: tols,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := pods.UpdateStatus(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// TestOptions: the three periods from their flags, each required positive.
func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Options
		errs int
	}{
		{"defaults", nil, Options{50 * time.Second, 5 * time.Second, 5 * time.Minute}, 0},
		{"set", []string{"--node-monitor-grace-period=40s", "--node-monitor-period=1s", "--pod-eviction-timeout=2m"},
			Options{40 * time.Second, time.Second, 2 * time.Minute}, 0},
		{"zero grace", []string{"--node-monitor-grace-period=0"}, Options{0, 5 * time.Second, 5 * time.Minute}, 1},
		{"zero period", []string{"--node-monitor-period=0s"}, Options{50 * time.Second, 0, 5 * time.Minute}, 1},
		{"negative timeout", []string{"--pod-eviction-timeout=-1m"}, Options{50 * time.Second, 5 * time.Second, -time.Minute}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if *o != tc.want {
				t.Errorf("options %+v, want %+v", *o, tc.want)
			}
			if errs := o.Validate(); len(errs) != tc.errs {
				t.Errorf("Validate: %v, want %d errors", errs, tc.errs)
			}
		})
	}
}

func startController(t *testing.T, ctx context.Context) *Controller {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	nlc, err := New(cctx, &Options{
		NodeMonitorGracePeriod: 2 * time.Second, NodeMonitorPeriod: 200 * time.Millisecond, PodEvictionTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	nlc.limiter.interval = 0 // several nodes in a row in one test
	ctx, cancel := context.WithCancel(ctx)
	cctx.Informers.Start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := nlc.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cctx.Informers.Shutdown()
	})
	return nlc
}

// eventually polls cond every 100 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func getNode(t *testing.T, ctx context.Context, name string) *corev1.Node {
	t.Helper()
	n, err := client.Resource[*corev1.Node](c, "nodes").Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == corev1.TaintEffectNoExecute && t.TimeAdded != nil {
			return true
		}
	}
	return false
}

// podState is "gone", "terminating", "ready", "not-ready".
func podState(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	p, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Get(ctx, name)
	switch {
	case client.IsNotFound(err):
		return "gone"
	case err != nil:
		t.Fatal(err)
	case p.DeletionTimestamp != nil:
		return "terminating"
	}
	if needsNotReady(p) {
		return "ready"
	}
	return "not-ready"
}

func TestNodeLoss(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := testserver.Namespace(t, c, "nlc-")
	node := ns // namespaces are unique, so the node name is too
	a := startAgent(t, ctx, node)
	forever := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	long := forever
	long.TolerationSeconds = secs(3600)
	makePod(t, ctx, ns, "plain", node)
	makePod(t, ctx, ns, "forever", node, forever)
	makePod(t, ctx, ns, "long", node, long)
	startController(t, ctx)

	// With the Lease renewed, the node stays Ready past the grace period.
	time.Sleep(3 * time.Second)
	if n := getNode(t, ctx, node); readyStatus(n) != corev1.ConditionTrue || len(n.Spec.Taints) != 0 {
		t.Fatalf("a heartbeating node changed: %+v, taints %v", n.Status.Conditions, n.Spec.Taints)
	}

	// The agent goes silent: Ready=Unknown, every watched condition too, and the taint.
	a.alive.Store(false)
	lost := time.Now()
	eventually(t, 10*time.Second, "node unreachable", func() bool {
		n := getNode(t, ctx, node)
		return readyStatus(n) == corev1.ConditionUnknown && hasTaint(n, corev1.TaintNodeUnreachable)
	})
	if d := time.Since(lost); d < 2*time.Second {
		t.Errorf("marked unreachable after %v, before the 2s grace period", d)
	}
	n := getNode(t, ctx, node)
	for _, ct := range watchedConditions {
		cd := condition(n.Status.Conditions, ct)
		if cd == nil || cd.Status != corev1.ConditionUnknown {
			t.Errorf("condition %s = %+v, want Unknown", ct, cd)
		}
	}
	if cd := condition(n.Status.Conditions, corev1.NodeReady); cd.Reason != reasonUnknown || cd.Message != messageUnknown {
		t.Errorf("Ready condition: %+v", cd)
	}
	for _, p := range []string{"forever", "long"} {
		eventually(t, 5*time.Second, p+" not ready", func() bool { return podState(t, ctx, ns, p) == "not-ready" })
	}

	// After the eviction timeout the untolerating pod goes; the tolerating ones stay.
	eventually(t, 10*time.Second, "plain evicted", func() bool {
		s := podState(t, ctx, ns, "plain")
		return s == "gone" || s == "terminating"
	})
	time.Sleep(time.Second)
	for _, p := range []string{"forever", "long"} {
		if s := podState(t, ctx, ns, p); s != "not-ready" {
			t.Errorf("pod %s: %s, want it kept (not ready)", p, s)
		}
	}

	// The agent comes back: the taint goes.
	a.alive.Store(true)
	a.postStatus(ctx, corev1.ConditionTrue, nil)
	eventually(t, 10*time.Second, "taint removed", func() bool {
		n := getNode(t, ctx, node)
		return readyStatus(n) == corev1.ConditionTrue && len(n.Spec.Taints) == 0
	})

	// An agent that reports Ready=False gets the not-ready taint, and loses it when Ready.
	a.postStatus(ctx, corev1.ConditionFalse, nil)
	eventually(t, 10*time.Second, "not-ready taint", func() bool {
		n := getNode(t, ctx, node)
		return hasTaint(n, corev1.TaintNodeNotReady) && !hasTaint(n, corev1.TaintNodeUnreachable)
	})
	a.postStatus(ctx, corev1.ConditionTrue, nil)
	eventually(t, 10*time.Second, "not-ready taint removed", func() bool {
		return len(getNode(t, ctx, node).Spec.Taints) == 0
	})
}
