// Package persistentvolume is the PersistentVolume controller of the controller manager (the
// "persistentvolume-binder" of kube-controller-manager v1.36): it binds claims to volumes and
// reclaims the volumes whose claims are gone.
//
// Binding. A claim without spec.volumeName takes the smallest Available volume of its class
// that is big enough and offers its access modes, volume mode and selector's labels; a volume
// pre-bound to it (claimRef set by its creator, or by the scheduler for a WaitForFirstConsumer
// claim) goes first. A claim naming a volume takes that one, or stays Pending with a
// VolumeMismatch event saying why not. Binding writes the volume's claimRef, then its phase
// (Bound), then the claim's volumeName and annotations (pv.kubernetes.io/bind-completed,
// bound-by-controller), then its status (Bound, capacity, access modes); any step that fails is
// finished by a later sync, since every step is decided again from what is stored.
//
// A claim nothing fits stays Pending: without a class with a FailedBinding event; with a
// WaitForFirstConsumer class, until the scheduler picks a node for its first pod
// (volume.kubernetes.io/selected-node), with a WaitForFirstConsumer event; otherwise it is
// handed to its class's provisioner through volume.kubernetes.io/storage-provisioner (an
// ExternalProvisioning event), which creates a volume pre-bound to it. kplane has none of
// Kubernetes' in-tree provisioners (kubernetes.io/...). A claim created before a default
// class existed gets the default class.
//
// Reclaiming. A bound volume whose claim is deleted becomes Released and is reclaimed by its
// policy: Retain keeps it (and its claimRef); Delete leaves a volume made by an external
// provisioner to that provisioner, and fails any other (there are no in-tree deleters);
// Recycle scrubs a hostPath volume with a recycler pod (recycler.go) and makes it Available
// again, or Failed with a VolumeFailedRecycle event if the pod fails, retried with a backoff.
//
// The decisions (binder.go) are pure functions of the object synced and a read-only view of
// the others; the controller (controller.go) feeds them from informers and writes their plans.
package persistentvolume
