package statefulset

import (
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The decisions of one sync, apart from carrying them out: what the set's pods and claims are
// now decides which steps come next. With OrderedReady a sync takes at most one step that
// changes which pods exist and stops at the first pod it has to wait for; with Parallel it
// takes every step of a phase at once and goes on to the next phase unless one failed.

// stepKind is what a step does.
type stepKind int

const (
	// createPod makes the pod of an ordinal (its claims first).
	createPod stepKind = iota
	// deletePod deletes a pod: failed, scaled down, or of an old revision.
	deletePod
	// fixPod gives an existing pod what its identity needs: labels, claims, claim owners.
	fixPod
	// fixClaims sets the owner references of a scaled-down pod's claims before it goes.
	fixClaims
)

func (k stepKind) String() string {
	return [...]string{"create", "delete", "fix", "fix claims"}[k]
}

// step is one action on one ordinal's pod.
type step struct {
	kind    stepKind
	ordinal int
	// pod is the pod to make (createPod) or the existing one.
	pod *corev1.Pod
	// why says why a deletion happens, for the log and the tests.
	why string
}

func (s step) String() string { return fmt.Sprintf("%s %s (%s)", s.kind, s.pod.Name, s.why) }

// phase is a group of steps that Parallel takes at once.
type phase []step

// plan is the outcome of planning one sync.
type plan struct {
	phases []phase
	// waiting names what an OrderedReady sync stopped for ("" when it did not stop).
	waiting string
	// retry: a pod cannot be made yet for a reason no event will announce (a claim the
	// garbage collector has yet to delete): look again soon.
	retry bool
}

// steps lists every step in order.
func (p plan) steps() []step {
	var out []step
	for _, ph := range p.phases {
		out = append(out, ph...)
	}
	return out
}

// view is what planning reads: the set, its pods (members, by their names), its claims (by
// name), the templates of its current and update revisions and their names.
type view struct {
	set                        *appsv1.StatefulSet
	pods                       []*corev1.Pod
	claims                     map[string]*corev1.PersistentVolumeClaim
	current, update            *corev1.PodTemplateSpec
	currentRevision, updateRev string
	now                        time.Time
}

// slots splits the pods into those of the ordinals the set has now (one slot per ordinal from
// start, nil where the pod is missing) and those beyond (condemned, highest ordinal first).
func slots(set *appsv1.StatefulSet, pods []*corev1.Pod) (replicas, condemned []*corev1.Pod) {
	start := startOrdinal(set)
	replicas = make([]*corev1.Pod, replicas0(set))
	for _, p := range pods {
		o := ordinalOf(p)
		switch {
		case o < 0:
		case inRange(set, o):
			replicas[o-start] = p
		default:
			condemned = append(condemned, p)
		}
	}
	slices.SortFunc(condemned, func(a, b *corev1.Pod) int { return ordinalOf(b) - ordinalOf(a) })
	return replicas, condemned
}

// replicas0 is replicas, never negative.
func replicas0(set *appsv1.StatefulSet) int { return max(replicas(set), 0) }

// partition is the ordinal index below which a RollingUpdate keeps the current revision.
func partition(set *appsv1.StatefulSet) int {
	us := set.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateStatefulSetStrategyType || us.RollingUpdate == nil || us.RollingUpdate.Partition == nil {
		return 0
	}
	return int(*us.RollingUpdate.Partition)
}

// templateFor says which revision a new pod of ordinal is made from: the current one below
// the partition of a RollingUpdate, the update revision otherwise (OnDelete included: a
// deleted pod comes back updated).
func (v *view) templateFor(ordinal int) (*corev1.PodTemplateSpec, string) {
	set := v.set
	us := set.Spec.UpdateStrategy
	if us.Type == appsv1.RollingUpdateStatefulSetStrategyType {
		below := int(set.Status.CurrentReplicas) // no rollingUpdate: the pods already current stay so
		if us.RollingUpdate != nil {
			below = partition(set)
		}
		if ordinal < startOrdinal(set)+below {
			return v.current, v.currentRevision
		}
	}
	return v.update, v.updateRev
}

// needsFix: the pod lacks a label of its identity, or a claim it should have, or a claim's
// owners do not follow the retention policy.
func (v *view) needsFix(p *corev1.Pod) bool {
	if !identityMatches(v.set, p) {
		return true
	}
	o := ordinalOf(p)
	for _, t := range v.set.Spec.VolumeClaimTemplates {
		c, ok := v.claims[claimName(v.set, t.Name, o)]
		if !ok {
			return true
		}
		if _, change, _ := claimOwners(v.set, p, c); change {
			return true
		}
	}
	return false
}

// claimsNeedOwners: a claim of the pod does not have the owners the policy gives it.
func (v *view) claimsNeedOwners(p *corev1.Pod) bool {
	o := ordinalOf(p)
	for _, t := range v.set.Spec.VolumeClaimTemplates {
		if c, ok := v.claims[claimName(v.set, t.Name, o)]; ok {
			if _, change, _ := claimOwners(v.set, p, c); change {
				return true
			}
		}
	}
	return false
}

// makePlan decides the sync's steps.
func makePlan(v *view) plan {
	set := v.set
	ordered := set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement
	mrs := set.Spec.MinReadySeconds
	replicas, condemned := slots(set, v.pods)
	start := startOrdinal(set)
	var p plan
	var cur phase
	// stop ends an OrderedReady plan: after a step that changes which pods exist, or at a pod
	// it has to wait for.
	stop := func(waiting string) plan {
		p.phases = append(p.phases, cur)
		p.waiting = waiting
		return p
	}

	// Each ordinal the set has: make what is missing, replace what failed, then, in order,
	// wait for each to be running, ready and available before the next.
	for i, pod := range replicas {
		ordinal := start + i
		switch {
		case pod == nil:
			if staleClaim(set, ordinal, v.claims) {
				p.retry = true
				if ordered {
					return stop(fmt.Sprintf("a claim of %s to be deleted", podName(set, ordinal)))
				}
				continue
			}
			tmpl, rev := v.templateFor(ordinal)
			cur = append(cur, step{kind: createPod, ordinal: ordinal, pod: newPod(set, tmpl, rev, ordinal)})
			if ordered {
				return stop("")
			}
			continue
		case finished(pod):
			if !terminating(pod) {
				cur = append(cur, step{kind: deletePod, ordinal: ordinal, pod: pod, why: "pod " + string(pod.Status.Phase)})
			}
			if ordered {
				return stop(pod.Name + " to be replaced")
			}
			continue
		}
		// A pod waiting to start may be waiting for a claim someone deleted: it gets its
		// claims back before the wait.
		fixed := false
		if pod.Status.Phase == corev1.PodPending && !terminating(pod) && v.needsFix(pod) {
			cur = append(cur, step{kind: fixPod, ordinal: ordinal, pod: pod})
			fixed = true
		}
		if ordered {
			switch {
			case terminating(pod):
				return stop(pod.Name + " to terminate")
			case !runningAndReady(pod):
				return stop(pod.Name + " to be running and ready")
			case !available(pod, mrs, v.now):
				return stop(pod.Name + " to be available")
			}
		}
		if !fixed && !terminating(pod) && v.needsFix(pod) {
			cur = append(cur, step{kind: fixPod, ordinal: ordinal, pod: pod})
		}
	}
	p.phases = append(p.phases, cur)
	cur = nil

	// The claims of pods about to go get the owners that delete them with the pod, if the
	// policy says so, before the pods go.
	for _, pod := range condemned {
		if v.claimsNeedOwners(pod) {
			cur = append(cur, step{kind: fixClaims, ordinal: ordinalOf(pod), pod: pod})
		}
	}
	p.phases = append(p.phases, cur)
	cur = nil

	// Scale down, highest ordinal first. In order, one at a time, and only while every other
	// pod is healthy: the one pod that may be unhealthy is the first unavailable one (the
	// lowest ordinal), which is what a scale-down is often meant to remove.
	var firstUnavailable *corev1.Pod
	found := false
	for _, pod := range replicas {
		if pod == nil || unavailable(pod, mrs, v.now) {
			firstUnavailable, found = pod, true // nil: a missing pod, none of the condemned
			break
		}
	}
	if !found {
		for i := len(condemned) - 1; i >= 0; i-- {
			if unavailable(condemned[i], mrs, v.now) {
				firstUnavailable = condemned[i]
				break
			}
		}
	}
	for _, pod := range condemned {
		if terminating(pod) {
			if ordered {
				return stop(pod.Name + " to terminate")
			}
			continue
		}
		if ordered && pod != firstUnavailable {
			if !runningAndReady(pod) {
				return stop(pod.Name + " to be running and ready before scaling down")
			}
			if !available(pod, mrs, v.now) {
				return stop(pod.Name + " to be available before scaling down")
			}
		}
		cur = append(cur, step{kind: deletePod, ordinal: ordinalOf(pod), pod: pod, why: "scale down"})
		if ordered {
			return stop("")
		}
	}
	p.phases = append(p.phases, cur)
	cur = nil

	if set.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		return p // OnDelete: pods are replaced when someone deletes them
	}
	deletions, waiting := rollingUpdate(set, replicas, v.updateRev, v.now)
	cur = append(cur, deletions...)
	return stop(waiting)
}

// rollingUpdate picks the pods of old revisions to delete, from the highest ordinal down to
// the partition. Without maxUnavailable: one at a time, the next only once the one before is
// replaced and available. With maxUnavailable: as many as keep the unavailable pods (of all
// ordinals) within it.
func rollingUpdate(set *appsv1.StatefulSet, replicas []*corev1.Pod, updateRevision string, now time.Time) ([]step, string) {
	mrs := set.Spec.MinReadySeconds
	start := startOrdinal(set)
	low := partition(set)
	old := func(p *corev1.Pod) bool { return revisionOf(p) != updateRevision && !terminating(p) }
	ru := set.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil {
		for i := len(replicas) - 1; i >= low; i-- {
			pod := replicas[i]
			if pod == nil {
				return nil, podName(set, start+i) + " to be created"
			}
			if old(pod) {
				return []step{{kind: deletePod, ordinal: start + i, pod: pod, why: "update"}}, ""
			}
			if unavailable(pod, mrs, now) {
				return nil, pod.Name + " to be updated and available"
			}
		}
		return nil, ""
	}
	maxUnavailable := maxUnavailableOf(ru.MaxUnavailable, len(replicas))
	down := 0
	for _, pod := range replicas {
		if pod == nil || unavailable(pod, mrs, now) {
			down++
		}
	}
	if down >= maxUnavailable {
		return nil, fmt.Sprintf("%d unavailable pods (maxUnavailable %d)", down, maxUnavailable)
	}
	// Every deletion spends the budget, even of a pod already unavailable, as in Kubernetes:
	// its replacement is unavailable until it is ready.
	var out []step
	for i := len(replicas) - 1; i >= low && len(out) < maxUnavailable-down; i-- {
		if pod := replicas[i]; pod != nil && old(pod) {
			out = append(out, step{kind: deletePod, ordinal: start + i, pod: pod, why: "update"})
		}
	}
	return out, ""
}

// maxUnavailableOf scales maxUnavailable to the replicas, rounding a percentage down but
// never below 1, so that a rollout always makes progress.
func maxUnavailableOf(v *intstr.IntOrString, replicas int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(v, intstr.FromInt32(1)), replicas, false)
	if err != nil {
		return 1
	}
	return max(n, 1)
}
