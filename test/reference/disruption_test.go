//go:build linux

package reference

import (
	"context"
	"fmt"
	"testing"

	"github.com/kplane/kplane/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDisruptionMatchesReference runs the reference kube-controller-manager's disruption
// controller and then kplane's on the same PodDisruptionBudgets (minAvailable as a count and a
// percentage, maxUnavailable as both, unhealthyPodEvictionPolicy AlwaysAllow, one selecting
// no pods, two over pods without a controller, one over a pod whose controller does not exist)
// over pods of ReplicaSets the test created (no replicaset controller runs: the pods are the
// test's, owned by them), of a ReplicaSet of a Deployment and of a StatefulSet, made ready or
// not by the test. After creation, after pods turn unready, one is being deleted and a
// budget's spec changes, after ReplicaSets are scaled up (their pods unchanged) and after the
// pods are ready again, each budget's status must be the same: counts, disruptions allowed,
// conditions with reason and message, observedGeneration.
//
// Each pod is selected by one budget at most: Kubernetes' controller, on a pod event, syncs
// only one of the budgets selecting the pod (chosen arbitrarily), so with overlapping budgets
// its statuses lag until their resync, by chance.
//
//	KPLANE_REFERENCE_KCM=/path/to/kube-controller-manager go test -count=1 -v -run TestDisruptionMatchesReference ./test/reference/
func TestDisruptionMatchesReference(t *testing.T) {
	runDifferential(t, scenario{
		prefix:      "pdb",
		controllers: "disruption",
		steps: []step{
			{name: "creating the budgets", act: createDisruptionFixture, atRest: budgetsAtRest},
			{name: "a pod turning unready and a budget changing", act: unreadyAndChangeBudget, atRest: budgetsAtRest},
			{name: stepScaleUp, act: scaleUp, atRest: budgetsAtRest},
			{name: "the pods ready again", act: readyAgain, atRest: budgetsAtRest},
		},
		outcomes: budgetOutcomes,
		retire:   deleteAll[*policyv1.PodDisruptionBudget]("poddisruptionbudgets"),
	})
}

const stepScaleUp = "scaling ReplicaSets up"

func budgetFixture() []*policyv1.PodDisruptionBudget {
	pdb := func(name, app string, change func(*policyv1.PodDisruptionBudget)) *policyv1.PodDisruptionBudget {
		p := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: policyv1.PodDisruptionBudgetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
		change(p)
		return p
	}
	minAvailable := func(v intstr.IntOrString) func(*policyv1.PodDisruptionBudget) {
		return func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = &v }
	}
	maxUnavailable := func(v intstr.IntOrString) func(*policyv1.PodDisruptionBudget) {
		return func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = &v }
	}
	return []*policyv1.PodDisruptionBudget{
		pdb("min-count", "min-count", minAvailable(intstr.FromInt32(2))),
		pdb("min-percent", "min-percent", minAvailable(intstr.FromString("50%"))),
		pdb("max-count", "max-count", maxUnavailable(intstr.FromInt32(1))),
		pdb("max-percent", "max-percent", maxUnavailable(intstr.FromString("25%"))),
		pdb("always-allow", "always-allow", func(p *policyv1.PodDisruptionBudget) {
			maxUnavailable(intstr.FromInt32(1))(p)
			p.Spec.UnhealthyPodEvictionPolicy = new(policyv1.AlwaysAllow)
		}),
		pdb("nothing", "none", minAvailable(intstr.FromInt32(1))),
		pdb("unmanaged-count", "lonely", minAvailable(intstr.FromInt32(1))),
		pdb("unmanaged-percent", "lonely", minAvailable(intstr.FromString("50%"))),
		pdb("ghost", "ghost", maxUnavailable(intstr.FromInt32(1))),
		pdb("deployed", "deployed", maxUnavailable(intstr.FromInt32(1))),
		pdb("stateful", "stateful", minAvailable(intstr.FromString("50%"))),
	}
}

// replicatedBudgets are the budgets over the pods of a ReplicaSet of their name.
var replicatedBudgets = []string{"min-count", "min-percent", "max-count", "max-percent", "always-allow"}

// createDisruptionFixture creates, for each of replicatedBudgets, a ReplicaSet of 4 replicas
// with its four pods (the last not ready); two pods without a controller; one whose
// ReplicaSet does not exist; and the budgets.
func createDisruptionFixture(ctx context.Context, c *client.Client, ns string) error {
	type podSpec struct {
		name, app string
		owners    []metav1.OwnerReference
		ready     bool
	}
	owned := func(kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: new(true), BlockOwnerDeletion: new(true)}}
	}
	pods := []podSpec{
		{"lonely-0", "lonely", nil, true},
		{"lonely-1", "lonely", nil, true},
		{"ghost-0", "ghost", owned("ReplicaSet", "gone", "00000000-0000-0000-0000-00000000dead"), true},
	}
	for _, app := range replicatedBudgets {
		labels := map[string]string{"app": app}
		rs, err := client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: app},
			Spec: appsv1.ReplicaSetSpec{Replicas: new(int32(4)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}}})
		if err != nil {
			return err
		}
		for i := range 4 {
			pods = append(pods, podSpec{fmt.Sprintf("%s-%d", app, i), app, owned("ReplicaSet", app, rs.UID), i < 3})
		}
	}
	// Pods of a ReplicaSet of a Deployment (whose replicas, not the ReplicaSet's, count) and of
	// a StatefulSet.
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	d, err := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "deployed"},
		Spec:       appsv1.DeploymentSpec{Replicas: new(int32(3)), Selector: selector("deployed"), Template: template("deployed")}})
	if err != nil {
		return err
	}
	rs, err := client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "deployed-1", OwnerReferences: owned("Deployment", "deployed", d.UID)},
		Spec:       appsv1.ReplicaSetSpec{Replicas: new(int32(5)), Selector: selector("deployed"), Template: template("deployed")}})
	if err != nil {
		return err
	}
	ss, err := client.Resource[*appsv1.StatefulSet](c, "statefulsets").Namespace(ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "stateful"},
		Spec:       appsv1.StatefulSetSpec{Replicas: new(int32(4)), Selector: selector("stateful"), Template: template("stateful")}})
	if err != nil {
		return err
	}
	for i := range 3 {
		pods = append(pods, podSpec{fmt.Sprintf("deployed-1-%d", i), "deployed", owned("ReplicaSet", "deployed-1", rs.UID), true},
			podSpec{fmt.Sprintf("stateful-%d", i), "stateful", owned("StatefulSet", "stateful", ss.UID), i > 0})
	}
	api := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	for _, p := range pods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": p.app}, OwnerReferences: p.owners},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
		if p.name == heldPod {
			pod.Finalizers = []string{"reference.kplane.io/hold"}
		}
		created, err := api.Create(ctx, pod)
		if err != nil {
			return err
		}
		if err := setReady(ctx, api, created, p.ready); err != nil {
			return err
		}
	}
	return createAll(ctx, c, "poddisruptionbudgets", ns, budgetFixture())
}

// setReady writes a running pod's status, ready or not.
func setReady(ctx context.Context, api *client.Typed[*corev1.Pod], p *corev1.Pod, ready bool) error {
	p = runningAndReady(p)
	if !ready {
		for i := range p.Status.Conditions {
			if t := p.Status.Conditions[i].Type; t == corev1.PodReady || t == corev1.ContainersReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		p.Status.ContainerStatuses[0].Ready = false
	}
	_, err := api.UpdateStatus(ctx, p)
	return err
}

func setPodsReady(ctx context.Context, c *client.Client, ns string, ready bool, names ...string) error {
	api := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	for _, name := range names {
		p, err := api.Get(ctx, name)
		if err != nil {
			return err
		}
		if err := setReady(ctx, api, p, ready); err != nil {
			return err
		}
	}
	return nil
}

// podsOfBudgets names pod i of each of replicatedBudgets.
func podsOfBudgets(i int) []string {
	var out []string
	for _, app := range replicatedBudgets {
		out = append(out, fmt.Sprintf("%s-%d", app, i))
	}
	return out
}

func unreadyAndChangeBudget(ctx context.Context, c *client.Client, ns string) error {
	if err := setPodsReady(ctx, c, ns, false, podsOfBudgets(0)...); err != nil {
		return err
	}
	if err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Delete(ctx, heldPod, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return modify(ctx, client.Resource[*policyv1.PodDisruptionBudget](c, "poddisruptionbudgets").Namespace(ns), "min-count",
		func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = new(intstr.FromInt32(3)) })
}

// heldPod has a finalizer: once deleted, it stays, being deleted (and so not healthy).
const heldPod = "max-percent-1"

// scaledUp are the ReplicaSets scaleUp scales from 4 to 6 (their pods unchanged). Neither
// controller watches the scale it reads (Kubernetes' has listers of the controllers but no
// handlers), so the budgets keep their expectedPods until the pods' next events (the next
// step) or, in Kubernetes, the 30 s resync of budgets, which the steps do not wait for.
var scaledUp = []string{"min-percent", "max-count", "max-percent"}

func scaleUp(ctx context.Context, c *client.Client, ns string) error {
	for _, name := range scaledUp {
		if err := modify(ctx, client.Resource[*appsv1.ReplicaSet](c, "replicasets").Namespace(ns), name,
			func(rs *appsv1.ReplicaSet) { rs.Spec.Replicas = new(int32(6)) }); err != nil {
			return err
		}
	}
	return nil
}

func readyAgain(ctx context.Context, c *client.Client, ns string) error {
	return setPodsReady(ctx, c, ns, true, append(podsOfBudgets(0), podsOfBudgets(3)...)...)
}

// budgetsAtRest: each budget has its DisruptionAllowed condition and a status of its
// generation (or, its sync having failed, the SyncFailed reason, which keeps the generation
// it had).
func budgetsAtRest(ctx context.Context, c *client.Client, ns string) ([]string, error) {
	l, err := list[*policyv1.PodDisruptionBudget](ctx, c, "poddisruptionbudgets", ns)
	if err != nil {
		return nil, err
	}
	var moving []string
	for _, p := range l {
		cond := findCondition(p.Status.Conditions, policyv1.DisruptionAllowedCondition)
		if cond == nil || p.Status.ObservedGeneration != p.Generation && cond.Reason != policyv1.SyncFailedReason {
			moving = append(moving, p.Name)
		}
	}
	return moving, nil
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// budgetOutcomes renders each budget's status (times left out).
func budgetOutcomes(ctx context.Context, c *client.Client, ns string) (map[string]string, error) {
	l, err := list[*policyv1.PodDisruptionBudget](ctx, c, "poddisruptionbudgets", ns)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range l {
		st := p.Status
		var conds []string
		for _, cond := range st.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s(%s: %q, observedGeneration %d)", cond.Type, cond.Status, cond.Reason, cond.Message, cond.ObservedGeneration))
		}
		out["budget "+p.Name] = fmt.Sprintf("currentHealthy=%d desiredHealthy=%d disruptionsAllowed=%d expectedPods=%d disruptedPods=%d observedGeneration=%d/%d conditions=%v",
			st.CurrentHealthy, st.DesiredHealthy, st.DisruptionsAllowed, st.ExpectedPods, len(st.DisruptedPods), st.ObservedGeneration, p.Generation, conds)
	}
	return out, nil
}
