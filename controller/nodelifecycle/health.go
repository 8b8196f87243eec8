package nodelifecycle

import (
	"github.com/kplane/kplane/internal/placement"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons and messages written into the conditions of a node that stopped reporting.
const (
	reasonUnknown      = "NodeStatusUnknown"
	messageUnknown     = "Kubelet stopped posting node status."
	reasonNeverUpdated = "NodeStatusNeverUpdated"
	messageNeverUpdate = "Kubelet never posted node status."
)

// watchedConditions are the node conditions set to Unknown when a node goes silent.
var watchedConditions = []corev1.NodeConditionType{
	corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure,
}

// health is what the controller remembers of one node's heartbeats.
type health struct {
	renew     time.Time // the Lease's spec.renewTime last seen
	heartbeat time.Time // the Ready condition's lastHeartbeatTime last seen
	probe     time.Time // our clock when either of them last moved on, or when the node was first seen
}

// monitor decides, from the heartbeats it is shown, which nodes have gone silent. The times a
// node reports are compared only with the node's own earlier reports; staleness is measured
// on the caller's clock (probe times), so a node whose clock is off is judged fairly. A pure
// state machine: the caller passes the time.
type monitor struct {
	grace time.Duration
	nodes map[string]*health
}

func newMonitor(grace time.Duration) *monitor {
	return &monitor{grace: grace, nodes: map[string]*health{}}
}

// observe records node name's current heartbeats (zero when absent) at now and reports whether
// no heartbeat has moved on for longer than the grace period. A node seen for the first time
// is given a full grace period.
func (m *monitor) observe(name string, heartbeat, renew, now time.Time) (stale bool) {
	h, ok := m.nodes[name]
	if !ok {
		m.nodes[name] = &health{renew: renew, heartbeat: heartbeat, probe: now}
		return false
	}
	if renew.After(h.renew) {
		h.renew, h.probe = renew, now
	}
	if heartbeat.After(h.heartbeat) {
		h.heartbeat, h.probe = heartbeat, now
	}
	return now.Sub(h.probe) > m.grace
}

// forget drops the nodes not in keep.
func (m *monitor) forget(keep map[string]bool) {
	for name := range m.nodes {
		if !keep[name] {
			delete(m.nodes, name)
		}
	}
}

// readyHeartbeat is the lastHeartbeatTime of node's Ready condition (zero if none).
func readyHeartbeat(node *corev1.Node) time.Time {
	if c := condition(node.Status.Conditions, corev1.NodeReady); c != nil {
		return c.LastHeartbeatTime.Time
	}
	return time.Time{}
}

// readyStatus is the status of node's Ready condition; Unknown when it has none.
func readyStatus(node *corev1.Node) corev1.ConditionStatus {
	if c := condition(node.Status.Conditions, corev1.NodeReady); c != nil {
		return c.Status
	}
	return corev1.ConditionUnknown
}

func condition(conds []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// unknownConditions returns conds with every watched condition Unknown (added when missing),
// and whether anything changed. Conditions already Unknown are left as they are, so the
// status is written once per outage.
func unknownConditions(conds []corev1.NodeCondition, now time.Time) ([]corev1.NodeCondition, bool) {
	out := append([]corev1.NodeCondition(nil), conds...)
	changed := false
	ts := metav1.NewTime(now)
	for _, t := range watchedConditions {
		c := condition(out, t)
		switch {
		case c == nil:
			out = append(out, corev1.NodeCondition{Type: t, Status: corev1.ConditionUnknown,
				Reason: reasonNeverUpdated, Message: messageNeverUpdate, LastTransitionTime: ts})
			changed = true
		case c.Status != corev1.ConditionUnknown:
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionUnknown, reasonUnknown, messageUnknown, ts
			changed = true
		}
	}
	return out, changed
}

// wantTaints returns taints with the NoExecute taint matching a node whose Ready condition is
// ready: unreachable for Unknown, not-ready for False, neither for True. A taint already there
// keeps its timeAdded. added reports whether a node free of both taints gets one (the step the
// eviction rate limits); changed whether the list differs from taints.
func wantTaints(taints []corev1.Taint, ready corev1.ConditionStatus, now time.Time) (out []corev1.Taint, added, changed bool) {
	want := ""
	switch ready {
	case corev1.ConditionUnknown:
		want = corev1.TaintNodeUnreachable
	case corev1.ConditionFalse:
		want = corev1.TaintNodeNotReady
	}
	had := false
	for _, t := range taints {
		if t.Effect == corev1.TaintEffectNoExecute && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) {
			had = true
			if t.Key != want {
				changed = true
				continue
			}
			want = "" // already there
		}
		out = append(out, t)
	}
	if want != "" {
		ts := metav1.NewTime(now)
		out = append(out, corev1.Taint{Key: want, Effect: corev1.TaintEffectNoExecute, TimeAdded: &ts})
		changed = true
		added = !had
	}
	return out, added, changed
}

// evictionTime returns when pod must leave a node with taints, and false if never. Only the
// node controller's own NoExecute taints (unreachable, not-ready) count, each from its
// timeAdded:
//
//   - a pod with no toleration for the taint goes after timeout;
//   - a pod tolerating it goes after the smallest tolerationSeconds of its matching
//     tolerations (at once when that is 0 or less), and never when none of them has one.
//
// The API server gives every pod that does not tolerate these taints a toleration of exactly
// defaultTolerationSeconds for each (DefaultTolerationSeconds admission, as Kubernetes'). Such
// a toleration is read as no toleration, so that the pod eviction timeout decides; the two
// agree at the default of 5 minutes. With both taints, the earlier time wins.
func evictionTime(pod *corev1.Pod, taints []corev1.Taint, timeout time.Duration) (time.Time, bool) {
	var at time.Time
	found := false
	for i := range taints {
		t := &taints[i]
		if t.Effect != corev1.TaintEffectNoExecute || t.TimeAdded == nil ||
			(t.Key != corev1.TaintNodeUnreachable && t.Key != corev1.TaintNodeNotReady) {
			continue
		}
		d, ok := timeout, true
		matched := false
		for j := range pod.Spec.Tolerations {
			tol := &pod.Spec.Tolerations[j]
			if !placement.Tolerates(*tol, *t) {
				continue
			}
			if !matched {
				matched, ok = true, false
			}
			if isDefaultToleration(tol, t) {
				s := timeout
				if !ok || s < d {
					d, ok = s, true
				}
			} else if tol.TolerationSeconds != nil {
				s := time.Duration(max(*tol.TolerationSeconds, 0)) * time.Second
				if !ok || s < d {
					d, ok = s, true
				}
			}
		}
		if !ok {
			continue
		}
		when := t.TimeAdded.Add(d)
		if !found || when.Before(at) {
			at, found = when, true
		}
	}
	return at, found
}

// defaultTolerationSeconds is what the API server's admission gives pods for the not-ready
// and unreachable taints.
const defaultTolerationSeconds = 300

// isDefaultToleration reports whether tol has the exact shape admission gives for taint.
func isDefaultToleration(tol *corev1.Toleration, taint *corev1.Taint) bool {
	return tol.Key == taint.Key && tol.Operator == corev1.TolerationOpExists && tol.Value == "" &&
		tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil &&
		*tol.TolerationSeconds == defaultTolerationSeconds
}

// needsNotReady reports whether pod still has a Ready condition that is not False.
func needsNotReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status != corev1.ConditionFalse
		}
	}
	return false
}

// limiter lets one node at a time be tainted for eviction, then waits interval before the
// next: --node-eviction-rate's 0.1 node/s is an interval of 10 s. Pure: the caller passes the
// time, and calls took only once the taint is written.
type limiter struct {
	interval time.Duration
	next     time.Time
}

func (l *limiter) ready(now time.Time) bool { return !now.Before(l.next) }

func (l *limiter) took(now time.Time) { l.next = now.Add(l.interval) }
