package replicaset

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

// fixture builds and scales owners of one kind for the shared scenario.
type fixture[T cache.Object] struct {
	kind        Kind[T]
	newOwner    func(ns, name string, replicas int32, podLabels map[string]string) T
	setReplicas func(T, int32)
}

var rsFixture = fixture[*appsv1.ReplicaSet]{
	kind: ReplicaSets,
	newOwner: func(ns, name string, n int32, l map[string]string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.ReplicaSetSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: l},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: podSpec1()}},
		}
	},
	setReplicas: func(rs *appsv1.ReplicaSet, n int32) { rs.Spec.Replicas = &n },
}

var rcFixture = fixture[*corev1.ReplicationController]{
	kind: ReplicationControllers,
	newOwner: func(ns, name string, n int32, l map[string]string) *corev1.ReplicationController {
		return &corev1.ReplicationController{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ReplicationControllerSpec{Replicas: &n, Selector: l,
				Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: podSpec1()}},
		}
	},
	setReplicas: func(rc *corev1.ReplicationController, n int32) { rc.Spec.Replicas = &n },
}

func podSpec1() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}}
}

func TestReplicaSet(t *testing.T)            { runScenario(t, rsFixture) }
func TestReplicationController(t *testing.T) { runScenario(t, rcFixture) }

// podWatch follows the namespace's pods through its own informer and remembers the most
// active pods carrying the selector's labels that ever existed at once.
type podWatch struct {
	mu     sync.Mutex
	active map[string]bool
	most   int
}

func (w *podWatch) see(p *corev1.Pod, gone bool, sel labels.Selector) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gone || !podcontrol.IsActive(p) || !sel.Matches(labels.Set(p.Labels)) {
		delete(w.active, p.Name)
	} else {
		w.active[p.Name] = true
	}
	w.most = max(w.most, len(w.active))
}

func (w *podWatch) max() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most
}

func startController[T cache.Object](t *testing.T, k Kind[T]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions(k)
	o.ConcurrentSyncs = 2
	ctrl, err := New(cctx, k, o)
	if err != nil {
		t.Fatal(err)
	}
	cctx.Informers.Start(ctx)
	done := make(chan struct{}, 2)
	go func() { cctx.Recorder.Run(ctx); done <- struct{}{} }()
	go func() {
		if err := ctrl.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- struct{}{}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		cctx.Informers.Shutdown()
	})
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

func runScenario[T cache.Object](t *testing.T, f fixture[T]) {
	ctx := context.Background()
	ns := testserver.Namespace(t, c, f.kind.Name+"-")
	sel := map[string]string{"app": "web"}
	selector := labels.SelectorFromSet(sel)
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	owners := client.Resource[T](c, f.kind.Resource).Namespace(ns)

	// Our own view of the pods, to catch any moment with too many.
	watch := &podWatch{active: map[string]bool{}}
	wctx, wcancel := context.WithCancel(ctx)
	factory := cache.NewFactory(c, ns)
	inf := cache.For[*corev1.Pod](factory, "pods")
	inf.AddHandler(cache.Handler[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod, _ bool) { watch.see(p, false, selector) },
		OnUpdate: func(_, p *corev1.Pod) { watch.see(p, false, selector) },
		OnDelete: func(p *corev1.Pod, _ bool) { watch.see(p, true, selector) },
	}, 0)
	factory.Start(wctx)
	t.Cleanup(func() { wcancel(); factory.Shutdown() })
	if !factory.WaitForCacheSync(wctx) {
		t.Fatal("pod cache did not sync")
	}

	// An orphan that matches exists before its owner.
	orphan, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Labels: sel}, Spec: podSpec1()})
	if err != nil {
		t.Fatal(err)
	}
	startController(t, f.kind)
	owner, err := owners.Create(ctx, f.newOwner(ns, "web", 3, sel))
	if err != nil {
		t.Fatal(err)
	}

	// owned lists the active pods the owner controls.
	owned := func() []*corev1.Pod {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []*corev1.Pod
		for _, p := range list.Items {
			if podcontrol.IsActive(p) && metav1.IsControlledBy(p, owner) {
				out = append(out, p)
			}
		}
		return out
	}
	wantPods := func(n int) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d owned pods", n), func() (bool, string) {
			got := owned()
			return len(got) == n, fmt.Sprint(names(got))
		})
	}
	wantStatus := func(replicas, ready int32) {
		t.Helper()
		eventually(t, fmt.Sprintf("status replicas=%d ready=%d", replicas, ready), func() (bool, string) {
			o, err := owners.Get(ctx, "web")
			if err != nil {
				return false, err.Error()
			}
			st := f.kind.Status(o)
			return st.Replicas == replicas && st.ReadyReplicas == ready && st.ObservedGeneration == o.GetGeneration(), fmt.Sprintf("%+v", st)
		})
	}
	scale := func(n int32) {
		t.Helper()
		for {
			o, err := owners.Get(ctx, "web")
			if err != nil {
				t.Fatal(err)
			}
			f.setReplicas(o, n)
			if _, err = owners.Update(ctx, o); err == nil {
				return
			} else if !client.IsConflict(err) {
				t.Fatal(err)
			}
		}
	}
	setReady := func(p *corev1.Pod) {
		t.Helper()
		p = p.DeepCopy()
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
		if _, err := pods.UpdateStatus(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	// Three pods: the orphan adopted, two created from the template.
	wantPods(3)
	got := owned()
	if !slices.ContainsFunc(got, func(p *corev1.Pod) bool { return p.UID == orphan.UID }) {
		t.Errorf("orphan not adopted: %v", names(got))
	}
	for _, p := range got {
		ref := metav1.GetControllerOf(p)
		if p.UID != orphan.UID && (p.GenerateName != "web-" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion || p.Labels["app"] != "web") {
			t.Errorf("pod %s: generateName %q, ref %+v, labels %v", p.Name, p.GenerateName, ref, p.Labels)
		}
	}
	wantStatus(3, 0)

	// Two become ready.
	setReady(got[0])
	setReady(got[1])
	wantStatus(3, 2)
	readyNames := []string{got[0].Name, got[1].Name}

	scale(5)
	wantPods(5)
	wantStatus(5, 2)

	// Scaling down keeps a ready pod.
	scale(1)
	wantPods(1)
	if left := owned()[0].Name; !slices.Contains(readyNames, left) {
		t.Errorf("kept %s, want one of the ready pods %v", left, readyNames)
	}
	wantStatus(1, 1)

	// A deleted pod is replaced.
	victim := owned()[0]
	if err := pods.Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a replacement", func() (bool, string) {
		got := owned()
		return len(got) == 1 && got[0].UID != victim.UID, fmt.Sprint(names(got))
	})
	wantStatus(1, 0)

	// A pod whose labels stop matching is released and replaced.
	stray := owned()[0]
	eventually(t, "relabelled pod", func() (bool, string) {
		p, err := pods.Get(ctx, stray.Name)
		if err != nil {
			return false, err.Error()
		}
		p.Labels = map[string]string{"app": "other"}
		_, err = pods.Update(ctx, p)
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, "release and replacement", func() (bool, string) {
		p, err := pods.Get(ctx, stray.Name)
		if err != nil {
			return false, err.Error()
		}
		got := owned()
		return metav1.GetControllerOf(p) == nil && len(got) == 1 && got[0].UID != stray.UID, fmt.Sprint(names(got), p.OwnerReferences)
	})

	if m := watch.max(); m > 5 {
		t.Errorf("up to %d matching active pods existed at once; replicas never exceeded 5", m)
	}
}
