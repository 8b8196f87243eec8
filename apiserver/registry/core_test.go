package registry

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newPodTemplate() *corev1.PodTemplate {
	return &corev1.PodTemplate{ObjectMeta: meta("web"), Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}, {Name: "log", Image: "busybox"}}},
	}}
}

func TestPodTemplate(t *testing.T) {
	checkCreate(t, podTemplates, newPodTemplate, []validCase[*corev1.PodTemplate]{
		{"valid", nil, nil},
		// A template is any pod's: restartPolicy Never is fine here, unlike in a controller's.
		{"never restarts", func(pt *corev1.PodTemplate) { pt.Template.Spec.RestartPolicy = corev1.RestartPolicyNever }, nil},
		{"no containers", func(pt *corev1.PodTemplate) { pt.Template.Spec.Containers = nil }, []string{"FieldValueRequired template.spec.containers"}},
		{"bad label", func(pt *corev1.PodTemplate) { pt.Template.Labels["app"] = "no good" }, []string{"FieldValueInvalid template.metadata.labels"}},
	})
	pt := newPodTemplate()
	podTemplates.PrepareCreate(pt)
	if pt.Generation != 1 || pt.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || pt.Template.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("generation %d, defaults %+v", pt.Generation, pt.Template.Spec)
	}
	relabeled := pt.DeepCopy()
	relabeled.Labels = map[string]string{"tier": "front"}
	podTemplates.PrepareUpdate(relabeled, pt, "")
	changed := pt.DeepCopy()
	changed.Template.Spec.Containers[0].Image = "nginx:1.28"
	podTemplates.PrepareUpdate(changed, pt, "")
	if relabeled.Generation != 1 || changed.Generation != 2 {
		t.Errorf("generation after relabel %d, after template change %d", relabeled.Generation, changed.Generation)
	}
	checkTable(t, podTemplates, pt, []string{"Name", "Containers", "Images", "Pod Labels"}, []any{"web,log", "nginx:1.27,busybox", "app=web"})
}

func TestComponentStatusTable(t *testing.T) {
	cs := &corev1.ComponentStatus{ObjectMeta: metav1.ObjectMeta{Name: "etcd-0"}, Conditions: []corev1.ComponentCondition{
		{Type: corev1.ComponentHealthy, Status: corev1.ConditionFalse, Message: "connection refused"}}}
	checkTable(t, ComponentStatuses, cs, []string{"Name", "Status", "Message", "Error"}, []any{"Unhealthy", "connection refused", ""})
	cs.Conditions = nil
	checkTable(t, ComponentStatuses, cs, []string{"Name", "Status", "Message", "Error"}, []any{"Unknown", "", ""})
}
