package persistentvolume

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kplane/kplane/internal/pv"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// world is what a decision may look at besides the object being synced: the informers' view in
// the controller, plain slices in tests. Lookups return nil for what does not exist.
type world interface {
	Volume(name string) *corev1.PersistentVolume
	Volumes() []*corev1.PersistentVolume
	Class(name string) *storagev1.StorageClass
	Classes() []*storagev1.StorageClass
	// PodsUsing returns the pods of namespace ns whose volumes use the claim named claim.
	PodsUsing(ns, claim string) []*corev1.Pod
	// Pod returns one pod (the recycler of a volume).
	Pod(ns, name string) *corev1.Pod
	// RecycleWaiting reports whether the volume's last recycling failed too recently for
	// another attempt (the controller's backoff).
	RecycleWaiting(volume string) bool
}

// event is an Event to record about the volume or the claim of a plan.
type event struct {
	onClaim         bool
	eventType       string
	reason, message string
}

// plan is what one sync decided. The writes happen in this order, each on the result of the
// one before, and stop at the first failure (the next sync decides again from what was
// written): the volume (spec and metadata), its status, the claim (spec and metadata), its
// status. Events are recorded once every write succeeded.
type plan struct {
	// target is the volume the writes are about when the sync is a claim's (the one bound).
	target       *corev1.PersistentVolume
	volume       *corev1.PersistentVolume
	volumeStatus *corev1.PersistentVolumeStatus
	claim        *corev1.PersistentVolumeClaim
	claimStatus  *corev1.PersistentVolumeClaimStatus
	events       []event
	// syncClaim names a claim ("ns/name") to sync soon: the volume side is done, the claim's
	// side follows.
	syncClaim string
	// recycler is a recycler pod to create, deleteRecycler one to delete (after the writes).
	recycler       *corev1.Pod
	deleteRecycler *corev1.Pod
	// recycled and recycleFailed: the volume's recycling ended, well or not; after a failure
	// the next attempt waits (backoff).
	recycled, recycleFailed bool
	// err is an inconsistency the sync reports (after the writes), so that it is retried.
	err error
}

func (p *plan) event(onClaim bool, eventType, reason, message string) {
	p.events = append(p.events, event{onClaim, eventType, reason, message})
}

// Event reasons, Kubernetes' names.
const (
	reasonFailedBinding        = "FailedBinding"
	reasonVolumeMismatch       = "VolumeMismatch"
	reasonWaitForFirstConsumer = "WaitForFirstConsumer"
	reasonWaitForPodScheduled  = "WaitForPodScheduled"
	reasonExternalProvisioning = "ExternalProvisioning"
	reasonProvisioningFailed   = "ProvisioningFailed"
	reasonVolumeFailedDelete   = "VolumeFailedDelete"
	reasonVolumeFailedRecycle  = "VolumeFailedRecycle"
	reasonVolumeRecycled       = "VolumeRecycled"
	reasonUnknownReclaimPolicy = "VolumeUnknownReclaimPolicy"
)

// syncClaim decides what to do about claim. It is a pure function of its arguments.
func syncClaim(claim *corev1.PersistentVolumeClaim, w world) plan {
	if !metav1.HasAnnotation(claim.ObjectMeta, pv.AnnBindCompleted) {
		return syncUnboundClaim(claim, w)
	}
	return syncBoundClaim(claim, w)
}

func syncUnboundClaim(claim *corev1.PersistentVolumeClaim, w world) plan {
	if claim.Spec.VolumeName == "" {
		// The claim takes whatever volume fits.
		class := w.Class(pv.ClaimClass(claim))
		delay := pv.WaitsForFirstConsumer(class)
		volume, err := pv.Match(claim, w.Volumes(), nil, nil, delay)
		if err != nil {
			return plan{err: fmt.Errorf("error finding PV for claim %q: %w", claimKey(claim), err)}
		}
		if volume != nil {
			return bind(volume, claim)
		}
		// No volume: give the claim the default class if it has none (it may have been created
		// before the default existed), else ask for one to be provisioned.
		if !pv.ClaimHasClass(claim) {
			if def := pv.DefaultClass(w.Classes()); def != nil {
				c := claim.DeepCopy()
				c.Spec.StorageClassName = new(def.Name)
				return plan{claim: c}
			}
		}
		var p plan
		switch {
		case delay && !metav1.HasAnnotation(claim.ObjectMeta, pv.AnnSelectedNode):
			// No pod using the claim has been scheduled yet.
			reason, msg := reasonWaitForFirstConsumer, "waiting for first consumer to be created before binding"
			if waiting := unscheduledPods(w.PodsUsing(claim.Namespace, claim.Name)); len(waiting) == 1 {
				reason, msg = reasonWaitForPodScheduled, fmt.Sprintf("waiting for pod %s to be scheduled", waiting[0])
			} else if len(waiting) > 1 {
				reason, msg = reasonWaitForPodScheduled, fmt.Sprintf("waiting for pods %s to be scheduled", strings.Join(waiting, ","))
			}
			p.event(true, corev1.EventTypeNormal, reason, msg)
		case pv.ClaimClass(claim) != "":
			// Provisioning writes the claim's annotations only; its status stays as it is.
			return provision(claim, class)
		default:
			p.event(true, corev1.EventTypeNormal, reasonFailedBinding, "no persistent volumes available for this claim and no storage class is set")
		}
		p.claimStatus = claimStatus(claim, corev1.ClaimPending, nil)
		return p
	}

	// The claim asks for one volume by name.
	volume := w.Volume(claim.Spec.VolumeName)
	switch {
	case volume == nil:
		// It may be created later.
		return plan{claimStatus: claimStatus(claim, corev1.ClaimPending, nil)}
	case volume.Spec.ClaimRef == nil:
		if why := pv.Unsuitable(volume, claim); why != "" {
			p := plan{claimStatus: claimStatus(claim, corev1.ClaimPending, nil)}
			p.event(true, corev1.EventTypeWarning, reasonVolumeMismatch, fmt.Sprintf("Cannot bind to requested volume %q: %s", volume.Name, why))
			return p
		}
		return bind(volume, claim)
	case pv.IsBoundToClaim(volume, claim):
		// The volume was bound (or pre-bound) to this claim: finish the binding.
		return bind(volume, claim)
	}
	p := plan{}
	p.event(true, corev1.EventTypeWarning, reasonFailedBinding, fmt.Sprintf("volume %q already bound to a different claim.", volume.Name))
	if metav1.HasAnnotation(claim.ObjectMeta, pv.AnnBoundByController) {
		// Only a user removing bind-completed gets here: report it, loudly.
		p.err = fmt.Errorf("invalid binding of claim %q to volume %q: volume already claimed by %q", claimKey(claim), volume.Name,
			volume.Spec.ClaimRef.Namespace+"/"+volume.Spec.ClaimRef.Name)
		return p
	}
	p.claimStatus = claimStatus(claim, corev1.ClaimPending, nil)
	return p
}

func syncBoundClaim(claim *corev1.PersistentVolumeClaim, w world) plan {
	lost := func(reason, msg string) plan {
		if claim.Status.Phase == corev1.ClaimLost {
			return plan{}
		}
		p := plan{claimStatus: claimStatus(claim, corev1.ClaimLost, nil)}
		p.event(true, corev1.EventTypeWarning, reason, msg)
		return p
	}
	if claim.Spec.VolumeName == "" {
		return lost("ClaimLost", "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!")
	}
	volume := w.Volume(claim.Spec.VolumeName)
	switch {
	case volume == nil:
		return lost("ClaimLost", "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
	case volume.Spec.ClaimRef == nil, volume.Spec.ClaimRef.UID == claim.UID:
		// Unbound behind our back, or the volume side not seen yet: (re)bind; mostly a no-op.
		return bind(volume, claim)
	}
	return lost("ClaimMisbound", "Two claims are bound to the same volume, this one is bound incorrectly")
}

// bind binds volume and claim to each other: the volume's claimRef and phase first, then the
// claim's volumeName, annotations and status.
func bind(volume *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) plan {
	p := plan{target: volume}
	v := volume
	if ref := volume.Spec.ClaimRef; ref == nil || ref.Name != claim.Name || ref.Namespace != claim.Namespace || ref.UID != claim.UID {
		v = volume.DeepCopy()
		v.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claim.Namespace,
			Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion}
		if !pv.IsBoundToClaim(volume, claim) {
			metav1.SetMetaDataAnnotation(&v.ObjectMeta, pv.AnnBoundByController, "yes")
		}
		p.volume = v
	}
	p.volumeStatus = volumeStatus(v, corev1.VolumeBound, "")

	c := claim.DeepCopy()
	if c.Spec.VolumeName != volume.Name {
		c.Spec.VolumeName = volume.Name
		if !metav1.HasAnnotation(c.ObjectMeta, pv.AnnBoundByController) {
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, pv.AnnBoundByController, "yes")
		}
	}
	if !metav1.HasAnnotation(c.ObjectMeta, pv.AnnBindCompleted) {
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, pv.AnnBindCompleted, "yes")
	}
	if !apiequality.Semantic.DeepEqual(c.ObjectMeta, claim.ObjectMeta) || c.Spec.VolumeName != claim.Spec.VolumeName {
		p.claim = c
	}
	p.claimStatus = claimStatus(claim, corev1.ClaimBound, v)
	return p
}

// provision asks for a volume for claim from its class's provisioner: an external one (any
// provisioner outside kubernetes.io/, whose in-tree plugins kplane does not have) is told
// through the claim's annotations and takes it from there.
func provision(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) plan {
	var p plan
	switch {
	case class == nil:
		p.event(true, corev1.EventTypeWarning, reasonProvisioningFailed, fmt.Sprintf("storageclass.storage.k8s.io %q not found", pv.ClaimClass(claim)))
		return p
	case strings.HasPrefix(class.Provisioner, "kubernetes.io/"):
		p.event(true, corev1.EventTypeWarning, reasonProvisioningFailed, "no volume plugin matched name: "+class.Provisioner)
		return p
	}
	if claim.Annotations[pv.AnnStorageProvisioner] != class.Provisioner {
		c := claim.DeepCopy()
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, pv.AnnBetaStorageProvisioner, class.Provisioner)
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, pv.AnnStorageProvisioner, class.Provisioner)
		p.claim = c
	}
	p.event(true, corev1.EventTypeNormal, reasonExternalProvisioning, fmt.Sprintf("Waiting for a volume to be created either by the external provisioner '%s' "+
		"or manually by the system administrator. If volume creation is delayed, please verify that "+
		"the provisioner is running and correctly registered.", class.Provisioner))
	return p
}

// claimStatus is claim's status in phase; volume (nil when unbound) gives the access modes and,
// when the claim becomes bound, the capacity. Nil means no change.
func claimStatus(claim *corev1.PersistentVolumeClaim, phase corev1.PersistentVolumeClaimPhase, volume *corev1.PersistentVolume) *corev1.PersistentVolumeClaimStatus {
	s := claim.Status.DeepCopy()
	s.Phase = phase
	if volume == nil {
		s.AccessModes, s.Capacity, s.CurrentVolumeAttributesClassName = nil, nil, nil
	} else {
		s.AccessModes = slices.Clone(volume.Spec.AccessModes)
		// The capacity is taken when the claim becomes bound, not after: it may differ on
		// purpose later (a filesystem smaller than its block device, an expansion).
		if claim.Status.Phase != phase {
			if q, ok := volume.Spec.Capacity[corev1.ResourceStorage]; ok {
				if cur, has := s.Capacity[corev1.ResourceStorage]; !has || cur.Cmp(q) != 0 {
					s.Capacity = maps.Clone(volume.Spec.Capacity)
				}
			}
			if claim.Status.Phase == corev1.ClaimPending && phase == corev1.ClaimBound {
				s.CurrentVolumeAttributesClassName = volume.Spec.VolumeAttributesClassName
			}
		}
	}
	if apiequality.Semantic.DeepEqual(s, &claim.Status) {
		return nil
	}
	return s
}

// volumeStatus is volume's status in phase with message; nil when that is what it has.
func volumeStatus(volume *corev1.PersistentVolume, phase corev1.PersistentVolumePhase, message string) *corev1.PersistentVolumeStatus {
	if volume.Status.Phase == phase {
		return nil
	}
	s := volume.Status.DeepCopy()
	s.Phase, s.Message = phase, message
	// The API server stamps the transition; an old time sent along would be kept.
	s.LastPhaseTransitionTime = nil
	return s
}

// syncVolume decides what to do about volume. claim is the claim its claimRef names as the
// caller found it (nil: gone, or no claimRef), after making sure a missing or replaced claim
// is not just missing from a stale cache.
func syncVolume(volume *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, w world) plan {
	ref := volume.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		// Unused, or pre-bound to a claim that the claim's sync will bind.
		return plan{volumeStatus: volumeStatus(volume, corev1.VolumeAvailable, "")}
	}
	if claim != nil && claim.UID != ref.UID {
		claim = nil // the claim was deleted and another made under its name
	}
	switch {
	case claim == nil:
		// The claim is gone: release the volume and reclaim it by its policy. A Failed volume
		// keeps its phase while the reclaim is tried again, so users see something went wrong.
		return reclaim(volume, w)
	case claim.Spec.VolumeName == "":
		if pv.VolumeModeMismatch(&claim.Spec, &volume.Spec) {
			var p plan
			p.event(false, corev1.EventTypeWarning, reasonVolumeMismatch,
				fmt.Sprintf("Cannot bind PersistentVolume to requested PersistentVolumeClaim %q due to incompatible volumeMode.", claim.Name))
			p.event(true, corev1.EventTypeWarning, reasonVolumeMismatch,
				fmt.Sprintf("Cannot bind PersistentVolume %q to requested PersistentVolumeClaim due to incompatible volumeMode.", volume.Name))
			return p
		}
		// Half bound: the claim's sync finishes it.
		return plan{syncClaim: claimKey(claim)}
	case claim.Spec.VolumeName == volume.Name:
		return plan{volumeStatus: volumeStatus(volume, corev1.VolumeBound, "")}
	}
	// The claim went to another volume.
	if metav1.HasAnnotation(volume.ObjectMeta, pv.AnnDynamicallyProvisioned) && volume.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete {
		// It was provisioned for this claim and is not needed: delete it.
		return reclaim(volume, w)
	}
	return unbind(volume)
}

// unbind makes volume Available again: the binder's own binding is undone entirely, a binding
// the user made (pre-bound) keeps its claim name so that the claim may bind again.
func unbind(volume *corev1.PersistentVolume) plan {
	v := volume.DeepCopy()
	if metav1.HasAnnotation(volume.ObjectMeta, pv.AnnBoundByController) {
		v.Spec.ClaimRef = nil
		delete(v.Annotations, pv.AnnBoundByController)
		if len(v.Annotations) == 0 {
			v.Annotations = nil
		}
	} else {
		v.Spec.ClaimRef.UID = ""
	}
	return plan{volume: v, volumeStatus: volumeStatus(v, corev1.VolumeAvailable, "")}
}

// reclaim releases volume and applies its reclaim policy.
func reclaim(volume *corev1.PersistentVolume, w world) plan {
	var p plan
	phase := volume.Status.Phase
	if phase != corev1.VolumeReleased && phase != corev1.VolumeFailed {
		phase = corev1.VolumeReleased
	}
	fail := func(reason, msg string) plan {
		if volume.Status.Phase != corev1.VolumeFailed {
			p.volumeStatus = volumeStatus(volume, corev1.VolumeFailed, msg)
			p.event(false, corev1.EventTypeWarning, reason, msg)
		}
		return p
	}
	switch volume.Spec.PersistentVolumeReclaimPolicy {
	case corev1.PersistentVolumeReclaimRetain:
		// The data stays until an administrator deals with it.
	case corev1.PersistentVolumeReclaimDelete:
		if by := volume.Annotations[pv.AnnDynamicallyProvisioned]; by != "" && !strings.HasPrefix(by, "kubernetes.io/") {
			break // its provisioner deletes it
		}
		return fail(reasonVolumeFailedDelete, fmt.Sprintf("error getting deleter volume plugin for volume %q: no deletable volume plugin matched", volume.Name))
	case corev1.PersistentVolumeReclaimRecycle:
		return recycle(volume, w)
	default:
		return fail(reasonUnknownReclaimPolicy, "Volume has unrecognized PersistentVolumeReclaimPolicy")
	}
	p.volumeStatus = volumeStatus(volume, phase, "")
	return p
}

// recycle scrubs a released hostPath volume with a recycler pod and makes it Available again.
// The pod's outcome is read from the informer on later syncs: nothing here waits.
func recycle(volume *corev1.PersistentVolume, w world) plan {
	var p plan
	released := volume.Status.Phase
	if released != corev1.VolumeFailed {
		released = corev1.VolumeReleased
	}
	p.volumeStatus = volumeStatus(volume, released, "")
	failed := func(msg string) plan {
		p.recycleFailed = true
		p.volumeStatus = nil
		if volume.Status.Phase != corev1.VolumeFailed {
			p.volumeStatus = volumeStatus(volume, corev1.VolumeFailed, msg)
			p.event(false, corev1.EventTypeWarning, reasonVolumeFailedRecycle, msg)
		}
		return p
	}
	if volume.Spec.HostPath == nil {
		return failed("No recycler plugin found for the volume!")
	}
	ref := volume.Spec.ClaimRef
	if users := activePods(w.PodsUsing(ref.Namespace, ref.Name)); len(users) > 0 {
		// A pod still has the old claim's data open; wait for it to end.
		p.event(false, corev1.EventTypeNormal, reasonVolumeFailedRecycle, "Volume is used by pods: "+strings.Join(users, ","))
		return p
	}
	pod := w.Pod(recyclerNamespace, recyclerName(volume))
	switch {
	case pod != nil && stale(pod, volume):
		// Left over from an earlier recycling: remove it, start afresh once it is gone.
		p.deleteRecycler = pod
	case pod == nil:
		if !w.RecycleWaiting(volume.Name) {
			p.recycler = recyclerPod(volume)
		}
	case pod.Status.Phase == corev1.PodSucceeded:
		p = unbind(volume)
		p.deleteRecycler, p.recycled = pod, true
		p.event(false, corev1.EventTypeNormal, reasonVolumeRecycled, "Volume recycled")
	case pod.Status.Phase == corev1.PodFailed:
		msg := pod.Status.Message
		if msg == "" {
			msg = "pod failed, pod.Status.Message unknown"
		}
		p = failed("Recycle failed: failed to recycle volume: " + msg)
		p.deleteRecycler = pod
	case pod.DeletionTimestamp != nil:
		// Deleted before it finished: that recycling failed.
		p = failed("Recycle failed: failed to recycle volume: recycler pod was deleted")
	}
	return p
}

func claimKey(c *corev1.PersistentVolumeClaim) string { return c.Namespace + "/" + c.Name }

// unscheduledPods names the pods of pods not yet on a node and not finished.
func unscheduledPods(pods []*corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		if p.Spec.NodeName == "" && !pv.PodTerminated(p) {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return names
}

// activePods names ("ns/name") the pods of pods that have not finished.
func activePods(pods []*corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		if !pv.PodTerminated(p) {
			names = append(names, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(names)
	return names
}
