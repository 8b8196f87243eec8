package podcontrol

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// deletionCostAnnotation lets users say which pods of a set should go first on scale-down
// (lower cost first).
const deletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

// PodsToDelete chooses n of pods to delete, the cheapest to lose first. related are the
// active pods the owner's pods share nodes with (its own pods here), used to prefer pods
// doubled up on a node.
func PodsToDelete(pods, related []*corev1.Pod, n int, now time.Time) []*corev1.Pod {
	if n >= len(pods) {
		return pods
	}
	onNode := map[string]int{}
	for _, p := range related {
		if IsActive(p) {
			onNode[p.Spec.NodeName]++
		}
	}
	ranked := make([]rankedPod, len(pods))
	for i, p := range pods {
		ranked[i] = rankedPod{pod: p, colocated: onNode[p.Spec.NodeName]}
	}
	slices.SortStableFunc(ranked, func(a, b rankedPod) int { return compareForDeletion(a, b, now) })
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = ranked[i].pod
	}
	return out
}

type rankedPod struct {
	pod *corev1.Pod
	// colocated: the owner's active pods on this pod's node (its own included).
	colocated int
}

// phaseOrder: pods not yet running go before running ones; other phases count as pending.
func phaseOrder(p corev1.PodPhase) int {
	switch p {
	case corev1.PodUnknown:
		return 1
	case corev1.PodRunning:
		return 2
	}
	return 0
}

// compareForDeletion orders a before b (negative) when a is the better pod to delete. The
// criteria, in order: not scheduled; earlier phase; not ready; lower deletion cost; more of
// the owner's pods on its node; ready more recently; more container restarts; created more
// recently. Ready and creation times are compared by their power-of-two age bucket, so that
// pods of about the same age are not told apart by a few seconds (ties broken by UID).
func compareForDeletion(a, b rankedPod, now time.Time) int {
	pa, pb := a.pod, b.pod
	if (pa.Spec.NodeName == "") != (pb.Spec.NodeName == "") {
		return boolFirst(pa.Spec.NodeName == "")
	}
	if oa, ob := phaseOrder(pa.Status.Phase), phaseOrder(pb.Status.Phase); oa != ob {
		return cmp.Compare(oa, ob)
	}
	ra, rb := ReadySince(pa), ReadySince(pb)
	if ra.Ready != rb.Ready {
		return boolFirst(!ra.Ready)
	}
	if ca, cb := deletionCost(pa), deletionCost(pb); ca != cb {
		return cmp.Compare(ca, cb)
	}
	if a.colocated != b.colocated {
		return cmp.Compare(b.colocated, a.colocated)
	}
	if ra.Ready && !ra.At.Equal(rb.At) {
		if c := newerFirst(pa, pb, ra.At, rb.At, now); c != 0 {
			return c
		}
	}
	if c := compareRestarts(pa, pb); c != 0 {
		return c
	}
	ta, tb := pa.CreationTimestamp.Time, pb.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return newerFirst(pa, pb, ta, tb, now)
	}
	return 0
}

// newerFirst orders the pod with the later time ta/tb first; a zero time goes first of all.
// Times are compared by the power-of-two bucket of their age, ties broken by UID.
func newerFirst(pa, pb *corev1.Pod, ta, tb, now time.Time) int {
	if ta.IsZero() || tb.IsZero() || now.IsZero() {
		if ta.IsZero() != tb.IsZero() {
			return boolFirst(ta.IsZero())
		}
		return boolFirst(ta.After(tb))
	}
	if ba, bb := ageBucket(now.Sub(ta)), ageBucket(now.Sub(tb)); ba != bb {
		return cmp.Compare(ba, bb)
	}
	return cmp.Compare(pa.UID, pb.UID)
}

// ageBucket is floor(log2(age in ns)), -1 for no age.
func ageBucket(age time.Duration) int {
	if age <= 0 {
		return -1
	}
	return int(math.Log2(float64(age)))
}

// ReadyTime is when a pod became ready, if it is.
type ReadyTime struct {
	Ready bool
	At    time.Time
}

// ReadySince reads the pod's Ready condition.
func ReadySince(p *corev1.Pod) ReadyTime {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return ReadyTime{Ready: c.Status == corev1.ConditionTrue, At: c.LastTransitionTime.Time}
		}
	}
	return ReadyTime{}
}

func deletionCost(p *corev1.Pod) int {
	v, ok := p.Annotations[deletionCostAnnotation]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0
	}
	return int(n)
}

// compareRestarts orders the pod with more restarts of a regular container first, then the
// one with more restarts of a sidecar (an init container that keeps running).
func compareRestarts(pa, pb *corev1.Pod) int {
	ra, sa := maxRestarts(pa)
	rb, sb := maxRestarts(pb)
	if ra != rb {
		return cmp.Compare(rb, ra)
	}
	return cmp.Compare(sb, sa)
}

func maxRestarts(p *corev1.Pod) (regular, sidecar int) {
	for _, s := range p.Status.ContainerStatuses {
		regular = max(regular, int(s.RestartCount))
	}
	sidecars := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
		}
	}
	for _, s := range p.Status.InitContainerStatuses {
		if sidecars[s.Name] {
			sidecar = max(sidecar, int(s.RestartCount))
		}
	}
	return regular, sidecar
}

func boolFirst(aFirst bool) int {
	if aFirst {
		return -1
	}
	return 1
}

// IsActive reports whether a pod is neither terminating nor finished.
func IsActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}
