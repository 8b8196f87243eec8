package statefulset

import (
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/kplane/kplane/controller/podcontrol"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A StatefulSet's pods have stable identities: the pod of ordinal i is named <set>-<i>, has
// that name as its hostname and the set's service as its subdomain, carries its name and
// index as labels, and mounts the claims <template>-<set>-<i>, which outlive it. Ordinals run
// from spec.ordinals.start for spec.replicas.

var podKind = corev1.SchemeGroupVersion.WithKind("Pod")

// startOrdinal is the first ordinal of the set's pods.
func startOrdinal(set *appsv1.StatefulSet) int {
	if set.Spec.Ordinals != nil {
		return int(set.Spec.Ordinals.Start)
	}
	return 0
}

// replicas is spec.replicas (defaulted to 1 by the API server; 1 if a client bypassed it).
func replicas(set *appsv1.StatefulSet) int {
	if set.Spec.Replicas == nil {
		return 1
	}
	return int(*set.Spec.Replicas)
}

// inRange reports whether ordinal belongs to the set as it is now sized: [start, start+replicas).
func inRange(set *appsv1.StatefulSet, ordinal int) bool {
	start := startOrdinal(set)
	return ordinal >= start && ordinal < start+replicas(set)
}

func podName(set *appsv1.StatefulSet, ordinal int) string {
	return set.Name + "-" + strconv.Itoa(ordinal)
}

func claimName(set *appsv1.StatefulSet, template string, ordinal int) string {
	return template + "-" + set.Name + "-" + strconv.Itoa(ordinal)
}

// parseName splits a pod name into its set's name and ordinal; ok is false for names that
// are not <parent>-<ordinal>. Only the canonical spelling of an ordinal counts ("web-01" is
// no member of web: the controller could never rename it to "web-1").
func parseName(name string) (parent string, ordinal int, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || i == len(name)-1 {
		return "", -1, false
	}
	digits := name[i+1:]
	n, err := strconv.ParseInt(digits, 10, 32)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != digits {
		return "", -1, false
	}
	return name[:i], int(n), true
}

// ordinalOf is the pod's ordinal, -1 for a name without one.
func ordinalOf(p *corev1.Pod) int {
	_, o, ok := parseName(p.Name)
	if !ok {
		return -1
	}
	return o
}

// isMember: the pod's name says it is one of the set's.
func isMember(set *appsv1.StatefulSet, p *corev1.Pod) bool {
	parent, _, ok := parseName(p.Name)
	return ok && parent == set.Name
}

// identityMatches: the pod carries the labels of its identity.
func identityMatches(set *appsv1.StatefulSet, p *corev1.Pod) bool {
	o := ordinalOf(p)
	return o >= 0 && p.Name == podName(set, o) && p.Namespace == set.Namespace &&
		p.Labels[appsv1.StatefulSetPodNameLabel] == p.Name && p.Labels[appsv1.PodIndexLabel] == strconv.Itoa(o)
}

// revisionOf is the name of the revision the pod was made from.
func revisionOf(p *corev1.Pod) string { return p.Labels[appsv1.StatefulSetRevisionLabel] }

// newPod is the pod of ordinal made from tmpl (the template of revision), with its identity
// and its claims' volumes.
func newPod(set *appsv1.StatefulSet, tmpl *corev1.PodTemplateSpec, revision string, ordinal int) *corev1.Pod {
	p := podcontrol.NewPod(set, Kind, tmpl, "")
	p.Name = podName(set, ordinal)
	p.Labels = withIdentity(p.Labels, p.Name, ordinal)
	p.Labels[appsv1.StatefulSetRevisionLabel] = revision
	p.Spec.Hostname, p.Spec.Subdomain = p.Name, set.Spec.ServiceName
	p.Spec.Volumes = claimVolumes(set, ordinal, p.Spec.Volumes)
	return p
}

// withIdentity returns labels with the pod's name and index set (a copy).
func withIdentity(labels map[string]string, name string, ordinal int) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[appsv1.StatefulSetPodNameLabel] = name
	out[appsv1.PodIndexLabel] = strconv.Itoa(ordinal)
	return out
}

// claimVolumes puts a volume for each claim template first, in the templates' order, then the
// template's own volumes that no claim template replaces.
func claimVolumes(set *appsv1.StatefulSet, ordinal int, volumes []corev1.Volume) []corev1.Volume {
	templates := set.Spec.VolumeClaimTemplates
	out := make([]corev1.Volume, 0, len(templates)+len(volumes))
	claimed := map[string]bool{}
	for _, t := range templates {
		if claimed[t.Name] {
			continue
		}
		claimed[t.Name] = true
		out = append(out, corev1.Volume{Name: t.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(set, t.Name, ordinal)}}})
	}
	for _, v := range volumes {
		if !claimed[v.Name] {
			out = append(out, v)
		}
	}
	return out
}

// newClaim is the claim of template for the pod of ordinal: labelled with the template's
// labels and the set's matchLabels; its owners are set by the retention policy (claimOwners).
func newClaim(set *appsv1.StatefulSet, template *corev1.PersistentVolumeClaim, ordinal int) *corev1.PersistentVolumeClaim {
	c := template.DeepCopy()
	c.Name, c.Namespace = claimName(set, template.Name, ordinal), set.Namespace
	c.Labels = maps.Clone(c.Labels)
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	if set.Spec.Selector != nil {
		maps.Copy(c.Labels, set.Spec.Selector.MatchLabels)
	}
	c.Status = corev1.PersistentVolumeClaimStatus{}
	c.ResourceVersion, c.UID = "", ""
	return c
}

// retention is the set's claim retention policy, Retain for what is not set.
func retention(set *appsv1.StatefulSet) appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	p := appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
		WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
	}
	if rp := set.Spec.PersistentVolumeClaimRetentionPolicy; rp != nil {
		if rp.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			p.WhenDeleted = rp.WhenDeleted
		}
		if rp.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			p.WhenScaled = rp.WhenScaled
		}
	}
	return p
}

// refersTo: ref names obj of kind gvk, whatever its UID.
func refersTo(ref metav1.OwnerReference, gvk schema.GroupVersionKind, name string) bool {
	return ref.APIVersion == gvk.GroupVersion().String() && ref.Kind == gvk.Kind && ref.Name == name
}

// claimOwners returns the owner references the claim should have under the set's retention
// policy for the pod (which may not exist yet: uid empty), and whether they differ from what
// it has. The garbage collector does the deleting: an owner reference to the set deletes the
// claim with the set (whenDeleted: Delete), one to the pod deletes it with the pod of a
// scaled-down ordinal (whenScaled: Delete).
//
// A claim left alone: one with a reference to an earlier set or pod of the same name (the
// collector is about to act on it), and, unless the policy is Retain for both, one another
// controller owns (only the set's and pod's references are taken off it). conflict reports
// the latter, which the caller tells the user about.
func claimOwners(set *appsv1.StatefulSet, pod *corev1.Pod, claim *corev1.PersistentVolumeClaim) (refs []metav1.OwnerReference, change, conflict bool) {
	have := claim.OwnerReferences
	for _, r := range have {
		if (refersTo(r, Kind, set.Name) && r.UID != set.UID) || (refersTo(r, podKind, pod.Name) && r.UID != pod.UID) {
			return have, false, false
		}
	}
	policy := retention(set)
	retainAll := policy.WhenDeleted == appsv1.RetainPersistentVolumeClaimRetentionPolicyType &&
		policy.WhenScaled == appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	ours := func(r metav1.OwnerReference) bool {
		return refersTo(r, Kind, set.Name) || refersTo(r, podKind, pod.Name)
	}
	for _, r := range have {
		if !retainAll && !ours(r) && r.Controller != nil && *r.Controller {
			conflict = true
		}
	}
	for _, r := range have {
		if !ours(r) {
			refs = append(refs, r)
		}
	}
	if !conflict {
		scaledDown := !inRange(set, ordinalOf(pod))
		if policy.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType && (!scaledDown || policy.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType) {
			refs = append(refs, podcontrol.ControllerRef(set, Kind))
		}
		if policy.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType && scaledDown && pod.UID != "" {
			refs = append(refs, podcontrol.ControllerRef(pod, podKind))
		}
	}
	return refs, !sameRefs(have, refs), conflict
}

// sameRefs compares owner references as sets, by UID and whether they control.
func sameRefs(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(r metav1.OwnerReference) string {
		return string(r.UID) + "/" + strconv.FormatBool(r.Controller != nil && *r.Controller)
	}
	seen := map[string]int{}
	for _, r := range a {
		seen[key(r)]++
	}
	for _, r := range b {
		seen[key(r)]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// staleClaim: a claim the pod about to be made would use still belongs to an earlier pod of
// that name, whose deletion the garbage collector has yet to follow by deleting the claim
// (whenScaled: Delete). Making the pod now would give it a claim about to go.
func staleClaim(set *appsv1.StatefulSet, ordinal int, claims map[string]*corev1.PersistentVolumeClaim) bool {
	if retention(set).WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		return false
	}
	name := podName(set, ordinal)
	for _, t := range set.Spec.VolumeClaimTemplates {
		c, ok := claims[claimName(set, t.Name, ordinal)]
		if !ok {
			continue
		}
		for _, r := range c.OwnerReferences {
			if refersTo(r, podKind, name) {
				return true
			}
		}
	}
	return false
}

// Pod states, as the controller's decisions read them.

func created(p *corev1.Pod) bool     { return p.Status.Phase != "" }
func terminating(p *corev1.Pod) bool { return p.DeletionTimestamp != nil }
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

func runningAndReady(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && podcontrol.ReadySince(p).Ready
}

// available: ready for more than minReadySeconds.
func available(p *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	r := podcontrol.ReadySince(p)
	if !r.Ready {
		return false
	}
	return minReadySeconds == 0 || (!r.At.IsZero() && r.At.Add(time.Duration(minReadySeconds)*time.Second).Before(now))
}

func unavailable(p *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	return terminating(p) || !available(p, minReadySeconds, now)
}
