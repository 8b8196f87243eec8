package deployment

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Annotations and labels the controller writes, with Kubernetes' names so that kubectl
// (rollout history, rollout undo) reads them.
const (
	RevisionAnnotation        = "deployment.kubernetes.io/revision"
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	MaxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"
	HashLabel                 = appsv1.DefaultDeploymentUniqueLabelKey // "pod-template-hash"
)

// TemplateHash returns a short, name-safe hash of the pod template, varied by the collision
// count so that a name clash can be escaped. It depends only on the template's content.
func TemplateHash(tmpl *corev1.PodTemplateSpec, collisions *int32) string {
	h := fnv.New32a()
	data, err := json.Marshal(tmpl)
	if err != nil {
		// A template that came from the API always encodes; fall back to its printed form.
		data = fmt.Appendf(nil, "%#v", tmpl)
	}
	h.Write(data)
	if collisions != nil {
		h.Write(strconv.AppendInt(nil, int64(*collisions), 10))
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// sameTemplate reports whether two pod templates are equal apart from the hash label.
func sameTemplate(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, HashLabel)
	delete(b.Labels, HashLabel)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// withLabel returns a copy of m with k=v added.
func withLabel(m map[string]string, k, v string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	out[k] = v
	return out
}

// revision reads a ReplicaSet's revision annotation (0 when absent or bad).
func revision(rs *appsv1.ReplicaSet) int64 {
	v, err := strconv.ParseInt(rs.Annotations[RevisionAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// maxRevision is the highest revision among rss.
func maxRevision(rss []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rss {
		m = max(m, revision(rs))
	}
	return m
}

// nextRevision is the revision a (new or revived) current ReplicaSet takes: one above every
// old one's.
func nextRevision(old []*appsv1.ReplicaSet) int64 { return maxRevision(old) + 1 }

// resolveBounds turns maxSurge and maxUnavailable into pod counts for replicas: a surge
// percentage rounds up, an unavailable one down, and when both come out zero one pod may be
// unavailable, or the rollout could never start.
func resolveBounds(surge, unavailable *intstr.IntOrString, replicas int32) (int32, int32, error) {
	s, err := scaled(surge, replicas, true)
	if err != nil {
		return 0, 0, fmt.Errorf("maxSurge: %w", err)
	}
	u, err := scaled(unavailable, replicas, false)
	if err != nil {
		return 0, 0, fmt.Errorf("maxUnavailable: %w", err)
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return s, u, nil
}

func scaled(v *intstr.IntOrString, total int32, up bool) (int32, error) {
	if v == nil {
		return 0, nil
	}
	if v.Type == intstr.Int {
		return max(v.IntVal, 0), nil
	}
	s := v.StrVal
	if len(s) == 0 || s[len(s)-1] != '%' {
		return 0, fmt.Errorf("%q is neither a number nor a percentage", s)
	}
	pct, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || pct < 0 {
		return 0, fmt.Errorf("%q is not a valid percentage", s)
	}
	f := float64(pct) * float64(total) / 100
	if up {
		return int32(math.Ceil(f)), nil
	}
	return int32(math.Floor(f)), nil
}

// bounds returns the deployment's surge and unavailability in pods; Recreate has neither.
func bounds(d *appsv1.Deployment) (surge, unavailable int32, err error) {
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil {
		return 0, 0, nil
	}
	return resolveBounds(ru.MaxSurge, ru.MaxUnavailable, replicasOf(d))
}

func replicasOf(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func rsReplicas(rs *appsv1.ReplicaSet) int32 {
	if rs == nil {
		return 0
	}
	if rs.Spec.Replicas == nil {
		return 1
	}
	return *rs.Spec.Replicas
}

// specTotal sums the ReplicaSets' spec.replicas.
func specTotal(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		n += rsReplicas(rs)
	}
	return n
}

// scaleUpTarget is the new ReplicaSet's next size in a rolling update: toward replicas, but
// keeping every ReplicaSet's pods together within replicas+surge. all includes newRS.
//
// Each ReplicaSet counts as the larger of its size and the pods its status still reports.
// Kubernetes counts sizes only, so a new pod may be created before the old one a scale-down
// asked to delete is gone; waiting for the status makes replicas+surge a bound on pods.
func scaleUpTarget(replicas, surge int32, newRS *appsv1.ReplicaSet, all []*appsv1.ReplicaSet) int32 {
	cur := rsReplicas(newRS)
	if cur >= replicas {
		return replicas
	}
	var total int32
	for _, rs := range all {
		total += max(rsReplicas(rs), rs.Status.Replicas)
	}
	room := replicas + surge - total
	if room <= 0 {
		return cur
	}
	return min(cur+room, replicas)
}

// scaleDownPlan says how far to scale each old ReplicaSet (by index in old, ordered oldest
// first) in one rolling-update step: first away from pods that are not available (they do
// not count toward availability), then available ones as far as replicas-unavailable
// allows. Only ReplicaSets whose size changes appear in the result.
func scaleDownPlan(replicas, unavailable int32, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) map[int]int32 {
	all := append(slices.Clone(old), newRS)
	minAvailable := replicas - unavailable
	newUnavailable := rsReplicas(newRS) - availableOf(newRS)
	budget := specTotal(all) - minAvailable - newUnavailable
	plan := map[int]int32{}
	size := func(i int) int32 {
		if n, ok := plan[i]; ok {
			return n
		}
		return rsReplicas(old[i])
	}
	if budget <= 0 {
		return plan
	}
	// Pods not available cost no availability to remove.
	for i, rs := range old {
		if budget <= 0 {
			break
		}
		extra := size(i) - availableOf(rs)
		if extra <= 0 {
			continue
		}
		n := min(extra, budget)
		plan[i] = size(i) - n
		budget -= n
	}
	// Then available pods, down to the minimum.
	var avail int32
	for _, rs := range all {
		avail += availableOf(rs)
	}
	room := avail - minAvailable
	for i := range old {
		if room <= 0 {
			break
		}
		n := min(size(i), room)
		if n <= 0 {
			continue
		}
		plan[i] = size(i) - n
		room -= n
	}
	return plan
}

func availableOf(rs *appsv1.ReplicaSet) int32 {
	if rs == nil {
		return 0
	}
	return rs.Status.AvailableReplicas
}

// byRevision orders ReplicaSets oldest first: by revision, then creation time, then name.
func byRevision(a, b *appsv1.ReplicaSet) int {
	if ra, rb := revision(a), revision(b); ra != rb {
		if ra < rb {
			return -1
		}
		return 1
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		if a.CreationTimestamp.Before(&b.CreationTimestamp) {
			return -1
		}
		return 1
	}
	if a.Name < b.Name {
		return -1
	}
	if a.Name > b.Name {
		return 1
	}
	return 0
}

// toPrune returns the old ReplicaSets to delete to keep at most limit of them: the oldest
// that are fully scaled down and whose status has caught up.
func toPrune(old []*appsv1.ReplicaSet, limit int32) []*appsv1.ReplicaSet {
	var live []*appsv1.ReplicaSet
	for _, rs := range old {
		if rs.DeletionTimestamp == nil {
			live = append(live, rs)
		}
	}
	extra := len(live) - int(max(limit, 0))
	if extra <= 0 {
		return nil
	}
	slices.SortFunc(live, byRevision)
	var out []*appsv1.ReplicaSet
	for _, rs := range live {
		if len(out) == extra {
			break
		}
		if rsReplicas(rs) != 0 || rs.Status.Replicas != 0 || rs.Status.ObservedGeneration < rs.Generation {
			continue
		}
		out = append(out, rs)
	}
	return out
}
