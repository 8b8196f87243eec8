package registry

import (
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Pod specs appear in pods and in every controller's template; this file holds what both share:
// the defaults Kubernetes' v1 defaulting applies to a PodSpec, and its validation.

// defaultPodSpec applies the PodSpec defaults of Kubernetes' v1 API, idempotently.
func defaultPodSpec(s *corev1.PodSpec) {
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = new(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	// v1 still serves the deprecated serviceAccount field as a mirror of serviceAccountName;
	// an old client may have set only the former.
	if s.ServiceAccountName == "" {
		s.ServiceAccountName = s.DeprecatedServiceAccount
	}
	s.DeprecatedServiceAccount = s.ServiceAccountName
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i])
	}
	for i := range s.EphemeralContainers {
		defaultContainer((*corev1.Container)(&s.EphemeralContainers[i].EphemeralContainerCommon))
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i].VolumeSource)
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.APIVersion == "" {
			e.ValueFrom.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		p.TimeoutSeconds = or(p.TimeoutSeconds, 1)
		p.PeriodSeconds = or(p.PeriodSeconds, 10)
		p.SuccessThreshold = or(p.SuccessThreshold, 1)
		p.FailureThreshold = or(p.FailureThreshold, 3)
		defaultHTTPGet(p.HTTPGet)
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []*corev1.LifecycleHandler{l.PostStart, l.PreStop} {
			if h != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
}

func defaultHTTPGet(h *corev1.HTTPGetAction) {
	if h != nil {
		h.Path = or(h.Path, "/")
		h.Scheme = or(h.Scheme, corev1.URISchemeHTTP)
	}
}

func defaultVolume(v *corev1.VolumeSource) {
	if reflect.ValueOf(*v).IsZero() {
		v.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	if v.Secret != nil && v.Secret.DefaultMode == nil {
		v.Secret.DefaultMode = new(corev1.SecretVolumeSourceDefaultMode)
	}
	if v.ConfigMap != nil && v.ConfigMap.DefaultMode == nil {
		v.ConfigMap.DefaultMode = new(corev1.ConfigMapVolumeSourceDefaultMode)
	}
	if v.DownwardAPI != nil && v.DownwardAPI.DefaultMode == nil {
		v.DownwardAPI.DefaultMode = new(corev1.DownwardAPIVolumeSourceDefaultMode)
	}
	if v.Projected != nil && v.Projected.DefaultMode == nil {
		v.Projected.DefaultMode = new(corev1.ProjectedVolumeSourceDefaultMode)
	}
	if v.HostPath != nil && v.HostPath.Type == nil {
		v.HostPath.Type = new(corev1.HostPathUnset)
	}
}

// or returns v, or def when v is the zero value.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// imageTag returns an image reference's tag: "latest" when there is neither tag nor digest,
// "" when only a digest pins it (which makes the pull policy IfNotPresent).
func imageTag(image string) string {
	name, _, digest := strings.Cut(image, "@")
	last := name[strings.LastIndexByte(name, '/')+1:] // a registry host may carry a ":port"
	if _, tag, ok := strings.Cut(last, ":"); ok {
		return tag
	}
	if digest {
		return ""
	}
	return "latest"
}

// validatePodSpec checks the rules of a PodSpec that users run into; p is the spec's path.
func validatePodSpec(s *corev1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	volumes := map[string]bool{}
	for i, v := range s.Volumes {
		vp := p.Child("volumes").Index(i).Child("name")
		errs = append(errs, requiredLabel(v.Name, vp)...)
		errs = append(errs, unique(volumes, v.Name, vp, v.Name)...)
	}
	if len(s.Containers) == 0 {
		errs = append(errs, field.Required(p.Child("containers"), ""))
	}
	names := map[string]bool{}
	for i := range s.InitContainers {
		c := &s.InitContainers[i]
		cp := p.Child("initContainers").Index(i)
		errs = append(errs, validateContainer(c, names, volumes, cp)...)
		if c.RestartPolicy != nil && *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			errs = append(errs, field.NotSupported(cp.Child("restartPolicy"), *c.RestartPolicy, []corev1.ContainerRestartPolicy{corev1.ContainerRestartPolicyAlways}))
		}
	}
	for i := range s.Containers {
		errs = append(errs, validateContainer(&s.Containers[i], names, volumes, p.Child("containers").Index(i))...)
	}
	errs = append(errs, oneOf(s.RestartPolicy, p.Child("restartPolicy"), corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)...)
	errs = append(errs, oneOf(s.DNSPolicy, p.Child("dnsPolicy"), corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone)...)
	errs = append(errs, positive32(s.ActiveDeadlineSeconds, p.Child("activeDeadlineSeconds"))...)
	errs = append(errs, metav1validation.ValidateLabels(s.NodeSelector, p.Child("nodeSelector"))...)
	if s.ServiceAccountName != "" {
		errs = append(errs, msgs(p.Child("serviceAccountName"), s.ServiceAccountName, apimachineryvalidation.ValidateServiceAccountName(s.ServiceAccountName, false))...)
	}
	if s.NodeName != "" {
		errs = append(errs, dnsSubdomain(s.NodeName, p.Child("nodeName"))...)
	}
	if s.Hostname != "" {
		errs = append(errs, dnsLabel(s.Hostname, p.Child("hostname"))...)
	}
	if s.Subdomain != "" {
		errs = append(errs, dnsLabel(s.Subdomain, p.Child("subdomain"))...)
	}
	for i, t := range s.Tolerations {
		errs = append(errs, validateToleration(t, p.Child("tolerations").Index(i))...)
	}
	return errs
}

func validateContainer(c *corev1.Container, names, volumes map[string]bool, p *field.Path) field.ErrorList {
	errs := requiredLabel(c.Name, p.Child("name"))
	errs = append(errs, unique(names, c.Name, p.Child("name"), c.Name)...)
	if c.Image == "" {
		errs = append(errs, field.Required(p.Child("image"), ""))
	} else if strings.TrimSpace(c.Image) != c.Image {
		errs = append(errs, field.Invalid(p.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}
	errs = append(errs, oneOf(c.ImagePullPolicy, p.Child("imagePullPolicy"), corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)...)
	portNames := map[string]bool{}
	for i, port := range c.Ports {
		pp := p.Child("ports").Index(i)
		if port.Name != "" {
			errs = append(errs, msgs(pp.Child("name"), port.Name, validation.IsValidPortName(port.Name))...)
			errs = append(errs, unique(portNames, port.Name, pp.Child("name"), port.Name)...)
		}
		errs = append(errs, portNum(port.ContainerPort, pp.Child("containerPort"))...)
		if port.HostPort != 0 {
			errs = append(errs, portNum(port.HostPort, pp.Child("hostPort"))...)
		}
		errs = append(errs, protocol(port.Protocol, pp.Child("protocol"))...)
	}
	for i, e := range c.Env {
		ep := p.Child("env").Index(i).Child("name")
		if e.Name == "" {
			errs = append(errs, field.Required(ep, ""))
		} else {
			errs = append(errs, msgs(ep, e.Name, validation.IsRelaxedEnvVarName(e.Name))...)
		}
	}
	for i, m := range c.VolumeMounts {
		mp := p.Child("volumeMounts").Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(mp.Child("name"), ""))
		} else if !volumes[m.Name] {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		}
	}
	for name, req := range c.Resources.Requests {
		if limit, ok := c.Resources.Limits[name]; ok && req.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(p.Child("resources", "requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
		}
	}
	return errs
}

func validateToleration(t corev1.Toleration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Key != "" {
		errs = append(errs, metav1validation.ValidateLabelName(t.Key, p.Child("key"))...)
	}
	switch t.Operator {
	case corev1.TolerationOpEqual, "":
		if t.Key == "" {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		errs = append(errs, msgs(p.Child("value"), t.Value, validation.IsValidLabelValue(t.Value))...)
	case corev1.TolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
	}
	if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
		errs = append(errs, field.Invalid(p.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
	}
	if t.Effect != "" {
		errs = append(errs, oneOf(t.Effect, p.Child("effect"), corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute)...)
	}
	return errs
}

// validateTemplate checks a controller's pod template: present, labels matching the selector,
// a valid spec that restarts always (a controller replaces pods, it does not run them to completion).
func validateTemplate(t *corev1.PodTemplateSpec, sel labels.Selector, kind string, p *field.Path) field.ErrorList {
	if t == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	if sel != nil && !sel.Empty() && !sel.Matches(labels.Set(t.Labels)) {
		errs = append(errs, field.Invalid(p.Child("metadata", "labels"), t.Labels, "`selector` does not match template `labels`"))
	}
	errs = append(errs, validatePodTemplate(t, p)...)
	if t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(p.Child("spec", "restartPolicy"), t.Spec.RestartPolicy, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	if t.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(p.Child("spec", "activeDeadlineSeconds"), fmt.Sprintf("activeDeadlineSeconds in %s is not Supported", kind)))
	}
	return errs
}

// validatePodTemplate checks any pod template: labels, annotations, a valid pod spec.
func validatePodTemplate(t *corev1.PodTemplateSpec, p *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabels(t.Labels, p.Child("metadata", "labels"))
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(t.Annotations, p.Child("metadata", "annotations"))...)
	return append(errs, validatePodSpec(&t.Spec, p.Child("spec"))...)
}

// containerCells are the wide Containers and Images cells of controllers.
func containerCells(cs []corev1.Container) (names, images string) {
	n, im := make([]string, len(cs)), make([]string, len(cs))
	for i, c := range cs {
		n[i], im[i] = c.Name, c.Image
	}
	return strings.Join(n, ","), strings.Join(im, ",")
}
