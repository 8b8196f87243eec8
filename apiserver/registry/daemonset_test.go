package registry

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDaemonSetTemplateGeneration: the template generation annotation starts at 1 (or what
// the client asked, if greater), grows by one with each write that changes the pod template
// and by nothing otherwise, whatever value the write carries.
func TestDaemonSetTemplateGeneration(t *testing.T) {
	newDS := func(annotation string) *appsv1.DaemonSet {
		labels := map[string]string{"app": "d"}
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns"}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
		if annotation != "" {
			ds.Annotations = map[string]string{appsv1.DeprecatedTemplateGeneration: annotation}
		}
		return ds
	}
	gen := func(ds *appsv1.DaemonSet) string { return ds.Annotations[appsv1.DeprecatedTemplateGeneration] }
	for _, tc := range []struct{ sent, want string }{{"", "1"}, {"0", "1"}, {"-3", "1"}, {"7", "7"}} {
		ds := newDS(tc.sent)
		daemonSets.PrepareCreate(ds)
		if gen(ds) != tc.want {
			t.Errorf("created with %q: template generation %q, want %q", tc.sent, gen(ds), tc.want)
		}
	}
	bad := newDS("x")
	defaultDaemonSet(bad)
	if got := errs(daemonSets.ValidateObject(bad, nil)); len(got) != 1 || got[0] != "FieldValueInvalid metadata.annotations[deprecated.daemonset.template.generation]" {
		t.Errorf("a template generation that is no integer: errors %q", got)
	}

	old := newDS("")
	daemonSets.PrepareCreate(old)
	for _, tc := range []struct {
		name   string
		change func(*appsv1.DaemonSet)
		want   string
	}{
		{"template changed", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "busybox:2" }, "2"},
		{"only the strategy changed", func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = 5 }, "1"},
		{"nothing changed, the annotation rewritten", func(ds *appsv1.DaemonSet) { ds.Annotations[appsv1.DeprecatedTemplateGeneration] = "9" }, "1"},
		{"the annotation removed", func(ds *appsv1.DaemonSet) { delete(ds.Annotations, appsv1.DeprecatedTemplateGeneration) }, "1"},
		{"template changed, undefaulted", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:2"}}}
		}, "2"},
		{"template sent undefaulted, unchanged", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
		}, "1"},
	} {
		ds := old.DeepCopy()
		tc.change(ds)
		daemonSets.PrepareUpdate(ds, old, "")
		if gen(ds) != tc.want {
			t.Errorf("%s: template generation %q, want %q", tc.name, gen(ds), tc.want)
		}
	}
}
