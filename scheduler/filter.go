package scheduler

import (
	"fmt"
	"github.com/kplane/kplane/internal/placement"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Reasons a node does not fit a pod, in the words `kubectl describe pod` users know.
const (
	reasonNotReady      = "node(s) were not ready"
	reasonUnschedulable = "node(s) were unschedulable"
	reasonSelector      = "node(s) didn't match Pod's node affinity/selector"
)

// NodeReady reports whether node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Fits returns "" when pod may run on node, else why not (one of the reasons above, or the
// untolerated taint). The checks run in a fixed order and the first failing one is reported.
func Fits(pod *corev1.Pod, node *corev1.Node) string {
	if !NodeReady(node) {
		return reasonNotReady
	}
	if node.Spec.Unschedulable {
		// A pod tolerating the unschedulable taint may still go there, as in Kubernetes.
		if _, bad := placement.UntoleratedTaint([]corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}, pod.Spec.Tolerations); bad {
			return reasonUnschedulable
		}
	}
	if len(pod.Spec.NodeSelector) > 0 && !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return reasonSelector
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil &&
		!placement.MatchNodeSelector(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, node) {
		return reasonSelector
	}
	if taint, bad := placement.UntoleratedTaint(node.Spec.Taints, pod.Spec.Tolerations); bad {
		return fmt.Sprintf("node(s) had untolerated taint {%s}", taintString(taint))
	}
	return ""
}

// taintString shows a taint as "key: value" (or just "key" without a value).
func taintString(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key
	}
	return t.Key + ": " + t.Value
}

// Filter splits nodes into those pod fits on and a count of the others by reason.
func Filter(pod *corev1.Pod, nodes []*corev1.Node) (fit []*corev1.Node, misfits map[string]int) {
	misfits = map[string]int{}
	for _, n := range nodes {
		if why := Fits(pod, n); why != "" {
			misfits[why]++
			continue
		}
		fit = append(fit, n)
	}
	return fit, misfits
}

// Choose returns the node of fit with the fewest pods according to podsOn, the first by
// name among equals; nil when fit is empty.
func Choose(fit []*corev1.Node, podsOn func(node string) int) *corev1.Node {
	var best *corev1.Node
	bestCount := 0
	for _, n := range fit {
		c := podsOn(n.Name)
		if best == nil || c < bestCount || (c == bestCount && n.Name < best.Name) {
			best, bestCount = n, c
		}
	}
	return best
}

// UnschedulableMessage explains why none of total nodes fits:
// "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) were not ready."
// Reasons are listed in alphabetical order so that the message is stable.
func UnschedulableMessage(total int, misfits map[string]int) string {
	if total == 0 {
		return "no nodes available to schedule pods"
	}
	parts := make([]string, 0, len(misfits))
	for why, n := range misfits {
		parts = append(parts, fmt.Sprintf("%d %s", n, why))
	}
	sort.Strings(parts)
	msg := fmt.Sprintf("0/%d nodes are available", total)
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, ", ")
	}
	return msg + "."
}
