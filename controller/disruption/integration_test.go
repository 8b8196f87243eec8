package disruption

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// These tests run the controller against the real apiserver. No workload controller or node
// agent runs: each test makes the ReplicaSets and pods itself and plays the node, writing the
// pods' Ready condition.

var (
	c   *client.Client
	url string
)

func TestMain(m *testing.M) {
	testserver.Main(m, func(s *testserver.Server, cl *client.Client) { c, url = cl, s.URL })
}

// start runs a disruption controller until the test ends.
func start(t *testing.T) *Controller {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(cctx, controller.NoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl.staleAfter = time.Second
	testserver.RunControllers(t, cctx, ctrl)
	return ctrl
}

func pods() *client.Typed[*corev1.Pod] { return client.Resource[*corev1.Pod](c, "pods") }

func budgets() *client.Typed[*policyv1.PodDisruptionBudget] {
	return client.Resource[*policyv1.PodDisruptionBudget](c, "poddisruptionbudgets")
}

// replicaSet creates ReplicaSet name of replicas pods labelled app=web, owned by owner if set.
func replicaSet(t *testing.T, ns, name string, replicas int32, owner *appsv1.Deployment) *appsv1.ReplicaSet {
	t.Helper()
	labels := map[string]string{"app": "web"}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.ReplicaSetSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "web"}}}}}}
	if owner != nil {
		rs.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("Deployment"))}
	}
	out, err := client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns).Create(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pod creates pod name labelled app=web, controlled by owner if set, and reports it Running
// with the given readiness, as its node would.
func pod(t *testing.T, ns, name string, owner metav1.Object, kind string, ready bool) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "web"}}}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind(kind))}
	}
	created, err := pods().Namespace(ns).Create(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return setReady(t, created, ready)
}

// setReady plays the node: the pod is Running, Ready or not.
func setReady(t *testing.T, p *corev1.Pod, ready bool) *corev1.Pod {
	t.Helper()
	for {
		cur, err := pods().Namespace(p.Namespace).Get(context.Background(), p.Name)
		if err != nil {
			t.Fatal(err)
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		cur.Status.Phase = corev1.PodRunning
		cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		out, err := pods().Namespace(p.Namespace).UpdateStatus(context.Background(), cur)
		if client.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

func newBudget(t *testing.T, ns string, spec policyv1.PodDisruptionBudgetSpec) *policyv1.PodDisruptionBudget {
	t.Helper()
	if spec.Selector == nil {
		spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	}
	out, err := budgets().Namespace(ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// changeBudget applies change to the budget's spec.
func changeBudget(t *testing.T, ns string, change func(*policyv1.PodDisruptionBudgetSpec)) {
	t.Helper()
	for {
		b, err := budgets().Namespace(ns).Get(context.Background(), "web")
		if err != nil {
			t.Fatal(err)
		}
		change(&b.Spec)
		_, err = budgets().Namespace(ns).Update(context.Background(), b)
		if client.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
}

// status is the part of a budget's status the tests compare.
type status struct {
	expected, desired, current, allowed int32
	reason                              string
}

func (s status) String() string {
	return fmt.Sprintf("expected %d desired %d current %d allowed %d (%s)", s.expected, s.desired, s.current, s.allowed, s.reason)
}

func statusOf(b *policyv1.PodDisruptionBudget) status {
	s := status{b.Status.ExpectedPods, b.Status.DesiredHealthy, b.Status.CurrentHealthy, b.Status.DisruptionsAllowed, ""}
	for _, cond := range b.Status.Conditions {
		if cond.Type == policyv1.DisruptionAllowedCondition {
			s.reason = cond.Reason
		}
	}
	if b.Status.ObservedGeneration != b.Generation {
		s.reason = "not observed"
	}
	return s
}

// waitStatus waits until the budget's status reads want; it returns the budget.
func waitStatus(t *testing.T, ns string, want status) *policyv1.PodDisruptionBudget {
	t.Helper()
	var b *policyv1.PodDisruptionBudget
	var got status
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if b, err = budgets().Namespace(ns).Get(context.Background(), "web"); err != nil {
			t.Fatal(err)
		}
		if got = statusOf(b); got == want {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget status %v, want %v\n%+v", got, want, b.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// evictPod posts an Eviction over plain HTTP (the client would retry a 429) and returns the
// answer's code and body.
func evictPod(t *testing.T, ns, name string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]any{"name": name}})
	resp, err := http.Post(url+"/api/v1/namespaces/"+ns+"/pods/"+name+"/eviction", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

const (
	sufficient   = policyv1.SufficientPodsReason
	insufficient = policyv1.InsufficientPodsReason
	syncFailed   = policyv1.SyncFailedReason
)

// TestBudgetFollowsPods: the status follows the pods' readiness and the spec: maxUnavailable
// and percentages against the ReplicaSet's replicas (rounded up), a count against the pods.
func TestBudgetFollowsPods(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "follow-")
	rs := replicaSet(t, ns, "web", 3, nil)
	a := pod(t, ns, "a", rs, "ReplicaSet", true)
	pod(t, ns, "b", rs, "ReplicaSet", true)
	cc := pod(t, ns, "c", rs, "ReplicaSet", false)
	newBudget(t, ns, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: count(1)})
	waitStatus(t, ns, status{3, 2, 2, 0, insufficient})

	setReady(t, cc, true)
	waitStatus(t, ns, status{3, 2, 3, 1, sufficient})

	changeBudget(t, ns, func(s *policyv1.PodDisruptionBudgetSpec) { s.MaxUnavailable, s.MinAvailable = nil, percent("50%") })
	waitStatus(t, ns, status{3, 2, 3, 1, sufficient})
	changeBudget(t, ns, func(s *policyv1.PodDisruptionBudgetSpec) { s.MinAvailable = percent("100%") })
	waitStatus(t, ns, status{3, 3, 3, 0, insufficient})
	changeBudget(t, ns, func(s *policyv1.PodDisruptionBudgetSpec) { s.MinAvailable = count(1) })
	b := waitStatus(t, ns, status{3, 1, 3, 2, sufficient})
	if b.Status.ObservedGeneration != 4 {
		t.Errorf("observedGeneration %d, want 4", b.Status.ObservedGeneration)
	}

	// A pod being deleted is not healthy; a gone one is not expected under a count.
	if err := pods().Namespace(ns).Delete(context.Background(), a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ns, status{2, 1, 2, 1, sufficient})
}

// TestBudgetOfDeployment: a Deployment's pods are expected by its replicas, whatever its
// ReplicaSets say; pods without a controller count for nothing under a percentage; a pod whose
// controller is missing fails the sync, which then allows nothing.
func TestBudgetOfDeployment(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "deploy-")
	replicas := int32(4)
	labels := map[string]string{"app": "web"}
	dep, err := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns).Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "web"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	old, cur := replicaSet(t, ns, "web-old", 1, dep), replicaSet(t, ns, "web-new", 3, dep)
	pod(t, ns, "a", old, "ReplicaSet", true)
	pod(t, ns, "b", cur, "ReplicaSet", true)
	pod(t, ns, "c", cur, "ReplicaSet", true)
	pod(t, ns, "d", cur, "ReplicaSet", true)
	newBudget(t, ns, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: percent("25%")})
	waitStatus(t, ns, status{4, 3, 4, 1, sufficient})

	pod(t, ns, "stray", nil, "", true)
	waitStatus(t, ns, status{4, 3, 5, 2, sufficient})

	gone := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "gone", UID: types.UID("0000-gone")}}
	pod(t, ns, "orphan", gone, "ReplicaSet", true)
	b := waitStatus(t, ns, status{4, 3, 5, 0, syncFailed})
	for _, cond := range b.Status.Conditions {
		if cond.Type == policyv1.DisruptionAllowedCondition && cond.Message != `found no controllers for pod "orphan"` {
			t.Errorf("condition message %q", cond.Message)
		}
	}
	code, body := evictPod(t, ns, "b")
	if code != http.StatusTooManyRequests || !strings.Contains(body, "does not allow evicting pods currently because it failed sync: found no controllers") {
		t.Errorf("eviction under a failed sync: %d %s", code, body)
	}
}

// TestEvictionsAgainstBudget: with three Ready pods and minAvailable 2, one eviction goes
// through, the pod is counted out at once, and the next is refused until a replacement is
// Ready.
func TestEvictionsAgainstBudget(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "evict-")
	rs := replicaSet(t, ns, "web", 3, nil)
	for _, name := range []string{"a", "b", "c"} {
		pod(t, ns, name, rs, "ReplicaSet", true)
	}
	newBudget(t, ns, policyv1.PodDisruptionBudgetSpec{MinAvailable: count(2)})
	waitStatus(t, ns, status{3, 2, 3, 1, sufficient})

	if code, body := evictPod(t, ns, "a"); code != http.StatusCreated {
		t.Fatalf("first eviction: %d %s", code, body)
	}
	// The eviction took the disruption; the controller, seeing the pod gone, agrees.
	b := waitStatus(t, ns, status{2, 2, 2, 0, insufficient})
	if len(b.Status.DisruptedPods) != 0 {
		t.Errorf("disruptedPods of a deleted pod kept: %v", b.Status.DisruptedPods)
	}
	code, body := evictPod(t, ns, "b")
	if code != http.StatusTooManyRequests || !strings.Contains(body, "The disruption budget web needs 2 healthy pods and has 2 currently") {
		t.Fatalf("second eviction: %d %s", code, body)
	}
	replacement := pod(t, ns, "d", rs, "ReplicaSet", false)
	waitStatus(t, ns, status{3, 2, 2, 0, insufficient})
	setReady(t, replacement, true)
	waitStatus(t, ns, status{3, 2, 3, 1, sufficient})
	if code, body := evictPod(t, ns, "b"); code != http.StatusCreated {
		t.Fatalf("eviction after the replacement: %d %s", code, body)
	}
}

// TestDisruptedPodsExpire: an eviction recorded for a pod that is not deleted counts it out
// for two minutes only; then the controller drops the entry and counts the pod again. A
// DisruptionTarget condition left on such a pod is cleared once stale.
func TestDisruptedPodsExpire(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "expire-")
	rs := replicaSet(t, ns, "web", 2, nil)
	a := pod(t, ns, "a", rs, "ReplicaSet", true)
	pod(t, ns, "b", rs, "ReplicaSet", true)
	newBudget(t, ns, policyv1.PodDisruptionBudgetSpec{MinAvailable: count(1)})
	waitStatus(t, ns, status{2, 1, 2, 1, sufficient})

	// As an eviction whose pod deletion failed would leave it: recorded 118 s ago.
	for {
		b, err := budgets().Namespace(ns).Get(context.Background(), "web")
		if err != nil {
			t.Fatal(err)
		}
		b.Status.DisruptedPods = map[string]metav1.Time{"a": metav1.NewTime(time.Now().Add(-DeletionTimeout + 2*time.Second))}
		_, err = budgets().Namespace(ns).UpdateStatus(context.Background(), b)
		if client.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	b := waitStatus(t, ns, status{2, 1, 1, 0, insufficient})
	if _, ok := b.Status.DisruptedPods["a"]; !ok {
		t.Fatalf("the recent entry was dropped: %v", b.Status.DisruptedPods)
	}
	b = waitStatus(t, ns, status{2, 1, 2, 1, sufficient})
	if len(b.Status.DisruptedPods) != 0 {
		t.Errorf("the expired entry was kept: %v", b.Status.DisruptedPods)
	}

	// The eviction's mark on the pod, left behind: cleared after the (test's) stale timeout.
	for {
		p, err := pods().Namespace(ns).Get(context.Background(), a.Name)
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting", LastTransitionTime: metav1.Now()})
		_, err = pods().Namespace(ns).UpdateStatus(context.Background(), p)
		if client.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	testserver.Eventually(t, "the stale DisruptionTarget condition cleared", 10*time.Second, func() bool {
		p, err := pods().Namespace(ns).Get(context.Background(), a.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.DisruptionTarget {
				return cond.Status == corev1.ConditionFalse
			}
		}
		return false
	})
}

// TestScaleSubresource: controllers without an informer here are read through their scale
// subresource, found in discovery; a kind without one is an error that says so.
func TestScaleSubresource(t *testing.T) {
	ctrl := start(t)
	ns := testserver.Namespace(t, c, "scale-")
	rs := replicaSet(t, ns, "web", 5, nil)
	ctx := context.Background()
	ref := metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	got, err := ctrl.scales.get(ctx, ref, appsv1.SchemeGroupVersion, ns)
	if err != nil || got == nil || got.uid != rs.UID || got.replicas != 5 {
		t.Errorf("scale of a ReplicaSet: %+v, %v", got, err)
	}
	ref.UID = "0000-other"
	if got, err := ctrl.scales.get(ctx, ref, appsv1.SchemeGroupVersion, ns); got != nil || err != nil {
		t.Errorf("scale of a replaced ReplicaSet: %+v, %v", got, err)
	}
	cm, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}})
	if err != nil {
		t.Fatal(err)
	}
	cmRef := metav1.NewControllerRef(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if _, err := ctrl.scales.get(ctx, cmRef, corev1.SchemeGroupVersion, ns); err == nil || err.Error() != "configmaps does not implement the scale subresource" {
		t.Errorf("scale of a ConfigMap: %v", err)
	}
	unknown := &metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", UID: "1"}
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	if _, err := ctrl.scales.get(ctx, unknown, gv, ns); err == nil || err.Error() != "no resource of kind Widget.example.com is served" {
		t.Errorf("scale of an unknown kind: %v", err)
	}
}
