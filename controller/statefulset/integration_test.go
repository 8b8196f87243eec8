package statefulset

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/controller/garbagecollector"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// These tests run the controller against the real apiserver with no scheduler or node agent:
// each test plays both, binding pods to a node and writing their status, and finishing the
// graceful deletion of the pods the controller deletes.

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

func start(t *testing.T) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(cctx, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	testserver.RunControllers(t, cctx, ctrl)
}

// setup makes a namespace and the node pods are bound to.
func setup(t *testing.T) string {
	t.Helper()
	ns := testserver.Namespace(t, c, strings.ToLower(t.Name())+"-")
	api := client.Resource[*corev1.Node](c, "nodes")
	name := ns + "-node"
	if _, err := api.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return ns
}

func newSet(ns, name string, replicas int32, change func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	l := map[string]string{"app": name}
	ss := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.StatefulSetSpec{
		Replicas:    &replicas,
		ServiceName: name,
		Selector:    &metav1.LabelSelector{MatchLabels: l},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "v1",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}},
		VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
	}}
	if change != nil {
		change(ss)
	}
	return ss
}

func create(t *testing.T, ss *appsv1.StatefulSet) {
	t.Helper()
	if _, err := client.Resource[*appsv1.StatefulSet](c, "statefulsets").Namespace(ss.Namespace).Create(context.Background(), ss); err != nil {
		t.Fatal(err)
	}
}

// allPods are the namespace's pods by name, terminating ones included.
func allPods(t *testing.T, ns string) map[string]*corev1.Pod {
	t.Helper()
	l, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for _, p := range l.Items {
		out[p.Name] = p
	}
	return out
}

// state renders pods as "web-0 web-1(terminating)", in name order.
func state(pods map[string]*corev1.Pod) string {
	var out []string
	for name, p := range pods {
		if p.DeletionTimestamp != nil {
			name += "(terminating)"
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, st := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last state: %s", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPods waits until the namespace's pods are exactly want (as state renders them).
func waitPods(t *testing.T, ns, want string) map[string]*corev1.Pod {
	t.Helper()
	var pods map[string]*corev1.Pod
	waitFor(t, "pods "+want, func() (bool, string) {
		pods = allPods(t, ns)
		return state(pods) == want, state(pods)
	})
	return pods
}

// stays checks for a while that the pods stay as want: the controller does not go ahead.
func stays(t *testing.T, ns, want string) {
	t.Helper()
	for range 10 {
		time.Sleep(30 * time.Millisecond)
		if got := state(allPods(t, ns)); got != want {
			t.Fatalf("pods %q, want them to stay %q", got, want)
		}
	}
}

// runPod plays the scheduler and the node: binds the pod and marks it running and ready.
func runPod(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	api := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	p, err := api.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName == "" {
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: ns + "-node"}}
		if err := api.CreateSubresource(ctx, name, "binding", b, &metav1.Status{}); err != nil {
			t.Fatal(err)
		}
		if p, err = api.Get(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if _, err := api.UpdateStatus(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// finish plays the node ending a terminating pod.
func finish(t *testing.T, ns, name string) {
	t.Helper()
	err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func getSet(t *testing.T, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	ss, err := client.Resource[*appsv1.StatefulSet](c, "statefulsets").Namespace(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

func update(t *testing.T, ns, name string, change func(*appsv1.StatefulSet)) {
	t.Helper()
	waitFor(t, "the update written", func() (bool, string) {
		ss := getSet(t, ns, name)
		change(ss)
		_, err := client.Resource[*appsv1.StatefulSet](c, "statefulsets").Namespace(ns).Update(context.Background(), ss)
		return err == nil, fmt.Sprint(err)
	})
}

// scale sets the replicas through the scale subresource: a read, then a write of the Scale
// with its resourceVersion (again on a conflict with the controller's status writes).
func scale(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	path := "/apis/apps/v1/namespaces/" + ns + "/statefulsets/" + name + "/scale"
	waitFor(t, "the scale written", func() (bool, string) {
		raw, err := c.Raw(ctx, "GET", path, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var sc autoscalingv1.Scale
		if err := json.Unmarshal(raw, &sc); err != nil {
			t.Fatal(err)
		}
		if sc.Status.Selector != "app="+name || sc.Kind != "Scale" {
			t.Errorf("scale %+v", sc)
		}
		sc.Spec.Replicas = replicas
		body, _ := json.Marshal(&sc)
		_, err = c.Raw(ctx, "PUT", path, nil, body)
		if err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
		return err == nil, fmt.Sprint(err)
	})
}

// claim returns the named claim, nil if there is none.
func claim(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	cl, err := client.Resource[*corev1.PersistentVolumeClaim](c, "persistentvolumeclaims").Namespace(ns).Get(context.Background(), name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestOrderedReady: pods made one at a time in ordinal order, each after the one before is
// running and ready, each with its identity and its claim made first; a failed pod replaced;
// a scale-down through the scale subresource deleting the highest ordinal first and the next
// only once it is gone; the claims kept (Retain) and mounted again on the way back up.
func TestOrderedReady(t *testing.T) {
	start(t)
	ns := setup(t)
	create(t, newSet(ns, "web", 3, nil))
	pods := waitPods(t, ns, "web-0")
	p := pods["web-0"]
	if p.Spec.Hostname != "web-0" || p.Spec.Subdomain != "web" || p.Labels[appsv1.StatefulSetPodNameLabel] != "web-0" ||
		p.Labels[appsv1.PodIndexLabel] != "0" || p.Labels[appsv1.StatefulSetRevisionLabel] == "" {
		t.Errorf("identity: hostname %q subdomain %q labels %v", p.Spec.Hostname, p.Spec.Subdomain, p.Labels)
	}
	if v := p.Spec.Volumes[0]; v.Name != "data" || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "data-web-0" {
		t.Errorf("volumes %+v", p.Spec.Volumes)
	}
	cl := claim(t, ns, "data-web-0")
	if cl == nil || cl.Labels["app"] != "web" || len(cl.OwnerReferences) != 0 || cl.CreationTimestamp.After(p.CreationTimestamp.Time) {
		t.Fatalf("claim data-web-0: %+v", cl)
	}
	stays(t, ns, "web-0")
	runPod(t, ns, "web-0")
	waitPods(t, ns, "web-0 web-1")
	stays(t, ns, "web-0 web-1")
	runPod(t, ns, "web-1")
	waitPods(t, ns, "web-0 web-1 web-2")
	runPod(t, ns, "web-2")
	waitFor(t, "status", func() (bool, string) {
		st := getSet(t, ns, "web").Status
		return st.Replicas == 3 && st.ReadyReplicas == 3 && st.AvailableReplicas == 3 && st.CurrentReplicas == 3 &&
			st.UpdatedReplicas == 3 && st.CurrentRevision != "" && st.CurrentRevision == st.UpdateRevision, fmt.Sprintf("%+v", st)
	})

	// A failed pod is deleted and made again.
	api := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	failed, _ := api.Get(context.Background(), "web-1")
	failed.Status.Phase = corev1.PodFailed
	if _, err := api.UpdateStatus(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web-1 replaced", func() (bool, string) {
		p, err := api.Get(context.Background(), "web-1")
		return err == nil && p.UID != failed.UID && p.DeletionTimestamp == nil, fmt.Sprint(err)
	})
	runPod(t, ns, "web-1")

	// Down to 1: web-2 first, web-1 only once web-2 is gone.
	scale(t, ns, "web", 1)
	waitPods(t, ns, "web-0 web-1 web-2(terminating)")
	stays(t, ns, "web-0 web-1 web-2(terminating)")
	finish(t, ns, "web-2")
	waitPods(t, ns, "web-0 web-1(terminating)")
	finish(t, ns, "web-1")
	waitPods(t, ns, "web-0")
	data1 := claim(t, ns, "data-web-1")
	for _, name := range []string{"data-web-1", "data-web-2"} {
		if cl := claim(t, ns, name); cl == nil || cl.DeletionTimestamp != nil {
			t.Errorf("claim %s not kept: %+v", name, cl)
		}
	}
	// Back up: web-1 mounts the claim it had.
	scale(t, ns, "web", 2)
	pods = waitPods(t, ns, "web-0 web-1")
	if got := pods["web-1"].Spec.Volumes[0].PersistentVolumeClaim.ClaimName; got != "data-web-1" || claim(t, ns, "data-web-1").UID != data1.UID {
		t.Errorf("web-1 mounts %s, a new claim or another", got)
	}
}

// TestRollingUpdate: a new template replaces pods from the highest ordinal down, one at a time,
// each once the one before is ready, and not below the partition; the history keeps a
// revision per template, and the current revision follows once every pod is updated. Going
// back to the first template renumbers its revision instead of making one.
func TestRollingUpdate(t *testing.T) {
	start(t)
	ns := setup(t)
	create(t, newSet(ns, "app", 3, func(ss *appsv1.StatefulSet) {
		ss.Spec.VolumeClaimTemplates = nil
		ss.Spec.Template.Spec.Containers[0].VolumeMounts = nil
	}))
	for i, want := range []string{"app-0", "app-0 app-1", "app-0 app-1 app-2"} {
		waitPods(t, ns, want)
		runPod(t, ns, fmt.Sprintf("app-%d", i))
	}
	first := getSet(t, ns, "app")
	waitFor(t, "ready", func() (bool, string) {
		first = getSet(t, ns, "app")
		return first.Status.ReadyReplicas == 3, fmt.Sprintf("%+v", first.Status)
	})
	oldRev := first.Status.CurrentRevision
	update(t, ns, "app", func(ss *appsv1.StatefulSet) {
		ss.Spec.Template.Spec.Containers[0].Image = "v2"
		ss.Spec.UpdateStrategy.RollingUpdate.Partition = new(int32(1))
	})
	image := func(name string) string { return allPods(t, ns)[name].Spec.Containers[0].Image }
	for _, name := range []string{"app-2", "app-1"} {
		waitFor(t, name+" deleted for the update", func() (bool, string) {
			p := allPods(t, ns)[name]
			return p != nil && p.DeletionTimestamp != nil, state(allPods(t, ns))
		})
		// One at a time: nothing else goes while it terminates.
		if st := state(allPods(t, ns)); strings.Count(st, "terminating") != 1 {
			t.Fatalf("pods %s", st)
		}
		finish(t, ns, name)
		waitFor(t, name+" made from the new template", func() (bool, string) {
			p := allPods(t, ns)[name]
			return p != nil && p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == "v2", state(allPods(t, ns))
		})
		stays(t, ns, "app-0 app-1 app-2")
		runPod(t, ns, name)
	}
	var st appsv1.StatefulSetStatus
	waitFor(t, "the partitioned rollout", func() (bool, string) {
		st = getSet(t, ns, "app").Status
		return st.UpdatedReplicas == 2 && st.CurrentReplicas == 1 && st.ReadyReplicas == 3, fmt.Sprintf("%+v", st)
	})
	if st.CurrentRevision != oldRev || st.UpdateRevision == oldRev || image("app-0") != "v1" {
		t.Fatalf("below the partition: %+v, app-0 image %s", st, image("app-0"))
	}
	stays(t, ns, "app-0 app-1 app-2")

	// Partition 0: app-0 goes too, and the update revision becomes the current one.
	update(t, ns, "app", func(ss *appsv1.StatefulSet) { ss.Spec.UpdateStrategy.RollingUpdate.Partition = new(int32(0)) })
	waitPods(t, ns, "app-0(terminating) app-1 app-2")
	finish(t, ns, "app-0")
	waitFor(t, "app-0 updated", func() (bool, string) {
		p := allPods(t, ns)["app-0"]
		return p != nil && p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == "v2", state(allPods(t, ns))
	})
	runPod(t, ns, "app-0")
	waitFor(t, "the rollout complete", func() (bool, string) {
		st = getSet(t, ns, "app").Status
		return st.CurrentRevision == st.UpdateRevision && st.CurrentReplicas == 3 && st.UpdatedReplicas == 3, fmt.Sprintf("%+v", st)
	})
	revisions := func() map[string]int64 {
		l, err := client.Resource[*appsv1.ControllerRevision](c, "controllerrevisions").Namespace(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=app"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, r := range l.Items {
			if r.Labels[hashLabel] == "" || !strings.HasPrefix(r.Name, "app-") {
				t.Errorf("revision %s labels %v", r.Name, r.Labels)
			}
			out[r.Name] = r.Revision
		}
		return out
	}
	if r := revisions(); len(r) != 2 || r[oldRev] != 1 || r[st.UpdateRevision] != 2 {
		t.Fatalf("revisions %v", r)
	}
	// Back to v1 (what kubectl rollout undo does): the first revision becomes number 3.
	update(t, ns, "app", func(ss *appsv1.StatefulSet) { ss.Spec.Template.Spec.Containers[0].Image = "v1" })
	waitFor(t, "the first revision renumbered", func() (bool, string) {
		r := revisions()
		return len(r) == 2 && r[oldRev] == 3 && getSet(t, ns, "app").Status.UpdateRevision == oldRev, fmt.Sprint(r)
	})
}

// TestParallelRetention: Parallel makes and deletes pods without waiting for any; with both
// retention policies Delete, a scaled-down pod's claims become the pod's (the garbage
// collector deletes them after it) and the others stay the set's (deleted with the set).
func TestParallelRetention(t *testing.T) {
	start(t)
	testserver.StartControllers(t, c, garbagecollector.Entry)
	ns := setup(t)
	create(t, newSet(ns, "db", 3, func(ss *appsv1.StatefulSet) {
		ss.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		ss.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
	}))
	waitPods(t, ns, "db-0 db-1 db-2")
	set := getSet(t, ns, "db")
	for i := range 3 {
		cl := claim(t, ns, fmt.Sprintf("data-db-%d", i))
		if cl == nil || len(cl.OwnerReferences) != 1 || cl.OwnerReferences[0].UID != set.UID {
			t.Fatalf("claim %d: %+v", i, cl)
		}
	}
	scale(t, ns, "db", 1)
	waitPods(t, ns, "db-0") // pods never bound go at once
	gone := func(name string) func() (bool, string) {
		return func() (bool, string) {
			cl := claim(t, ns, name)
			return cl == nil || cl.DeletionTimestamp != nil, fmt.Sprintf("%+v", cl)
		}
	}
	for _, name := range []string{"data-db-1", "data-db-2"} {
		waitFor(t, name+" deleted with its pod", gone(name))
	}
	if cl := claim(t, ns, "data-db-0"); cl == nil || cl.DeletionTimestamp != nil {
		t.Fatalf("data-db-0: %+v", cl)
	}
	if err := client.Resource[*appsv1.StatefulSet](c, "statefulsets").Namespace(ns).Delete(context.Background(), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "data-db-0 deleted with the set", gone("data-db-0"))
	waitPods(t, ns, "")
}

// TestMaxUnavailable: with maxUnavailable 2 a Parallel set replaces two pods at a time.
func TestMaxUnavailable(t *testing.T) {
	start(t)
	ns := setup(t)
	create(t, newSet(ns, "cache", 4, func(ss *appsv1.StatefulSet) {
		ss.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		ss.Spec.VolumeClaimTemplates, ss.Spec.Template.Spec.Containers[0].VolumeMounts = nil, nil
		ss.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: new(intstr.FromInt32(2))}
	}))
	waitPods(t, ns, "cache-0 cache-1 cache-2 cache-3")
	for i := range 4 {
		runPod(t, ns, fmt.Sprintf("cache-%d", i))
	}
	waitFor(t, "ready", func() (bool, string) {
		st := getSet(t, ns, "cache").Status
		return st.ReadyReplicas == 4, fmt.Sprintf("%+v", st)
	})
	update(t, ns, "cache", func(ss *appsv1.StatefulSet) { ss.Spec.Template.Spec.Containers[0].Image = "v2" })
	waitPods(t, ns, "cache-0 cache-1 cache-2(terminating) cache-3(terminating)")
	stays(t, ns, "cache-0 cache-1 cache-2(terminating) cache-3(terminating)")
}
