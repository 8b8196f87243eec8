// Package placement holds the rules of where a pod may run that more than one role applies:
// the scheduler places pods with them, the DaemonSet controller decides which nodes get a
// daemon pod, the node lifecycle controller which pods a tainted node evicts.
package placement

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Tolerates reports whether toleration t tolerates taint. An empty effect matches every
// effect; an empty key (only meaningful with operator Exists) matches every key; operator
// Exists matches any value, Equal (or empty) the same value. Other operators match nothing.
func Tolerates(t corev1.Toleration, taint corev1.Taint) bool {
	if t.Effect != "" && t.Effect != taint.Effect {
		return false
	}
	if t.Key != "" && t.Key != taint.Key {
		return false
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		return true
	case corev1.TolerationOpEqual, "":
		return t.Key != "" && t.Value == taint.Value
	}
	return false
}

// UntoleratedTaint returns the first NoSchedule or NoExecute taint of taints that none of
// tolerations tolerates. PreferNoSchedule taints never keep a pod off a node.
func UntoleratedTaint(taints []corev1.Taint, tolerations []corev1.Toleration) (corev1.Taint, bool) {
	for _, taint := range taints {
		if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		tolerated := false
		for _, t := range tolerations {
			if Tolerates(t, taint) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return taint, true
		}
	}
	return corev1.Taint{}, false
}

// MatchNodeSelector reports whether node matches a required node selector: any of its terms,
// each term being all of its expressions (on labels) and fields (metadata.name). A term with
// neither matches nothing; so does a malformed requirement.
func MatchNodeSelector(s *corev1.NodeSelector, node *corev1.Node) bool {
	return slices.ContainsFunc(s.NodeSelectorTerms, func(t corev1.NodeSelectorTerm) bool { return matchTerm(t, node) })
}

func matchTerm(t corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 {
		return false
	}
	for _, r := range t.MatchExpressions {
		if !matchRequirement(r, labels.Set(node.Labels)) {
			return false
		}
	}
	for _, r := range t.MatchFields {
		if r.Key != metav1.ObjectNameField || !matchRequirement(r, labels.Set{metav1.ObjectNameField: node.Name}) {
			return false
		}
	}
	return true
}

var operators = map[corev1.NodeSelectorOperator]selection.Operator{
	corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
	corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	corev1.NodeSelectorOpGt: selection.GreaterThan, corev1.NodeSelectorOpLt: selection.LessThan,
}

func matchRequirement(r corev1.NodeSelectorRequirement, set labels.Set) bool {
	op, ok := operators[r.Operator]
	if !ok {
		return false
	}
	if op == selection.GreaterThan || op == selection.LessThan {
		// Gt and Lt compare integers; a value that is not one matches nothing.
		if len(r.Values) != 1 {
			return false
		}
		if _, err := strconv.ParseInt(r.Values[0], 10, 64); err != nil {
			return false
		}
	}
	req, err := labels.NewRequirement(r.Key, op, r.Values)
	return err == nil && req.Matches(set)
}
