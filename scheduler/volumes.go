package scheduler

import (
	"cmp"
	"fmt"
	"github.com/kplane/kplane/internal/placement"
	"slices"

	"github.com/kplane/kplane/internal/pv"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Volume binding, as Kubernetes' VolumeBinding plugin does it for one scheduler: a pod whose
// claims cannot bind waits; a bound claim's volume restricts the pod to the nodes it reaches;
// an unbound claim of a WaitForFirstConsumer class is bound once a node is chosen, to an
// Available volume reachable from it, or else provisioned there (the claim gets the
// volume.kubernetes.io/selected-node annotation). The pod itself is bound to its node only
// once all its claims are bound.

// Reasons a node does not fit a pod's volumes, Kubernetes' words.
const (
	reasonBindConflict = "node(s) didn't find available persistent volumes to bind"
	reasonNodeConflict = "node(s) didn't match PersistentVolume's node affinity"
	reasonPVNotExist   = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
	// msgUnboundImmediate is the whole-pod reason (not per node) for claims the binder has yet
	// to bind.
	msgUnboundImmediate = "pod has unbound immediate PersistentVolumeClaims"
)

// volumeLookup is what the volume checks read: the scheduler's informers, or test data.
type volumeLookup interface {
	Claim(ns, name string) *corev1.PersistentVolumeClaim
	Volume(name string) *corev1.PersistentVolume
	Volumes() []*corev1.PersistentVolume
	Class(name string) *storagev1.StorageClass
}

// podClaims are a pod's claims, sorted out for scheduling.
type podClaims struct {
	// bound are the claims bound for good (volumeName and bind-completed), delayed the unbound
	// claims of WaitForFirstConsumer classes, which this scheduler binds.
	bound, delayed []*corev1.PersistentVolumeClaim
}

// claimsOf sorts the claims of pod out. A non-empty reason means the pod cannot be scheduled
// anywhere for now: a claim is missing, lost, being deleted, or waits for the binder.
func claimsOf(pod *corev1.Pod, l volumeLookup) (podClaims, string) {
	var pc podClaims
	immediate := false
	for _, name := range pv.ClaimNames(pod) {
		claim := l.Claim(pod.Namespace, name)
		switch {
		case claim == nil:
			return pc, fmt.Sprintf("persistentvolumeclaim %q not found", name)
		case claim.Status.Phase == corev1.ClaimLost:
			return pc, fmt.Sprintf("persistentvolumeclaim %q bound to non-existent persistentvolume %q", claim.Name, claim.Spec.VolumeName)
		case claim.DeletionTimestamp != nil:
			return pc, fmt.Sprintf("persistentvolumeclaim %q is being deleted", claim.Name)
		case claim.Spec.VolumeName != "" && metav1.HasAnnotation(claim.ObjectMeta, pv.AnnBindCompleted):
			pc.bound = append(pc.bound, claim)
		case claim.Spec.VolumeName == "" && pv.WaitsForFirstConsumer(l.Class(pv.ClaimClass(claim))):
			pc.delayed = append(pc.delayed, claim)
		default:
			// Immediate binding, or pre-bound to a volume by name: the binder's job.
			immediate = true
		}
	}
	if immediate {
		return pc, msgUnboundImmediate
	}
	return pc, ""
}

// volumePlan is what placing a pod on a node takes for its delayed claims.
type volumePlan struct {
	// bind pairs each claim with the Available volume it gets (the volume's claimRef is set).
	bind []claimVolume
	// provision are the claims to be provisioned on the node (the selected-node annotation).
	provision []*corev1.PersistentVolumeClaim
}

type claimVolume struct {
	claim  *corev1.PersistentVolumeClaim
	volume *corev1.PersistentVolume
}

// volumesFit checks the pod's claims against node: the reasons it does not fit (none when it
// does), and what its delayed claims need there. Claims are matched smallest request first, and
// no volume is given to two claims. A claim whose provisioning has started on an existing node
// (selectedNodes) keeps the pod to that node.
func volumesFit(pc podClaims, node *corev1.Node, l volumeLookup, nodeExists func(string) bool) ([]string, volumePlan) {
	var reasons []string
	add := func(r string) {
		if !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	reachable := func(v *corev1.PersistentVolume) bool { return VolumeReachable(v, node) }
	for _, claim := range pc.bound {
		v := l.Volume(claim.Spec.VolumeName)
		switch {
		case v == nil:
			add(reasonPVNotExist)
		case !reachable(v):
			add(reasonNodeConflict)
		}
	}
	var plan volumePlan
	delayed := slices.SortedFunc(slices.Values(pc.delayed), func(a, b *corev1.PersistentVolumeClaim) int {
		qa, qb := a.Spec.Resources.Requests[corev1.ResourceStorage], b.Spec.Resources.Requests[corev1.ResourceStorage]
		return cmp.Or(qa.Cmp(qb), cmp.Compare(a.Name, b.Name))
	})
	chosen := map[string]bool{}
	for _, claim := range delayed {
		if sel, ok := claim.Annotations[pv.AnnSelectedNode]; ok && sel != node.Name && nodeExists(sel) {
			add(reasonBindConflict)
			continue
		}
		v, err := pv.Match(claim, l.Volumes(), reachable, chosen, true)
		if err == nil && v != nil {
			chosen[v.Name] = true
			plan.bind = append(plan.bind, claimVolume{claim, v})
			continue
		}
		if class := l.Class(pv.ClaimClass(claim)); class != nil && class.Provisioner != "" && class.Provisioner != pv.NoProvisioner &&
			topologyAllows(class.AllowedTopologies, node) {
			plan.provision = append(plan.provision, claim)
			continue
		}
		add(reasonBindConflict)
	}
	return reasons, plan
}

// VolumeReachable reports whether a pod on node can use volume v: v has no node affinity, or
// node matches it.
func VolumeReachable(v *corev1.PersistentVolume, node *corev1.Node) bool {
	a := v.Spec.NodeAffinity
	return a == nil || a.Required == nil || placement.MatchNodeSelector(a.Required, node)
}

// topologyAllows reports whether a class's allowedTopologies (none: everywhere) admit node.
func topologyAllows(terms []corev1.TopologySelectorTerm, node *corev1.Node) bool {
	if len(terms) == 0 {
		return true
	}
	return slices.ContainsFunc(terms, func(t corev1.TopologySelectorTerm) bool {
		for _, e := range t.MatchLabelExpressions {
			if v, ok := node.Labels[e.Key]; !ok || !slices.Contains(e.Values, v) {
				return false
			}
		}
		return true
	})
}
