package registry

import (
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// core/v1 resources beyond the workload and service ones: PodTemplates, stored for whoever
// reads them (no kplane controller does). Bindings and ComponentStatuses are answered by the
// server, not stored (apiserver/rest.go, apiserver/componentstatus.go).

func coreExtraResources() []Strategy { return []Strategy{podTemplates} }

var podTemplates = &Def[*corev1.PodTemplate]{
	Info:     Info{GroupVersion: coreV1, Resource: "podtemplates", Singular: "podtemplate", Kind: "PodTemplate", Namespaced: true},
	NewList:  func() runtime.Object { return &corev1.PodTemplateList{} },
	Defaults: func(t *corev1.PodTemplate) { defaultPodSpec(&t.Template.Spec) },
	Validate: func(t *corev1.PodTemplate) field.ErrorList {
		return validatePodTemplate(&t.Template, field.NewPath("template"))
	},
	// The template is what a PodTemplate's generation counts.
	SpecChanged: func(t, old *corev1.PodTemplate) bool {
		return !apiequality.Semantic.DeepEqual(t.Template, old.Template)
	},
	Columns: columns(
		Column("Containers", "string", 0, "Names of each container in the template."),
		Column("Images", "string", 0, "Images referenced by each container in the template."),
		Column("Pod Labels", "string", 0, "The labels for the pod template."),
	),
	Row: func(t *corev1.PodTemplate) []any {
		names, images := containerCells(t.Template.Spec.Containers)
		return []any{names, images, labels.FormatLabels(t.Template.Labels)}
	},
}

// ComponentStatuses describes the deprecated core/v1 resource through which the API server
// reports the health of etcd, the scheduler and the controller manager. It is answered on
// each read, never stored, so it is not in All: the server serves get and list of it alone.
var ComponentStatuses = &Def[*corev1.ComponentStatus]{
	Info: Info{GroupVersion: coreV1, Resource: "componentstatuses", Singular: "componentstatus", Kind: "ComponentStatus",
		ShortNames: []string{"cs"}},
	NewList: func() runtime.Object { return &corev1.ComponentStatusList{} },
	Columns: columns(
		Column("Status", "string", 0, "Status of the component conditions"),
		Column("Message", "string", 0, "Message of the component conditions"),
		Column("Error", "string", 0, "Error of the component conditions"),
	),
	Row: func(c *corev1.ComponentStatus) []any {
		// The cells are the Healthy condition's: its status as a word, its message, its error.
		status, message, errText := "Unknown", "", ""
		for _, cond := range c.Conditions {
			if cond.Type != corev1.ComponentHealthy {
				continue
			}
			switch cond.Status {
			case corev1.ConditionTrue:
				status = "Healthy"
			case corev1.ConditionFalse:
				status = "Unhealthy"
			}
			message, errText = cond.Message, cond.Error
			break
		}
		return []any{status, message, errText}
	},
}
