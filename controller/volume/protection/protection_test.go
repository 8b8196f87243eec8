package protection

import (
	"slices"
	"testing"

	"github.com/kplane/kplane/internal/pv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecide(t *testing.T) {
	now := metav1.Now()
	const f = pv.PVCProtectionFinalizer
	for _, tc := range []struct {
		name       string
		finalizers []string
		deleting   bool
		used       bool
		want       action
	}{
		{"new object gets the finalizer", nil, false, false, addFinalizer},
		{"live object keeps it", []string{f}, false, false, keep},
		{"deleted and unused: released", []string{"other", f}, true, false, removeFinalizer},
		{"deleted but used: kept", []string{f}, true, true, keep},
		{"deleted without it: nothing to do", []string{"other"}, true, false, keep},
	} {
		obj := &metav1.ObjectMeta{Finalizers: tc.finalizers}
		if tc.deleting {
			obj.DeletionTimestamp = &now
		}
		if got := decide(obj, f, tc.used); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if got := interesting(obj, f); got != (tc.want != keep || tc.deleting && slices.Contains(tc.finalizers, f)) {
			t.Errorf("%s: interesting = %v", tc.name, got)
		}
	}
	if got := withFinalizers([]string{"a", f, "b"}, f, removeFinalizer); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("remove: %v", got)
	}
	if got := withFinalizers([]string{"a"}, f, addFinalizer); !slices.Equal(got, []string{"a", f}) {
		t.Errorf("add: %v", got)
	}
}

func TestPodUsesClaim(t *testing.T) {
	pod := func(node string, phase corev1.PodPhase, claim string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}, Status: corev1.PodStatus{Phase: phase}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"running on a node", pod("n1", corev1.PodRunning, "data"), true},
		// As in Kubernetes v1.36: the node may still have the volume mounted until the pod is deleted.
		{"finished on a node", pod("n1", corev1.PodSucceeded, "data"), true},
		{"not scheduled", pod("", corev1.PodPending, "data"), false},
		{"another claim", pod("n1", corev1.PodRunning, "other"), false},
	} {
		if got := podUsesClaim(tc.pod, "data"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
