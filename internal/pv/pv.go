// Package pv holds the vocabulary of persistent storage that the apiserver's admission, the
// PersistentVolume controllers, the scheduler and the local-path provisioner share: the
// annotations and finalizers Kubernetes defines for volumes and claims, how a claim's or a
// volume's class is read, which StorageClass is the default, and which volume a claim may bind.
// Everything here is a pure function of its arguments.
package pv

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Annotations and finalizers, with Kubernetes' names so that tools written for Kubernetes read
// kplane's objects the same way.
const (
	// AnnBindCompleted on a claim: the binder finished binding it (set once, never removed).
	AnnBindCompleted = "pv.kubernetes.io/bind-completed"
	// AnnBoundByController on a claim or volume: the binder, not the user, chose the binding.
	AnnBoundByController = "pv.kubernetes.io/bound-by-controller"
	// AnnSelectedNode on a claim of a WaitForFirstConsumer class: the node the scheduler chose
	// for the first pod using it; the provisioner creates the volume there.
	AnnSelectedNode = "volume.kubernetes.io/selected-node"
	// AnnStorageProvisioner on a claim: the provisioner asked to create its volume.
	AnnStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	// AnnBetaStorageProvisioner is the older name of AnnStorageProvisioner, still set.
	AnnBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	// AnnDynamicallyProvisioned on a volume: the provisioner that created it (and deletes it).
	AnnDynamicallyProvisioned = "pv.kubernetes.io/provisioned-by"
	// AnnDefaultClass on a StorageClass, "true": claims without a class get this one.
	AnnDefaultClass = "storageclass.kubernetes.io/is-default-class"
	// AnnBetaDefaultClass is the older name of AnnDefaultClass, still honoured.
	AnnBetaDefaultClass = "storageclass.beta.kubernetes.io/is-default-class"

	// PVCProtectionFinalizer keeps a claim while a pod uses it.
	PVCProtectionFinalizer = "kubernetes.io/pvc-protection"
	// PVProtectionFinalizer keeps a volume while a claim is bound to it.
	PVProtectionFinalizer = "kubernetes.io/pv-protection"
	// ProvisionerFinalizer keeps a provisioned volume until its provisioner removed the storage.
	ProvisionerFinalizer = "external-provisioner.volume.kubernetes.io/finalizer"

	// NoProvisioner is the provisioner of classes whose volumes are only ever created by hand.
	NoProvisioner = "kubernetes.io/no-provisioner"
)

// ClaimClass is the class a claim asks for: the beta annotation first, then
// spec.storageClassName; "" asks for volumes without a class.
func ClaimClass(c *corev1.PersistentVolumeClaim) string {
	if class, ok := c.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return class
	}
	if c.Spec.StorageClassName != nil {
		return *c.Spec.StorageClassName
	}
	return ""
}

// ClaimHasClass reports whether a claim names a class at all (the empty one included): only a
// claim that does not gets the default class.
func ClaimHasClass(c *corev1.PersistentVolumeClaim) bool {
	_, ok := c.Annotations[corev1.BetaStorageClassAnnotation]
	return ok || c.Spec.StorageClassName != nil
}

// VolumeClass is the class of a volume: the beta annotation first, then spec.storageClassName.
func VolumeClass(v *corev1.PersistentVolume) string {
	if class, ok := v.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return class
	}
	return v.Spec.StorageClassName
}

// IsDefaultClass reports whether a StorageClass is marked as the default.
func IsDefaultClass(sc *storagev1.StorageClass) bool {
	return sc.Annotations[AnnDefaultClass] == "true" || sc.Annotations[AnnBetaDefaultClass] == "true"
}

// DefaultClass returns the default class among classes, nil when there is none. Of several, the
// newest wins (then the first by name), so that adding a new default takes effect at once.
func DefaultClass(classes []*storagev1.StorageClass) *storagev1.StorageClass {
	var best *storagev1.StorageClass
	for _, sc := range classes {
		if !IsDefaultClass(sc) {
			continue
		}
		if best == nil {
			best = sc
			continue
		}
		t, bt := sc.CreationTimestamp.UnixNano(), best.CreationTimestamp.UnixNano()
		if t > bt || t == bt && sc.Name < best.Name {
			best = sc
		}
	}
	return best
}

// WaitsForFirstConsumer reports whether class delays binding until a pod uses the claim.
func WaitsForFirstConsumer(class *storagev1.StorageClass) bool {
	return class != nil && class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

// AccessModesString abbreviates access modes as kubectl shows them: "RWO,ROX,RWX,RWOP", each
// once, in that order.
func AccessModesString(modes []corev1.PersistentVolumeAccessMode) string {
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"}} {
		if slices.Contains(modes, m.mode) {
			out = append(out, m.short)
		}
	}
	return strings.Join(out, ",")
}

// IsBoundToClaim reports whether volume's claimRef points at claim: same namespace and name,
// and the same UID unless the claimRef has none yet (a volume pre-bound by its creator).
func IsBoundToClaim(volume *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) bool {
	ref := volume.Spec.ClaimRef
	if ref == nil || ref.Name != claim.Name || ref.Namespace != claim.Namespace {
		return false
	}
	return ref.UID == "" || ref.UID == claim.UID
}

// VolumeModeMismatch reports whether claim and volume differ in volumeMode (unset is Filesystem).
func VolumeModeMismatch(claim *corev1.PersistentVolumeClaimSpec, volume *corev1.PersistentVolumeSpec) bool {
	mode := func(m *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
		if m == nil {
			return corev1.PersistentVolumeFilesystem
		}
		return *m
	}
	return mode(claim.VolumeMode) != mode(volume.VolumeMode)
}

// HasAccessModes reports whether volume offers every access mode the claim asks for.
func HasAccessModes(claim *corev1.PersistentVolumeClaim, volume *corev1.PersistentVolume) bool {
	for _, m := range claim.Spec.AccessModes {
		if !slices.Contains(volume.Spec.AccessModes, m) {
			return false
		}
	}
	return true
}

// Unsuitable says why volume cannot serve claim, which asked for it by name; "" when it can.
// The reasons are Kubernetes' words, shown in the claim's VolumeMismatch event.
func Unsuitable(volume *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) string {
	requested := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity := volume.Spec.Capacity[corev1.ResourceStorage]
	switch {
	case volume.DeletionTimestamp != nil:
		return fmt.Sprintf("the volume is marked for deletion %q", volume.Name)
	case capacity.Value() < requested.Value():
		return "requested PV is too small"
	case VolumeClass(volume) != ClaimClass(claim):
		return "storageClassName does not match"
	case deref(claim.Spec.VolumeAttributesClassName) != deref(volume.Spec.VolumeAttributesClassName):
		return "volumeAttributesClassName does not match"
	case VolumeModeMismatch(&claim.Spec, &volume.Spec):
		return "incompatible volumeMode"
	case !HasAccessModes(claim, volume):
		return "incompatible accessMode"
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Match finds the volume of volumes claim should bind to: a volume pre-bound to the claim if
// there is one, else the smallest Available volume that is big enough and matches the claim's
// class, selector, volume mode and access modes. Volumes in exclude are skipped. Without a node
// (the binder's view), volumes offering fewer access modes come first, whatever their size, as
// Kubernetes' binder searches volumes grouped by access modes: a claim for RWO does not take
// the only RWX volume while an RWO one fits.
//
// onNode, when not nil, is the node the claim's first pod goes to (the scheduler's view): a
// volume must then be reachable from it (nodeAffinity). Without a node, a WaitForFirstConsumer
// claim (delayBinding) only takes a volume pre-bound to it: any other choice might pin its pod to
// a node the pod cannot run on. A pre-bound volume that the node cannot reach means no match.
func Match(claim *corev1.PersistentVolumeClaim, volumes []*corev1.PersistentVolume, onNode func(*corev1.PersistentVolume) bool,
	exclude map[string]bool, delayBinding bool) (*corev1.PersistentVolume, error) {
	var selector labels.Selector
	if claim.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("error creating internal label selector for claim: %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		selector = s
	}
	requested := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	class := ClaimClass(claim)
	var best *corev1.PersistentVolume
	for _, v := range volumes {
		if exclude[v.Name] {
			continue
		}
		bound := IsBoundToClaim(v, claim)
		if v.Spec.ClaimRef != nil && !bound {
			continue
		}
		capacity := v.Spec.Capacity[corev1.ResourceStorage]
		if capacity.Cmp(requested) < 0 || VolumeModeMismatch(&claim.Spec, &v.Spec) ||
			deref(claim.Spec.VolumeAttributesClassName) != deref(v.Spec.VolumeAttributesClassName) || v.DeletionTimestamp != nil {
			continue
		}
		reachable := onNode == nil || onNode(v)
		if bound {
			if !reachable {
				return nil, nil
			}
			return v, nil
		}
		if onNode == nil && delayBinding {
			continue
		}
		if v.Status.Phase != corev1.VolumeAvailable || selector != nil && !selector.Matches(labels.Set(v.Labels)) ||
			VolumeClass(v) != class || !reachable || !HasAccessModes(claim, v) {
			continue
		}
		if best == nil || better(v, best, onNode == nil) {
			best = v
		}
	}
	return best, nil
}

// better orders candidate volumes: by the number of access modes first when byModes, then by
// capacity, then by name so that the choice does not depend on the order of the list.
func better(a, b *corev1.PersistentVolume, byModes bool) bool {
	if byModes {
		if na, nb := distinctModes(a), distinctModes(b); na != nb {
			return na < nb
		}
	}
	ca, cb := a.Spec.Capacity[corev1.ResourceStorage], b.Spec.Capacity[corev1.ResourceStorage]
	if c := ca.Cmp(cb); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

func distinctModes(v *corev1.PersistentVolume) int {
	return len(slices.Compact(slices.Sorted(slices.Values(v.Spec.AccessModes))))
}

// ClaimNames returns the names of the claims pod's volumes use, in order.
func ClaimNames(pod *corev1.Pod) []string {
	var names []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return names
}

// PodUsesClaim reports whether one of pod's volumes is the claim named name (in pod's namespace).
func PodUsesClaim(pod *corev1.Pod, name string) bool {
	return slices.Contains(ClaimNames(pod), name)
}

// PodTerminated reports whether pod has finished for good (Succeeded or Failed).
func PodTerminated(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
