package registry

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// StatefulSets (apps/v1): pods with stable names <set>-<ordinal>, each with its own claims made
// from volumeClaimTemplates. Once created, a StatefulSet's identity (selector, serviceName,
// volumeClaimTemplates, podManagementPolicy) is fixed: only what the controller can roll out
// or scale may change.
var statefulSets = &Def[*appsv1.StatefulSet]{
	Info: Info{GroupVersion: appsV1, Resource: "statefulsets", Singular: "statefulset", Kind: "StatefulSet",
		ShortNames: []string{"sts"}, Categories: []string{"all"}, Namespaced: true, Status: true, Scale: true},
	NewList: func() runtime.Object { return &appsv1.StatefulSetList{} },
	// The name is the prefix of every pod's name and hostname, so it must be a DNS label.
	NameValidation: apimachineryvalidation.NameIsDNSLabel,
	Defaults:       defaultStatefulSet,
	ValidateCreate: func(ss *appsv1.StatefulSet) field.ErrorList {
		return validateStatefulSetSpec(&ss.Spec, statefulSetChecks{serviceName: true, claimTemplates: true, podTemplate: true})
	},
	ValidateUpdate: validateStatefulSetUpdate,
	Columns: columns(
		Column("Ready", "string", 0, "Number of the pod with ready state"),
		AgeColumn,
		replicaColumns[4], replicaColumns[5],
	),
	Row: func(ss *appsv1.StatefulSet) []any {
		names, images := containerCells(ss.Spec.Template.Spec.Containers)
		return []any{fmt.Sprintf("%d/%d", ss.Status.ReadyReplicas, deref(ss.Spec.Replicas)), Age(ss.CreationTimestamp), names, images}
	},
}

// defaultStatefulSet applies apps/v1's defaults. An explicit updateStrategy type RollingUpdate
// without rollingUpdate stays without it (Kubernetes fills the struct only when it fills the
// type). maxUnavailable gets no default and is kept when given: v1.36 drops it unless its
// feature gate MaxUnavailableStatefulSet (beta, off) is on; kplane has no gates and honours
// it, while a set without it shows and rolls out as in a default v1.36 cluster.
func defaultStatefulSet(ss *appsv1.StatefulSet) {
	s := &ss.Spec
	s.PodManagementPolicy = or(s.PodManagementPolicy, appsv1.OrderedReadyPodManagement)
	us := &s.UpdateStrategy
	if us.Type == "" {
		us.Type = appsv1.RollingUpdateStatefulSetStrategyType
		if us.RollingUpdate == nil {
			us.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
	}
	if us.Type == appsv1.RollingUpdateStatefulSetStrategyType && us.RollingUpdate != nil && us.RollingUpdate.Partition == nil {
		us.RollingUpdate.Partition = new(int32(0))
	}
	if s.PersistentVolumeClaimRetentionPolicy == nil {
		s.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	rp := s.PersistentVolumeClaimRetentionPolicy
	rp.WhenDeleted = or(rp.WhenDeleted, appsv1.RetainPersistentVolumeClaimRetentionPolicyType)
	rp.WhenScaled = or(rp.WhenScaled, appsv1.RetainPersistentVolumeClaimRetentionPolicyType)
	if s.Replicas == nil {
		s.Replicas = new(int32(1))
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = new(int32(10))
	}
	defaultPodSpec(&s.Template.Spec)
	// The claim templates get the defaults of the claims they become.
	for i := range s.VolumeClaimTemplates {
		c := &s.VolumeClaimTemplates[i]
		c.Status.Phase = or(c.Status.Phase, corev1.ClaimPending)
		if c.Spec.VolumeMode == nil {
			c.Spec.VolumeMode = new(corev1.PersistentVolumeFilesystem)
		}
	}
}

// statefulSetChecks says which parts of a spec are checked: on update Kubernetes tolerates what
// earlier versions let in and can no longer change (serviceName, the claim templates), and a
// pod template that was already invalid.
type statefulSetChecks struct {
	serviceName, claimTemplates, podTemplate bool
}

var retentionPolicies = []appsv1.PersistentVolumeClaimRetentionPolicyType{
	appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
}

func validateStatefulSetSpec(s *appsv1.StatefulSetSpec, checks statefulSetChecks) field.ErrorList {
	var errs field.ErrorList
	switch pp := specPath.Child("podManagementPolicy"); s.PodManagementPolicy {
	case "":
		errs = append(errs, field.Required(pp, ""))
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		errs = append(errs, field.Invalid(pp, s.PodManagementPolicy, fmt.Sprintf("must be '%s' or '%s'", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)))
	}
	up := specPath.Child("updateStrategy")
	switch ru := s.UpdateStrategy.RollingUpdate; s.UpdateStrategy.Type {
	case "":
		errs = append(errs, field.Required(up, ""))
	case appsv1.OnDeleteStatefulSetStrategyType:
		if ru != nil {
			errs = append(errs, field.Invalid(up.Child("rollingUpdate"), ru, fmt.Sprintf("only allowed for updateStrategy '%s'", appsv1.RollingUpdateStatefulSetStrategyType)))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if ru != nil {
			errs = append(errs, validateStatefulSetRollingUpdate(ru, up.Child("rollingUpdate"))...)
		}
	default:
		errs = append(errs, field.Invalid(up, s.UpdateStrategy, fmt.Sprintf("must be '%s' or '%s'", appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType)))
	}
	if rp := s.PersistentVolumeClaimRetentionPolicy; rp != nil {
		pp := specPath.Child("persistentVolumeClaimRetentionPolicy")
		for _, f := range []struct {
			name string
			v    appsv1.PersistentVolumeClaimRetentionPolicyType
		}{{"whenDeleted", rp.WhenDeleted}, {"whenScaled", rp.WhenScaled}} {
			if !slices.Contains(retentionPolicies, f.v) {
				errs = append(errs, field.NotSupported(pp.Child(f.name), f.v, retentionPolicies))
			}
		}
	}
	if checks.claimTemplates {
		errs = append(errs, validateClaimTemplates(s.VolumeClaimTemplates)...)
	}
	errs = append(errs, nonNegative(deref(s.Replicas), specPath.Child("replicas"))...)
	errs = append(errs, nonNegative(s.MinReadySeconds, specPath.Child("minReadySeconds"))...)
	if s.Ordinals != nil {
		errs = append(errs, nonNegative(s.Ordinals.Start, specPath.Child("ordinals", "start"))...)
	}
	if checks.serviceName && s.ServiceName != "" {
		errs = append(errs, dnsLabel(s.ServiceName, specPath.Child("serviceName"))...)
	}
	sel, selErrs := validateSelector(s.Selector, "statefulset")
	errs = append(errs, selErrs...)
	tp := specPath.Child("template")
	if checks.podTemplate {
		errs = append(errs, validateTemplate(templateAsPods(s), sel, "StatefulSet", tp)...)
	} else {
		// The template was invalid before this write: only what makes it a StatefulSet's.
		t := &s.Template
		if sel != nil && !sel.Empty() && !sel.Matches(labels.Set(t.Labels)) {
			errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), t.Labels, "`selector` does not match template `labels`"))
		}
		if t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
			errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), t.Spec.RestartPolicy, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
		}
		if t.Spec.ActiveDeadlineSeconds != nil {
			errs = append(errs, field.Forbidden(tp.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in StatefulSet is not Supported"))
		}
	}
	return errs
}

// templateAsPods is the template as the controller turns it into pods, for validation:
// hostname and subdomain are the controller's to set, and each claim template becomes a
// volume of that name (replacing a template volume of the same name), which containers may
// mount.
func templateAsPods(s *appsv1.StatefulSetSpec) *corev1.PodTemplateSpec {
	t := s.Template.DeepCopy()
	t.Spec.Hostname, t.Spec.Subdomain = "", ""
	if len(s.VolumeClaimTemplates) == 0 {
		return t
	}
	claims := map[string]bool{}
	var volumes []corev1.Volume
	for _, c := range s.VolumeClaimTemplates {
		if claims[c.Name] {
			continue // reported as a duplicate of the claim templates
		}
		claims[c.Name] = true
		volumes = append(volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name}}})
	}
	for _, v := range t.Spec.Volumes {
		if !claims[v.Name] {
			volumes = append(volumes, v)
		}
	}
	t.Spec.Volumes = volumes
	return t
}

// validateStatefulSetRollingUpdate checks partition and maxUnavailable: a count of at least 1
// or a percentage in (0%, 100%].
func validateStatefulSetRollingUpdate(ru *appsv1.RollingUpdateStatefulSetStrategy, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ru.Partition != nil {
		errs = append(errs, nonNegative(*ru.Partition, p.Child("partition"))...)
	}
	mu := ru.MaxUnavailable
	if mu == nil {
		return errs
	}
	mp := p.Child("maxUnavailable")
	// A string that is no percentage counts as the number it spells (0 if none), as in
	// Kubernetes, so that "0" is also told it cannot be 0.
	value := mu.IntValue()
	switch mu.Type {
	case intstr.String:
		msgs := validation.IsValidPercent(mu.StrVal)
		for _, msg := range msgs {
			errs = append(errs, field.Invalid(mp, *mu, msg))
		}
		if len(msgs) == 0 {
			value, _ = intstr.GetScaledValueFromIntOrPercent(mu, 100, false)
			if value > 100 {
				errs = append(errs, field.Invalid(mp, *mu, "must not be greater than 100%"))
			}
		}
	default:
		errs = append(errs, nonNegative(int64(value), mp)...)
	}
	if value == 0 {
		errs = append(errs, field.Invalid(mp, *mu, "cannot be 0"))
	}
	return errs
}

// validateClaimTemplates checks each claim template as the claim it becomes, and that their
// names differ: each names both its claims and the pod volume they are mounted through.
func validateClaimTemplates(templates []corev1.PersistentVolumeClaim) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	tp := specPath.Child("volumeClaimTemplates")
	for i := range templates {
		c := templates[i].DeepCopy()
		if c.Name != "" {
			errs = append(errs, unique(seen, c.Name, tp.Index(i).Child("metadata", "name"), c.Name)...)
		}
		// Only the spec is the template's to check; status is whatever the client sent.
		c.Status = corev1.PersistentVolumeClaimStatus{}
		prefix := tp.Index(i).String() + "."
		for _, e := range validatePersistentVolumeClaim(c) {
			e.Field = prefix + e.Field
			errs = append(errs, e)
		}
	}
	return errs
}

// validateStatefulSetUpdate checks an update: the new spec as on create (less what Kubernetes
// tolerates from before), only the fields the controller can act on changed, and the status
// the controller writes consistent with itself.
func validateStatefulSetUpdate(ss, old *appsv1.StatefulSet) field.ErrorList {
	checks := statefulSetChecks{podTemplate: true}
	if len(validateStatefulSetSpec(&old.Spec, checks)) > 0 {
		checks.podTemplate = false
	}
	errs := validateStatefulSetSpec(&ss.Spec, checks)
	rest := ss.Spec.DeepCopy()
	rest.Replicas, rest.Template, rest.UpdateStrategy = old.Spec.Replicas, old.Spec.Template, old.Spec.UpdateStrategy
	rest.MinReadySeconds, rest.Ordinals, rest.RevisionHistoryLimit = old.Spec.MinReadySeconds, old.Spec.Ordinals, old.Spec.RevisionHistoryLimit
	rest.PersistentVolumeClaimRetentionPolicy = old.Spec.PersistentVolumeClaimRetentionPolicy
	if !apiequality.Semantic.DeepEqual(rest, &old.Spec) {
		errs = append(errs, field.Forbidden(specPath, "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"))
	}
	return append(errs, validateStatefulSetStatus(&ss.Status, old.Status.CollisionCount)...)
}

func validateStatefulSetStatus(st *appsv1.StatefulSetStatus, oldCollisions *int32) field.ErrorList {
	sp := field.NewPath("status")
	var errs field.ErrorList
	counts := []struct {
		name string
		v    int32
	}{
		{"replicas", st.Replicas}, {"readyReplicas", st.ReadyReplicas}, {"currentReplicas", st.CurrentReplicas},
		{"updatedReplicas", st.UpdatedReplicas}, {"availableReplicas", st.AvailableReplicas},
	}
	for _, c := range counts {
		errs = append(errs, nonNegative(c.v, sp.Child(c.name))...)
	}
	errs = append(errs, nonNegative(st.ObservedGeneration, sp.Child("observedGeneration"))...)
	if st.CollisionCount != nil {
		errs = append(errs, nonNegative(*st.CollisionCount, sp.Child("collisionCount"))...)
	}
	for _, c := range counts[1:] {
		if c.v > st.Replicas {
			errs = append(errs, field.Invalid(sp.Child(c.name), c.v, "cannot be greater than status.replicas"))
		}
	}
	if st.AvailableReplicas > st.ReadyReplicas {
		errs = append(errs, field.Invalid(sp.Child("availableReplicas"), st.AvailableReplicas, "cannot be greater than status.readyReplicas"))
	}
	// The count only grows: it makes revision names unique, and going back could reuse one.
	if oldCollisions != nil && (st.CollisionCount == nil || *st.CollisionCount < *oldCollisions) {
		errs = append(errs, field.Invalid(sp.Child("collisionCount"), deref(st.CollisionCount), "cannot be decremented"))
	}
	return errs
}
