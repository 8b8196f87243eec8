package persistentvolume

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The recycler pod scrubs a released hostPath volume, as Kubernetes' does: one pod per volume,
// "recycler-for-<volume>" in the default namespace, that mounts the volume at /scrub and
// empties it, with a deadline that grows with the volume's size.
const (
	recyclerNamespace = metav1.NamespaceDefault
	recyclerMount     = "/scrub"
	// The deadline is 30 s per GiB of capacity, at least 60 s (kube-controller-manager's
	// --pv-recycler-increment-timeout-hostpath and --pv-recycler-minimum-timeout-hostpath).
	recyclerMinTimeout       = 60
	recyclerTimeoutPerGiB    = 30
	recyclerImage            = "registry.k8s.io/build-image/debian-base:bookworm-v1.0.6"
	recyclerVolumeName       = "vol"
	recyclerContainerName    = "pv-recycler"
	recyclerScrubbingCommand = `cd ` + recyclerMount + ` && find . -mindepth 1 -delete && test -z "$(ls -A .)"`
)

func recyclerName(v *corev1.PersistentVolume) string { return "recycler-for-" + v.Name }

// recyclerPod is the pod that scrubs v. A kplane node runs a container's command as a process
// that sees the volume at its mountPath, so the command is all the scrubbing there is: it fails
// (and the recycling with it) if /scrub is not there or is not empty afterwards. The pod goes
// to a node the volume is reachable from.
func recyclerPod(v *corev1.PersistentVolume) *corev1.Pod {
	capacity := v.Spec.Capacity[corev1.ResourceStorage]
	timeout := max(int64(recyclerMinTimeout), (capacity.Value()>>30)*recyclerTimeoutPerGiB)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: recyclerName(v), Namespace: recyclerNamespace},
		Spec: corev1.PodSpec{
			ActiveDeadlineSeconds: &timeout,
			RestartPolicy:         corev1.RestartPolicyNever,
			Volumes: []corev1.Volume{{Name: recyclerVolumeName, VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: v.Spec.HostPath.Path}}}},
			Containers: []corev1.Container{{
				Name:         recyclerContainerName,
				Image:        recyclerImage,
				Command:      []string{"/bin/sh", "-c", recyclerScrubbingCommand},
				VolumeMounts: []corev1.VolumeMount{{Name: recyclerVolumeName, MountPath: recyclerMount}},
			}},
		},
	}
	if a := v.Spec.NodeAffinity; a != nil && a.Required != nil {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: a.Required.DeepCopy()}}
	}
	return pod
}

// stale reports whether pod is a recycler left from an earlier recycling of a volume of this
// name: it was made before the volume entered its current phase.
func stale(pod *corev1.Pod, v *corev1.PersistentVolume) bool {
	t := v.Status.LastPhaseTransitionTime
	return t != nil && pod.CreationTimestamp.Before(t)
}
