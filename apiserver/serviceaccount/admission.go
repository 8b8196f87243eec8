package serviceaccount

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What the ServiceAccount admission plugin gives a pod, as Kubernetes names it.
const (
	// DefaultName is the account of a pod that names none.
	DefaultName = "default"
	// VolumePrefix starts the name of the projected volume with the account's credentials;
	// five random characters follow.
	VolumePrefix = "kube-api-access-"
	// MountPath is where every container finds the token, ca.crt and namespace, and where
	// client-go's rest.InClusterConfig reads them.
	MountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// RootCAConfigMap is the ConfigMap the projected volume takes ca.crt from (the root CA
	// publisher keeps it in every namespace).
	RootCAConfigMap = "kube-root-ca.crt"
	// mirrorPodAnnotation marks the API copy of a node's static pod.
	mirrorPodAnnotation = "kubernetes.io/config.mirror"
)

var podsResource = schema.GroupResource{Resource: "pods"}

// AdmitPod does to a pod being created what Kubernetes' ServiceAccount admission plugin does:
// spec.serviceAccountName defaults to "default" (the deprecated spec.serviceAccount follows it),
// the account must exist (else 403 Forbidden, Kubernetes' message), the pod takes the account's
// imagePullSecrets when it has none, and, unless automountServiceAccountToken is false on the
// pod (or else on the account), it gets the projected volume kube-api-access-<random> (a token
// of the account bound to the pod, ca.crt from kube-root-ca.crt, the namespace) mounted
// read-only at MountPath in every container and init container that mounts nothing there.
// randomName returns its argument followed by random characters (what generateName does).
//
// One deviation from Kubernetes: a missing "default" account is admitted (as if it existed and
// said nothing about automounting). kplane's API server often runs without a controller manager
// to create it (tests, a bare apiserver), and pods there would otherwise all be refused; a node
// agent's request for the pod's token then fails until the account exists, which keeps the pod
// from starting, as Kubernetes' kubelet does for any missing volume source.
func AdmitPod(ctx context.Context, objs Objects, pod *corev1.Pod, randomName func(string) string) error {
	spec := &pod.Spec
	forbidden := func(err error) error {
		return apierrors.NewForbidden(podsResource, or(pod.Name, pod.GenerateName), err)
	}
	if _, mirror := pod.Annotations[mirrorPodAnnotation]; mirror {
		// A node's static pod has no account: it runs before the API knows it.
		if spec.ServiceAccountName != "" || spec.DeprecatedServiceAccount != "" {
			return forbidden(fmt.Errorf("a mirror pod may not reference service accounts"))
		}
		if hasTokenProjection(spec) {
			return forbidden(fmt.Errorf("a mirror pod may not use ServiceAccountToken volume projections"))
		}
		return nil
	}
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = or(spec.DeprecatedServiceAccount, DefaultName)
	}
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	sa, err := objs.ServiceAccount(ctx, pod.Namespace, spec.ServiceAccountName)
	switch {
	case apierrors.IsNotFound(err) && spec.ServiceAccountName == DefaultName:
		sa = &corev1.ServiceAccount{} // see the deviation above
	case apierrors.IsNotFound(err):
		return forbidden(fmt.Errorf("error looking up service account %s/%s: %w", pod.Namespace, spec.ServiceAccountName,
			apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccount"}, spec.ServiceAccountName)))
	case err != nil:
		return forbidden(fmt.Errorf("error looking up service account %s/%s: %w", pod.Namespace, spec.ServiceAccountName, err))
	}
	if automount(sa, pod) {
		mountToken(spec, randomName)
	}
	if len(spec.ImagePullSecrets) == 0 && len(sa.ImagePullSecrets) > 0 {
		spec.ImagePullSecrets = append([]corev1.LocalObjectReference(nil), sa.ImagePullSecrets...)
	}
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// automount: the pod's automountServiceAccountToken decides, else the account's, else yes.
func automount(sa *corev1.ServiceAccount, pod *corev1.Pod) bool {
	if v := pod.Spec.AutomountServiceAccountToken; v != nil {
		return *v
	}
	if v := sa.AutomountServiceAccountToken; v != nil {
		return *v
	}
	return true
}

func hasTokenProjection(spec *corev1.PodSpec) bool {
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

// mountToken mounts the kube-api-access volume (the pod's own, if it already has one) at
// MountPath in each container that has nothing there, adding the volume if any did.
func mountToken(spec *corev1.PodSpec, randomName func(string) string) {
	name := ""
	for _, v := range spec.Volumes {
		if strings.HasPrefix(v.Name, VolumePrefix) {
			name = v.Name
			break
		}
	}
	have := name != ""
	if !have {
		name = randomName(VolumePrefix)
	}
	mount := corev1.VolumeMount{Name: name, ReadOnly: true, MountPath: MountPath}
	mounted := false
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := &cs[i]
			if !mountsPath(c) {
				c.VolumeMounts = append(c.VolumeMounts, mount)
				mounted = true
			}
		}
	}
	if mounted && !have {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: TokenVolumeSource()}})
	}
}

func mountsPath(c *corev1.Container) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == MountPath {
			return true
		}
	}
	return false
}

// TokenVolumeSource is the projected kube-api-access volume: the account's token (path "token",
// 3607 s, bound to the pod by the node that fills it), ca.crt from kube-root-ca.crt, and the
// pod's namespace, files of mode 0644.
func TokenVolumeSource() *corev1.ProjectedVolumeSource {
	return &corev1.ProjectedVolumeSource{
		DefaultMode: new(int32(corev1.ProjectedVolumeSourceDefaultMode)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: new(int64(ProjectedExpirationSeconds))}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: RootCAConfigMap},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}
}
