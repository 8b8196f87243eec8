package registry

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newRuntimeClass() *nodev1.RuntimeClass {
	return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}
}

func TestRuntimeClass(t *testing.T) {
	checkCreate(t, runtimeClasses, newRuntimeClass, []validCase[*nodev1.RuntimeClass]{
		{"valid", nil, nil},
		{"no handler", func(rc *nodev1.RuntimeClass) { rc.Handler = "" }, []string{"FieldValueRequired handler"}},
		{"handler not a label", func(rc *nodev1.RuntimeClass) { rc.Handler = "Not_A_Label" }, []string{"FieldValueInvalid handler"}},
		{"negative overhead", func(rc *nodev1.RuntimeClass) { rc.Overhead.PodFixed[corev1.ResourceCPU] = resource.MustParse("-1") },
			[]string{"FieldValueInvalid overhead.limits[cpu]"}},
		{"same toleration twice", func(rc *nodev1.RuntimeClass) {
			tol := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
			rc.Scheduling = &nodev1.Scheduling{Tolerations: []corev1.Toleration{tol, tol}}
		}, []string{"FieldValueDuplicate scheduling.tolerations[1]"}},
	})
	checkUpdate(t, runtimeClasses, newRuntimeClass, []validCase[*nodev1.RuntimeClass]{
		{"handler", func(rc *nodev1.RuntimeClass) { rc.Handler = "runc" }, []string{"FieldValueInvalid handler"}},
	})
	rc := newRuntimeClass()
	runtimeClasses.PrepareCreate(rc)
	if rc.Generation != 0 {
		t.Errorf("generation %d", rc.Generation)
	}
	checkTable(t, runtimeClasses, rc, []string{"Name", "Handler", "Age"}, []any{"runsc", "<unknown>"})
}
