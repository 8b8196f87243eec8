package serviceaccount

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func fixedName(base string) string { return base + "abcde" }

func TestAdmitPod(t *testing.T) {
	no := false
	accounts := objects{
		"serviceaccounts/ns/robot":   &corev1.ServiceAccount{ObjectMeta: meta("ns", "robot", "1"), ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}},
		"serviceaccounts/ns/quiet":   &corev1.ServiceAccount{ObjectMeta: meta("ns", "quiet", "2"), AutomountServiceAccountToken: &no},
		"serviceaccounts/ns/default": &corev1.ServiceAccount{ObjectMeta: meta("ns", "default", "3")},
	}
	mount := corev1.VolumeMount{Name: "kube-api-access-abcde", ReadOnly: true, MountPath: MountPath}
	volume := corev1.Volume{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: TokenVolumeSource()}}
	own := corev1.VolumeMount{Name: "mine", MountPath: MountPath}
	for _, tc := range []struct {
		name    string
		objs    objects
		spec    corev1.PodSpec
		mirror  bool
		account string
		mounts  [][]corev1.VolumeMount // per init container, then per container
		volumes []corev1.Volume
		pull    []corev1.LocalObjectReference
		forbid  string
	}{
		{name: "defaulted to default", objs: accounts, spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
			account: "default", mounts: [][]corev1.VolumeMount{{mount}}, volumes: []corev1.Volume{volume}},
		{name: "the deprecated field names it", objs: accounts, spec: corev1.PodSpec{DeprecatedServiceAccount: "robot", Containers: []corev1.Container{{Name: "a"}}},
			account: "robot", mounts: [][]corev1.VolumeMount{{mount}}, volumes: []corev1.Volume{volume}, pull: []corev1.LocalObjectReference{{Name: "pull"}}},
		{name: "every container, init ones too, except one that mounts the path", objs: accounts,
			spec:    corev1.PodSpec{ServiceAccountName: "robot", InitContainers: []corev1.Container{{Name: "i"}}, Containers: []corev1.Container{{Name: "a"}, {Name: "b", VolumeMounts: []corev1.VolumeMount{own}}}, Volumes: []corev1.Volume{{Name: "mine"}}},
			account: "robot", mounts: [][]corev1.VolumeMount{{mount}, {mount}, {own}}, volumes: []corev1.Volume{{Name: "mine"}, volume}, pull: []corev1.LocalObjectReference{{Name: "pull"}}},
		{name: "no volume when every container mounts the path", objs: accounts,
			spec:    corev1.PodSpec{Containers: []corev1.Container{{Name: "a", VolumeMounts: []corev1.VolumeMount{own}}}, Volumes: []corev1.Volume{{Name: "mine"}}},
			account: "default", mounts: [][]corev1.VolumeMount{{own}}, volumes: []corev1.Volume{{Name: "mine"}}},
		{name: "the pod's own imagePullSecrets stay", objs: accounts,
			spec:    corev1.PodSpec{ServiceAccountName: "robot", ImagePullSecrets: []corev1.LocalObjectReference{{Name: "mine"}}, Containers: []corev1.Container{{Name: "a"}}},
			account: "robot", mounts: [][]corev1.VolumeMount{{mount}}, volumes: []corev1.Volume{volume}, pull: []corev1.LocalObjectReference{{Name: "mine"}}},
		{name: "automount off on the pod", objs: accounts, spec: corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{{Name: "a"}}},
			account: "default", mounts: [][]corev1.VolumeMount{nil}},
		{name: "automount off on the account", objs: accounts, spec: corev1.PodSpec{ServiceAccountName: "quiet", Containers: []corev1.Container{{Name: "a"}}},
			account: "quiet", mounts: [][]corev1.VolumeMount{nil}},
		{name: "the pod overrides its account", objs: accounts, spec: corev1.PodSpec{ServiceAccountName: "quiet", AutomountServiceAccountToken: new(true), Containers: []corev1.Container{{Name: "a"}}},
			account: "quiet", mounts: [][]corev1.VolumeMount{{mount}}, volumes: []corev1.Volume{volume}},
		{name: "a missing default account is admitted", objs: objects{}, spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
			account: "default", mounts: [][]corev1.VolumeMount{{mount}}, volumes: []corev1.Volume{volume}},
		{name: "a missing account is not", objs: accounts, spec: corev1.PodSpec{ServiceAccountName: "ghost", Containers: []corev1.Container{{Name: "a"}}},
			forbid: `pods "p" is forbidden: error looking up service account ns/ghost: serviceaccount "ghost" not found`},
		{name: "a mirror pod is left alone", objs: accounts, mirror: true, spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}},
			account: "", mounts: [][]corev1.VolumeMount{nil}},
		{name: "a mirror pod may not name an account", objs: accounts, mirror: true, spec: corev1.PodSpec{ServiceAccountName: "robot", Containers: []corev1.Container{{Name: "a"}}},
			forbid: "a mirror pod may not reference service accounts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: tc.spec}
			if tc.mirror {
				pod.Annotations = map[string]string{mirrorPodAnnotation: "x"}
			}
			err := AdmitPod(context.Background(), tc.objs, pod, fixedName)
			if tc.forbid != "" {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbid) {
					t.Fatalf("got %v, want 403 %q", err, tc.forbid)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := pod.Spec
			if s.ServiceAccountName != tc.account || s.DeprecatedServiceAccount != tc.account {
				t.Errorf("account %q / %q, want %q", s.ServiceAccountName, s.DeprecatedServiceAccount, tc.account)
			}
			var mounts [][]corev1.VolumeMount
			for _, c := range append(s.InitContainers, s.Containers...) {
				mounts = append(mounts, c.VolumeMounts)
			}
			if !apiequality.Semantic.DeepEqual(mounts, tc.mounts) {
				t.Errorf("mounts %v, want %v", mounts, tc.mounts)
			}
			if !apiequality.Semantic.DeepEqual(s.Volumes, tc.volumes) {
				t.Errorf("volumes %+v, want %+v", s.Volumes, tc.volumes)
			}
			if !apiequality.Semantic.DeepEqual(s.ImagePullSecrets, tc.pull) {
				t.Errorf("imagePullSecrets %v, want %v", s.ImagePullSecrets, tc.pull)
			}
		})
	}
}

// TestTokenVolumeShape pins the projected volume to what Kubernetes writes.
func TestTokenVolumeShape(t *testing.T) {
	v := TokenVolumeSource()
	if *v.DefaultMode != 420 || len(v.Sources) != 3 {
		t.Fatalf("%+v", v)
	}
	if tok := v.Sources[0].ServiceAccountToken; tok.Path != "token" || *tok.ExpirationSeconds != 3607 || tok.Audience != "" {
		t.Errorf("token %+v", tok)
	}
	if cm := v.Sources[1].ConfigMap; cm.Name != "kube-root-ca.crt" || len(cm.Items) != 1 || cm.Items[0] != (corev1.KeyToPath{Key: "ca.crt", Path: "ca.crt"}) {
		t.Errorf("configMap %+v", cm)
	}
	if d := v.Sources[2].DownwardAPI; len(d.Items) != 1 || d.Items[0].Path != "namespace" || *d.Items[0].FieldRef != (corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}) {
		t.Errorf("downwardAPI %+v", d)
	}
}
