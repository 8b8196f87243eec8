package deployment

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/replicaset"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

// startControllers runs the deployment and ReplicaSet controllers on one context until the
// test ends.
func startControllers(t *testing.T) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Two workers each.
	do := DefaultOptions()
	do.ConcurrentDeploymentSyncs = 2
	rso := replicaset.DefaultOptions(replicaset.ReplicaSets)
	rso.ConcurrentSyncs = 2
	var ctrls []controller.Controller
	for _, b := range []struct {
		e controller.Entry
		o controller.Options
	}{{Entry, do}, {replicaset.ReplicaSetEntry, rso}} {
		ctrl, err := b.e.New(cctx, b.o)
		if err != nil {
			t.Fatal(err)
		}
		ctrls = append(ctrls, ctrl)
	}
	testserver.RunControllers(t, cctx, ctrls...)
}

// cluster stands in for the missing node agent: it marks every pod of the namespace Running
// and Ready, and remembers the most active pods and the largest sum of ReplicaSet sizes seen.
type cluster struct {
	mu               sync.Mutex
	active           map[string]bool
	mostPods, mostRS int32
	// mixed: pods of two templates were active at once.
	images map[string]string
	mixed  bool
	sizes  map[string]int32
}

func (k *cluster) pod(p *corev1.Pod, gone bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if gone || p.DeletionTimestamp != nil {
		delete(k.active, p.Name)
		delete(k.images, p.Name)
	} else {
		k.active[p.Name] = true
		k.images[p.Name] = p.Spec.Containers[0].Image
	}
	for _, img := range k.images {
		if img != p.Spec.Containers[0].Image {
			k.mixed = true
		}
	}
	k.mostPods = max(k.mostPods, int32(len(k.active)))
}

func (k *cluster) rs(rs *appsv1.ReplicaSet, gone bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if gone {
		delete(k.sizes, rs.Name)
	} else {
		k.sizes[rs.Name] = rsReplicas(rs)
	}
	var sum int32
	for _, n := range k.sizes {
		sum += n
	}
	k.mostRS = max(k.mostRS, sum)
}

func (k *cluster) most() (pods, rs int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mostPods, k.mostRS
}

func (k *cluster) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mostPods, k.mostRS = int32(len(k.active)), 0
	for _, n := range k.sizes {
		k.mostRS += n
	}
}

func startCluster(t *testing.T, ns string) *cluster {
	k := &cluster{active: map[string]bool{}, sizes: map[string]int32{}, images: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	factory := cache.NewFactory(c, ns)
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	ready := make(chan *corev1.Pod, 100)
	cache.For[*corev1.Pod](factory, "pods").AddHandler(cache.Handler[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod, _ bool) { k.pod(p, false); ready <- p },
		OnUpdate: func(_, p *corev1.Pod) { k.pod(p, false) },
		OnDelete: func(p *corev1.Pod, _ bool) { k.pod(p, true) },
	}, 0)
	cache.For[*appsv1.ReplicaSet](factory, "replicasets").AddHandler(cache.Handler[*appsv1.ReplicaSet]{
		OnAdd:    func(rs *appsv1.ReplicaSet, _ bool) { k.rs(rs, false) },
		OnUpdate: func(_, rs *appsv1.ReplicaSet) { k.rs(rs, false) },
		OnDelete: func(rs *appsv1.ReplicaSet, _ bool) { k.rs(rs, true) },
	}, 0)
	factory.Start(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case p := <-ready:
				// A moment of "starting" so that rollouts take visible steps.
				time.Sleep(30 * time.Millisecond)
				p = p.DeepCopy()
				now := metav1.Now()
				p.Status.Phase = corev1.PodRunning
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
				if _, err := pods.UpdateStatus(ctx, p); err != nil && ctx.Err() == nil && !client.IsNotFound(err) {
					t.Logf("marking %s ready: %v", p.Name, err)
				}
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait(); factory.Shutdown() })
	if !factory.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	return k
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last state: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rolledOut is what kubectl rollout status waits for.
func rolledOut(d *appsv1.Deployment) bool {
	st := d.Status
	return d.Generation <= st.ObservedGeneration && st.UpdatedReplicas == *d.Spec.Replicas &&
		st.Replicas == st.UpdatedReplicas && st.AvailableReplicas == st.UpdatedReplicas
}

func TestRollingUpdate(t *testing.T) {
	ctx := context.Background()
	ns := testserver.Namespace(t, c, "deploy-")
	k := startCluster(t, ns)
	startControllers(t)
	deps := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns)
	rsAPI := client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns)
	podAPI := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	sel := map[string]string{"app": "web"}
	d, err := deps.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas:             new(int32(3)),
			RevisionHistoryLimit: new(int32(1)),
			Selector:             &metav1.LabelSelector{MatchLabels: sel},
			Template:             *template("v1"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	// waitRollout waits until the deployment is rolled out on image and checks its status
	// and ReplicaSets: the current one at revision rev holds every pod.
	waitRollout := func(image string, rev string) *appsv1.ReplicaSet {
		t.Helper()
		eventually(t, "rollout of "+image, func() (bool, string) {
			d, err = deps.Get(ctx, "web")
			if err != nil {
				t.Fatal(err)
			}
			return rolledOut(d) && d.Spec.Template.Spec.Containers[0].Image == image, fmt.Sprintf("%+v", d.Status)
		})
		var cur *appsv1.ReplicaSet
		eventually(t, "old ReplicaSets scaled down", func() (bool, string) {
			list, err := rsAPI.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var state []string
			ok := true
			cur = nil
			for _, rs := range list.Items {
				state = append(state, fmt.Sprintf("%s rev=%s replicas=%d", rs.Name, rs.Annotations[RevisionAnnotation], rsReplicas(rs)))
				if rs.Spec.Template.Spec.Containers[0].Image == image {
					cur = rs
					ok = ok && rsReplicas(rs) == 3 && rs.Annotations[RevisionAnnotation] == rev
				} else {
					ok = ok && rsReplicas(rs) == 0
				}
				ok = ok && metav1.IsControlledBy(rs, d)
			}
			return ok && cur != nil, strings.Join(state, "; ")
		})
		if want := "web-" + TemplateHash(&d.Spec.Template, nil); cur.Name != want || cur.Labels[HashLabel] != strings.TrimPrefix(want, "web-") {
			t.Errorf("ReplicaSet %s labels %v, want name %s", cur.Name, cur.Labels, want)
		}
		if cur.Annotations[DesiredReplicasAnnotation] != "3" || cur.Annotations[MaxReplicasAnnotation] != "4" {
			t.Errorf("replica annotations %v", cur.Annotations)
		}
		st := d.Status
		if st.Replicas != 3 || st.UpdatedReplicas != 3 || st.ReadyReplicas != 3 || st.AvailableReplicas != 3 || st.UnavailableReplicas != 0 {
			t.Errorf("status counts %+v", st)
		}
		if a := getCondition(&st, appsv1.DeploymentAvailable); a == nil || a.Status != corev1.ConditionTrue || a.Reason != ReasonMinimumReplicasAvailable {
			t.Errorf("Available condition %+v", a)
		}
		eventually(t, "Progressing=NewReplicaSetAvailable", func() (bool, string) {
			d, _ = deps.Get(ctx, "web")
			p := getCondition(&d.Status, appsv1.DeploymentProgressing)
			return p != nil && p.Status == corev1.ConditionTrue && p.Reason == ReasonNewRSAvailable, fmt.Sprintf("%+v", p)
		})
		eventually(t, "pods of "+image, func() (bool, string) {
			list, err := podAPI.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var images []string
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil {
					images = append(images, p.Spec.Containers[0].Image)
				}
			}
			return len(images) == 3 && !slices.ContainsFunc(images, func(s string) bool { return s != image }), fmt.Sprint(images)
		})
		if pods, rs := k.most(); pods > 4 || rs > 4 {
			t.Errorf("at most %d pods and %d ReplicaSet replicas at once, want at most replicas+maxSurge = 4", pods, rs)
		}
		return cur
	}
	setImage := func(image string) {
		t.Helper()
		k.reset()
		d, err = deps.Get(ctx, "web")
		if err != nil {
			t.Fatal(err)
		}
		d.Spec.Template.Spec.Containers[0].Image = image
		if d, err = deps.Update(ctx, d); err != nil {
			t.Fatal(err)
		}
	}

	rs1 := waitRollout("v1", "1")
	setImage("v2")
	rs2 := waitRollout("v2", "2")
	if rs1.Name == rs2.Name {
		t.Fatalf("one ReplicaSet %s for two templates", rs1.Name)
	}
	// Back to v1: the old ReplicaSet returns with the next revision.
	setImage("v1")
	if back := waitRollout("v1", "3"); back.UID != rs1.UID {
		t.Errorf("rollback made a new ReplicaSet %s", back.Name)
	}
	// A third template: with a history of one, the revision-2 ReplicaSet goes.
	setImage("v3")
	waitRollout("v3", "4")
	eventually(t, "history pruned to one", func() (bool, string) {
		list, _ := rsAPI.List(ctx, metav1.ListOptions{})
		var left []string
		for _, rs := range list.Items {
			if rs.DeletionTimestamp == nil {
				left = append(left, rs.Name)
			}
		}
		return len(left) == 2 && !slices.Contains(left, rs2.Name), fmt.Sprint(left)
	})
}

// newDeployment creates a deployment of 3 replicas of image in ns.
func newDeployment(t *testing.T, ns, image string, mutate func(*appsv1.Deployment)) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: *template(image),
		},
	}
	if mutate != nil {
		mutate(d)
	}
	d, err := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns).Create(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitDone waits for kubectl rollout status's notion of done on image.
func waitDone(t *testing.T, ns, image string) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	eventually(t, "rollout of "+image, func() (bool, string) {
		var err error
		d, err = client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns).Get(context.Background(), "web")
		if err != nil {
			t.Fatal(err)
		}
		return rolledOut(d) && d.Spec.Template.Spec.Containers[0].Image == image, fmt.Sprintf("%+v", d.Status)
	})
	return d
}

func updateDeployment(t *testing.T, ns string, f func(*appsv1.Deployment)) {
	t.Helper()
	api := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns)
	d, err := api.Get(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	f(d)
	if _, err := api.Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

func TestRecreate(t *testing.T) {
	ns := testserver.Namespace(t, c, "recreate-")
	k := startCluster(t, ns)
	startControllers(t)
	newDeployment(t, ns, "v1", func(d *appsv1.Deployment) {
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	})
	waitDone(t, ns, "v1")
	updateDeployment(t, ns, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "v2" })
	waitDone(t, ns, "v2")
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mixed {
		t.Error("old and new pods ran at the same time under Recreate")
	}
}

func TestPaused(t *testing.T) {
	ctx := context.Background()
	ns := testserver.Namespace(t, c, "paused-")
	startCluster(t, ns)
	startControllers(t)
	newDeployment(t, ns, "v1", nil)
	waitDone(t, ns, "v1")
	updateDeployment(t, ns, func(d *appsv1.Deployment) {
		d.Spec.Paused = true
		d.Spec.Template.Spec.Containers[0].Image = "v2"
	})
	deps := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns)
	eventually(t, "Progressing=Unknown while paused", func() (bool, string) {
		d, err := deps.Get(ctx, "web")
		if err != nil {
			t.Fatal(err)
		}
		p := getCondition(&d.Status, appsv1.DeploymentProgressing)
		return d.Status.ObservedGeneration == d.Generation && p != nil && p.Reason == ReasonPaused, fmt.Sprintf("%+v", p)
	})
	list, err := client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d ReplicaSets while paused, want the first only", len(list.Items))
	}
	updateDeployment(t, ns, func(d *appsv1.Deployment) { d.Spec.Paused = false })
	waitDone(t, ns, "v2")
}
