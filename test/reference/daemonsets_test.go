//go:build linux

package reference

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kplane/kplane/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDaemonSetsMatchReference runs the reference kube-controller-manager's daemonset
// controller and then kplane's on the same DaemonSets over the same three Nodes (one tainted
// NoSchedule, one labelled, one cordoned), the test playing the scheduler (a pod is bound to the
// node its affinity names) and the node (a bound pod runs, ready at once; a pod being deleted is
// gone). After the DaemonSets are created, after a template change (RollingUpdate with
// maxUnavailable, with maxSurge, and OnDelete), after a node is tainted, and after a pod fails
// and a node loses the label a DaemonSet selects, each DaemonSet's
// status, its ControllerRevisions' numbers and its pods per node (with the revision they are of,
// the tolerations and node affinity the controller gave them) must be the same. Revision hashes
// differ by design (each controller hashes the template its own way) and are shown as the
// number of the revision they name.
//
//	KPLANE_REFERENCE_KCM=/path/to/kube-controller-manager go test -count=1 -v -run TestDaemonSetsMatchReference ./test/reference/
func TestDaemonSetsMatchReference(t *testing.T) {
	runDifferential(t, scenario{
		prefix:      "ds",
		controllers: "daemonset",
		node:        playNode(true),
		steps: []step{
			{name: "creating the DaemonSets", act: createDaemonSets, atRest: daemonSetsAtRest},
			{name: "changing the templates", act: changeDaemonSetTemplates, atRest: daemonSetsAtRest},
			{name: stepTaint, act: deleteOnDeletePodAndTaint, atRest: daemonSetsAtRest},
			{name: "annotating the DaemonSets", act: annotateDaemonSets, atRest: daemonSetsAtRest},
			{name: "a pod failing and a node relabelled", act: failPodAndRelabel, atRest: daemonSetsAtRest},
		},
		outcomes: daemonSetOutcomes,
		tolerate: func(step, key, ref, got string) string {
			if step == stepTaint && !strings.Contains(key, " pod ") {
				return "Kubernetes' controller does not sync a DaemonSet when a node where it has a pod gains a NoSchedule taint the pod does not tolerate " +
					"(v1.36 syncNodeUpdate queues a DaemonSet only for a pod to create or delete, or a non-zero misscheduled count), so its status " +
					"stays stale until the DaemonSet's next sync; kplane's recomputes it at once. After the next step (a sync) both agree."
			}
			return ""
		},
		retire: deleteAll[*appsv1.DaemonSet]("daemonsets"),
	})
}

const stepTaint = "deleting an OnDelete pod and tainting a node"

const (
	nodeTainted  = "ref-node-tainted"
	nodeLabelled = "ref-node-ssd"
	nodeCordoned = "ref-node-cordoned"
)

// daemonNodes are the nodes as each run starts with them.
func daemonNodes() []*corev1.Node {
	node := func(name string, change func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		change(n)
		return n
	}
	return []*corev1.Node{
		node(nodeTainted, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}}
		}),
		node(nodeLabelled, func(n *corev1.Node) { n.Labels["disk"] = "ssd" }),
		node(nodeCordoned, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
	}
}

// resetNodes creates the nodes, or puts them back as daemonNodes has them, all Ready.
func resetNodes(ctx context.Context, c *client.Client) error {
	nodes := client.Resource[*corev1.Node](c, "nodes")
	for _, want := range daemonNodes() {
		n, err := nodes.Get(ctx, want.Name)
		switch {
		case client.IsNotFound(err):
			n, err = nodes.Create(ctx, want)
		case err == nil:
			n.Labels, n.Spec = want.Labels, want.Spec
			n, err = nodes.Update(ctx, n)
		}
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		n.Status.Allocatable = corev1.ResourceList{"pods": resource.MustParse("110")}
		n.Status.Capacity = n.Status.Allocatable
		if _, err := nodes.UpdateStatus(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func daemonSetFixture() []*appsv1.DaemonSet {
	ds := func(name string, change func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
		labels := map[string]string{"app": name}
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}},
		}}
		change(d)
		return d
	}
	tolerateInfra := func(d *appsv1.DaemonSet) {
		d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: corev1.TaintEffectNoSchedule}}
	}
	return []*appsv1.DaemonSet{
		ds("plain", func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: new(intstr.FromInt32(1))}}
		}),
		ds("selector", func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"} }),
		ds("affinity", func(d *appsv1.DaemonSet) {
			d.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"ssd"}}}}}}}}
		}),
		ds("tolerant", tolerateInfra),
		ds("surge", func(d *appsv1.DaemonSet) {
			tolerateInfra(d)
			d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: new(intstr.FromInt32(0)), MaxSurge: new(intstr.FromInt32(1))}}
		}),
		ds("ondelete", func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		}),
	}
}

func createDaemonSets(ctx context.Context, c *client.Client, ns string) error {
	if err := resetNodes(ctx, c); err != nil {
		return err
	}
	for _, d := range daemonSetFixture() {
		if _, err := client.Resource[*appsv1.DaemonSet](c, "daemonsets").Namespace(ns).Create(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

func changeDaemonSetTemplates(ctx context.Context, c *client.Client, ns string) error {
	for _, name := range []string{"plain", "surge", "ondelete"} {
		if err := modify(ctx, client.Resource[*appsv1.DaemonSet](c, "daemonsets").Namespace(ns), name, func(d *appsv1.DaemonSet) {
			d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "VERSION", Value: "2"}}
		}); err != nil {
			return err
		}
	}
	return nil
}

// deleteOnDeletePodAndTaint deletes the OnDelete DaemonSet's pod on the labelled node (its
// replacement is of the new template) and taints the cordoned node NoSchedule (the pods there
// that do not tolerate it stay, misscheduled).
func deleteOnDeletePodAndTaint(ctx context.Context, c *client.Client, ns string) error {
	p, err := daemonPodOn(ctx, c, ns, "ondelete", nodeLabelled)
	if err != nil {
		return err
	}
	if err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return modify(ctx, client.Resource[*corev1.Node](c, "nodes"), nodeCordoned, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule})
	})
}

// failPodAndRelabel fails the tolerant DaemonSet's pod on the tainted node (it is replaced)
// and takes the disk label off the labelled node (the nodeSelector's pod goes, the NotIn
// affinity's comes).
func failPodAndRelabel(ctx context.Context, c *client.Client, ns string) error {
	p, err := daemonPodOn(ctx, c, ns, "tolerant", nodeTainted)
	if err != nil {
		return err
	}
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
	if _, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).UpdateStatus(ctx, p); err != nil {
		return err
	}
	return modify(ctx, client.Resource[*corev1.Node](c, "nodes"), nodeLabelled, func(n *corev1.Node) { delete(n.Labels, "disk") })
}

// daemonPodOn returns the pod of the DaemonSet of app on node.
func daemonPodOn(ctx context.Context, c *client.Client, ns, app, node string) (*corev1.Pod, error) {
	l, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, err
	}
	for _, p := range l.Items {
		if p.Spec.NodeName == node {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no pod of %s on %s", app, node)
}

// annotateDaemonSets touches every DaemonSet, which makes both controllers sync them.
func annotateDaemonSets(ctx context.Context, c *client.Client, ns string) error {
	api := client.Resource[*appsv1.DaemonSet](c, "daemonsets").Namespace(ns)
	for _, d := range daemonSetFixture() {
		if err := modify(ctx, api, d.Name, func(d *appsv1.DaemonSet) {
			if d.Annotations == nil {
				d.Annotations = map[string]string{}
			}
			d.Annotations["touched"] = "yes"
		}); err != nil {
			return err
		}
	}
	return nil
}

// daemonSetsAtRest: each DaemonSet's status is of its generation and, unless it updates on
// delete, every node it should run on has one available pod of the new template; no pod is
// being deleted.
func daemonSetsAtRest(ctx context.Context, c *client.Client, ns string) ([]string, error) {
	l, pl, err := listWithPods[*appsv1.DaemonSet](ctx, c, "daemonsets", ns)
	if err != nil {
		return nil, err
	}
	var moving []string
	for _, d := range l {
		st := d.Status
		done := st.ObservedGeneration == d.Generation && st.NumberAvailable == st.DesiredNumberScheduled
		if d.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
			done = done && st.UpdatedNumberScheduled == st.DesiredNumberScheduled
		}
		if !done {
			moving = append(moving, d.Name)
		}
	}
	return append(moving, unsettledPods(pl, func(p *corev1.Pod) bool { return p.Spec.NodeName == "" })...), nil
}

// daemonSetOutcomes renders each DaemonSet's status, revisions and pods.
func daemonSetOutcomes(ctx context.Context, c *client.Client, ns string) (map[string]string, error) {
	l, pl, err := listWithPods[*appsv1.DaemonSet](ctx, c, "daemonsets", ns)
	if err != nil {
		return nil, err
	}
	revs, err := revisionsByOwner(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, d := range l {
		st := d.Status
		h := revs[d.Name]
		out["daemonset "+d.Name] = fmt.Sprintf("desired=%d current=%d ready=%d updated=%d available=%d unavailable=%d misscheduled=%d observedGeneration=%d/%d collisionCount=%d conditions=%d revisions=%s",
			st.DesiredNumberScheduled, st.CurrentNumberScheduled, st.NumberReady, st.UpdatedNumberScheduled, st.NumberAvailable,
			st.NumberUnavailable, st.NumberMisscheduled, st.ObservedGeneration, d.Generation, deref(st.CollisionCount), len(st.Conditions), h)
		var pods []string
		for _, p := range pl {
			if !ownedBy(p.OwnerReferences, "DaemonSet", d.Name) {
				continue
			}
			pods = append(pods, fmt.Sprintf("%s: revision=%s deleting=%v labels=%s tolerations=%s affinity=%s",
				p.Spec.NodeName, h.number(p.Labels[appsv1.ControllerRevisionHashLabelKey]), p.DeletionTimestamp != nil,
				mustJSON(withoutKey(p.Labels, appsv1.ControllerRevisionHashLabelKey)), tolerationsString(p.Spec.Tolerations), mustJSON(p.Spec.Affinity)))
		}
		slices.Sort(pods)
		for i, p := range pods {
			out[fmt.Sprintf("daemonset %s pod %d", d.Name, i)] = p
		}
	}
	return out, nil
}

func tolerationsString(tols []corev1.Toleration) string {
	var out []string
	for _, t := range tols {
		s := fmt.Sprintf("%s%s%s:%s", t.Key, map[corev1.TolerationOperator]string{corev1.TolerationOpExists: "*", corev1.TolerationOpEqual: "="}[t.Operator], t.Value, t.Effect)
		if t.TolerationSeconds != nil {
			s += fmt.Sprintf("(%ds)", *t.TolerationSeconds)
		}
		out = append(out, s)
	}
	return "[" + strings.Join(out, " ") + "]"
}
