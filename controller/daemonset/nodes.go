package daemonset

import (
	"slices"

	"github.com/kplane/kplane/internal/placement"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// daemonTolerations are what every daemon pod tolerates, as Kubernetes adds them: a daemon
// stays on a node that is not ready, unreachable, under pressure or cordoned (kubectl drain
// --ignore-daemonsets leaves it), and a host-network daemon on a node whose network is not
// set up yet (it may be the one setting it up).
func daemonTolerations(hostNetwork bool) []corev1.Toleration {
	exists := func(key string, effect corev1.TaintEffect) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect}
	}
	tols := []corev1.Toleration{
		exists(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute),
		exists(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute),
		exists(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule),
	}
	if hostNetwork {
		tols = append(tols, exists(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule))
	}
	return tols
}

// withDaemonTolerations adds the daemon tolerations a pod spec lacks.
func withDaemonTolerations(spec *corev1.PodSpec) {
	for _, t := range daemonTolerations(spec.HostNetwork) {
		if !slices.ContainsFunc(spec.Tolerations, func(have corev1.Toleration) bool {
			return have.Key == t.Key && have.Effect == t.Effect && have.Operator == t.Operator && have.Value == t.Value
		}) {
			spec.Tolerations = append(spec.Tolerations, t)
		}
	}
}

// placementOf says whether the DaemonSet's pod should run on node (shouldRun) and whether one
// already there may stay (mayStay): a node it does not select, or whose NoSchedule taint its
// pod does not tolerate, gets no new pod; only a NoExecute taint it does not tolerate (or no
// longer being selected) removes one.
func placementOf(ds *appsv1.DaemonSet, node *corev1.Node) (shouldRun, mayStay bool) {
	spec := ds.Spec.Template.Spec
	if spec.NodeName != "" && spec.NodeName != node.Name {
		return false, false
	}
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false, false
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil &&
		!placement.MatchNodeSelector(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, node) {
		return false, false
	}
	tols := append(slices.Clone(spec.Tolerations), daemonTolerations(spec.HostNetwork)...)
	taint, bad := placement.UntoleratedTaint(node.Spec.Taints, tols)
	if !bad {
		return true, true
	}
	if taint.Effect == corev1.TaintEffectNoExecute {
		return false, false
	}
	// A NoSchedule taint keeps new pods off but leaves a running one alone.
	_, badNoExecute := placement.UntoleratedTaint(noExecuteOnly(node.Spec.Taints), tols)
	return false, !badNoExecute
}

func noExecuteOnly(taints []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Effect == corev1.TaintEffectNoExecute {
			out = append(out, t)
		}
	}
	return out
}

// pinnedTo sets the pod's required node affinity to the one node, replacing the template's
// (its terms were checked against the node already): the scheduler then binds the pod there,
// honouring the node's resources, as Kubernetes does since daemon pods are scheduled.
func pinnedTo(spec *corev1.PodSpec, node string) {
	term := corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}
}

// nodeOf is the node a daemon pod is for: where it runs, or the node its affinity pins it to
// while it waits to be scheduled.
func nodeOf(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}
