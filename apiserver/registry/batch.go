package registry

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// batch/v1: Jobs run pods to completion; CronJobs make Jobs on a schedule. The rules follow
// Kubernetes v1.36's batch validation: a Job's selector is generated from its UID unless
// spec.manualSelector asks otherwise, its template restarts OnFailure or Never, and most of its
// spec is fixed once it exists.

var batchV1 = batchv1.SchemeGroupVersion

// The unprefixed labels a Job's pods carried before batch.kubernetes.io/job-name and
// batch.kubernetes.io/controller-uid; Jobs still set and check both.
const (
	legacyJobNameLabel       = "job-name"
	legacyControllerUIDLabel = "controller-uid"
)

// Limits Kubernetes puts on Indexed Jobs and on the policies' sizes.
const (
	maxIndexedParallelism  = 100_000
	maxFailedIndexes       = 100_000
	indexedCompletionsSoft = 100_000
	highCompletionsLimit   = 10_000
	maxFailurePolicyRules  = 20
	maxExitCodeValues      = 255
	maxConditionPatterns   = 20
	maxSuccessPolicyRules  = 20
	maxSucceededIndexesLen = 64 * 1024
	maxManagedByLen        = 63
	// cronJobNameMax leaves room for the "-<minutes>" suffix of the Jobs a CronJob makes
	// within a 63-character name.
	cronJobNameMax = validation.DNS1035LabelMaxLength - 11
)

var jobs = &Def[*batchv1.Job]{
	Info: Info{GroupVersion: batchV1, Resource: "jobs", Singular: "job", Kind: "Job",
		Categories: []string{"all"}, Namespaced: true, Status: true},
	NewList:  func() runtime.Object { return &batchv1.JobList{} },
	Defaults: defaultJob,
	Create:   generateJobSelector,
	Validate: func(j *batchv1.Job) field.ErrorList {
		errs := validateGeneratedJobSelector(j)
		errs = append(errs, validateJobSpec(&j.Spec, specPath)...)
		if j.Spec.Selector == nil {
			errs = append(errs, field.Required(specPath.Child("selector"), ""))
		} else if sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector); err == nil && !sel.Matches(labels.Set(j.Spec.Template.Labels)) {
			errs = append(errs, field.Invalid(specPath.Child("template", "metadata", "labels"), j.Spec.Template.Labels, "`selector` does not match template `labels`"))
		}
		if isIndexed(&j.Spec) && deref(j.Spec.Completions) > 0 {
			// Indexed pods get the hostname <job>-<index>: the largest must be a DNS label.
			host := fmt.Sprintf("%s-%d", j.Name, *j.Spec.Completions-1)
			if len(validation.IsDNS1123Label(host)) > 0 {
				errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), j.Name, "will not able to create pod with invalid DNS label: "+host))
			}
		}
		return errs
	},
	ValidateUpdate: validateJobUpdate,
	Columns: columns(
		Column("Status", "string", 0, "Status of the job."),
		Column("Completions", "string", 0, "The number of pods which reached phase Succeeded."),
		Column("Duration", "string", 0, "Time required to complete the job."),
		AgeColumn,
		replicaColumns[4], replicaColumns[5], replicaColumns[6],
	),
	Row: func(j *batchv1.Job) []any {
		names, images := containerCells(j.Spec.Template.Spec.Containers)
		return []any{jobStatusCell(j), completionsCell(j), jobDurationCell(j), Age(j.CreationTimestamp),
			names, images, metav1.FormatLabelSelector(j.Spec.Selector)}
	},
}

func defaultJob(j *batchv1.Job) {
	s := &j.Spec
	if s.Completions == nil && s.Parallelism == nil {
		s.Completions = new(int32(1))
	}
	if s.Parallelism == nil {
		s.Parallelism = new(int32(1))
	}
	if s.BackoffLimit == nil {
		if s.BackoffLimitPerIndex != nil {
			s.BackoffLimit = new(int32(math.MaxInt32))
		} else {
			s.BackoffLimit = new(int32(6))
		}
	}
	if len(j.Labels) == 0 && s.Template.Labels != nil {
		j.Labels = s.Template.Labels
	}
	if s.CompletionMode == nil {
		s.CompletionMode = new(batchv1.NonIndexedCompletion)
	}
	if s.Suspend == nil {
		s.Suspend = new(false)
	}
	if s.PodReplacementPolicy == nil {
		if s.PodFailurePolicy != nil {
			s.PodReplacementPolicy = new(batchv1.Failed)
		} else {
			s.PodReplacementPolicy = new(batchv1.TerminatingOrFailed)
		}
	}
	if s.ManualSelector == nil {
		s.ManualSelector = new(false)
	}
	defaultPodSpec(&s.Template.Spec)
}

// generateJobSelector labels a new Job's pod template with the Job's name and UID and selects
// on the UID, so that its pods are its alone (unless spec.manualSelector is set). Labels the
// user set are kept; validation refuses them if they do not match.
func generateJobSelector(j *batchv1.Job) {
	if deref(j.Spec.ManualSelector) {
		return
	}
	t := &j.Spec.Template
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	for _, k := range []string{legacyJobNameLabel, batchv1.JobNameLabel} {
		if _, ok := t.Labels[k]; !ok {
			t.Labels[k] = j.Name
		}
	}
	for _, k := range []string{legacyControllerUIDLabel, batchv1.ControllerUidLabel} {
		if _, ok := t.Labels[k]; !ok {
			t.Labels[k] = string(j.UID)
		}
	}
	if j.Spec.Selector == nil {
		j.Spec.Selector = &metav1.LabelSelector{}
	}
	if j.Spec.Selector.MatchLabels == nil {
		j.Spec.Selector.MatchLabels = map[string]string{}
	}
	if _, ok := j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel]; !ok {
		j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel] = string(j.UID)
	}
}

// validateGeneratedJobSelector: a generated selector and the template's labels must name this
// Job (its UID and name), so that no other Job's pods match.
func validateGeneratedJobSelector(j *batchv1.Job) field.ErrorList {
	if deref(j.Spec.ManualSelector) || j.Spec.Selector == nil {
		return nil
	}
	var errs field.ErrorList
	if j.UID == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "uid"), ""))
	}
	lp := specPath.Child("template", "metadata", "labels")
	want := map[string]string{
		legacyControllerUIDLabel: string(j.UID), legacyJobNameLabel: j.Name,
		batchv1.ControllerUidLabel: string(j.UID), batchv1.JobNameLabel: j.Name,
	}
	for _, k := range []string{legacyControllerUIDLabel, legacyJobNameLabel, batchv1.ControllerUidLabel, batchv1.JobNameLabel} {
		switch v, ok := j.Spec.Template.Labels[k]; {
		case !ok:
			errs = append(errs, field.Required(lp.Key(k), fmt.Sprintf("must be '%s'", want[k])))
		case v != want[k]:
			errs = append(errs, field.Invalid(lp.Key(k), v, fmt.Sprintf("must be '%s'", want[k])))
		}
	}
	if sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector); err == nil && !sel.Matches(labels.Set(want)) {
		errs = append(errs, field.Invalid(specPath.Child("selector"), j.Spec.Selector, "`selector` not auto-generated"))
	}
	return errs
}

func isIndexed(s *batchv1.JobSpec) bool {
	return deref(s.CompletionMode) == batchv1.IndexedCompletion
}

// validateJobSpec checks a Job's spec, in a Job or in a CronJob's jobTemplate (p is its path).
func validateJobSpec(s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		v    *int32
		name string
	}{{s.Parallelism, "parallelism"}, {s.Completions, "completions"}, {s.BackoffLimit, "backoffLimit"},
		{s.TTLSecondsAfterFinished, "ttlSecondsAfterFinished"}, {s.BackoffLimitPerIndex, "backoffLimitPerIndex"},
		{s.MaxFailedIndexes, "maxFailedIndexes"}} {
		if f.v != nil {
			errs = append(errs, nonNegative(*f.v, p.Child(f.name))...)
		}
	}
	if s.ActiveDeadlineSeconds != nil {
		errs = append(errs, nonNegative(*s.ActiveDeadlineSeconds, p.Child("activeDeadlineSeconds"))...)
	}
	if s.MaxFailedIndexes != nil && s.BackoffLimitPerIndex == nil {
		errs = append(errs, field.Required(p.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
	}
	if m := s.ManagedBy; m != nil {
		errs = append(errs, validation.IsDomainPrefixedPath(p.Child("managedBy"), *m)...)
		if len(*m) > maxManagedByLen {
			errs = append(errs, field.TooLong(p.Child("managedBy"), "", maxManagedByLen))
		}
	}
	errs = append(errs, validateCompletionMode(s, p)...)
	if s.PodFailurePolicy != nil {
		errs = append(errs, validatePodFailurePolicy(s, p.Child("podFailurePolicy"))...)
	}
	if s.SuccessPolicy != nil {
		if !isIndexed(s) {
			errs = append(errs, field.Invalid(p.Child("successPolicy"), *s.SuccessPolicy, "requires indexed completion mode"))
		} else {
			errs = append(errs, validateSuccessPolicy(s, p.Child("successPolicy"))...)
		}
	}
	if r := s.PodReplacementPolicy; r != nil {
		switch {
		case s.PodFailurePolicy != nil && *r != batchv1.Failed:
			errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *r, []batchv1.PodReplacementPolicy{batchv1.Failed}))
		case s.PodFailurePolicy == nil && *r != batchv1.Failed && *r != batchv1.TerminatingOrFailed:
			errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *r, []batchv1.PodReplacementPolicy{batchv1.Failed, batchv1.TerminatingOrFailed}))
		}
	}
	tp := p.Child("template")
	errs = append(errs, validatePodTemplate(&s.Template, tp)...)
	rp := tp.Child("spec", "restartPolicy")
	switch rest := s.Template.Spec.RestartPolicy; {
	case rest == corev1.RestartPolicyAlways || rest == "":
		errs = append(errs, field.Required(rp, fmt.Sprintf("valid values: %q, %q", corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)))
	case rest != corev1.RestartPolicyOnFailure && rest != corev1.RestartPolicyNever:
		errs = append(errs, field.NotSupported(rp, rest, []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	case s.PodFailurePolicy != nil && rest != corev1.RestartPolicyNever:
		errs = append(errs, field.Invalid(rp, rest, fmt.Sprintf("only %q is supported when podFailurePolicy is specified", corev1.RestartPolicyNever)))
	}
	return errs
}

func validateCompletionMode(s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	mode := deref(s.CompletionMode)
	if s.CompletionMode != nil && mode != batchv1.NonIndexedCompletion && mode != batchv1.IndexedCompletion {
		errs = append(errs, field.NotSupported(p.Child("completionMode"), mode, []batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion}))
	}
	if mode != batchv1.IndexedCompletion {
		if s.BackoffLimitPerIndex != nil {
			errs = append(errs, field.Invalid(p.Child("backoffLimitPerIndex"), *s.BackoffLimitPerIndex, "requires indexed completion mode"))
		}
		if s.MaxFailedIndexes != nil {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *s.MaxFailedIndexes, "requires indexed completion mode"))
		}
		return errs
	}
	if s.Completions == nil {
		errs = append(errs, field.Required(p.Child("completions"), "when completion mode is Indexed"))
	}
	if s.Parallelism != nil && *s.Parallelism > maxIndexedParallelism {
		errs = append(errs, field.Invalid(p.Child("parallelism"), *s.Parallelism, fmt.Sprintf("must be less than or equal to %d when completion mode is Indexed", maxIndexedParallelism)))
	}
	if mf := s.MaxFailedIndexes; mf != nil {
		if s.Completions != nil && *mf > *s.Completions {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *mf, "must be less than or equal to completions"))
		}
		if *mf > maxFailedIndexes {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *mf, fmt.Sprintf("must be less than or equal to %d", maxFailedIndexes)))
		}
	}
	if s.Completions != nil && *s.Completions > indexedCompletionsSoft && s.BackoffLimitPerIndex != nil {
		high := fmt.Sprintf("when completions are above %d and used with backoff limit per index", indexedCompletionsSoft)
		if s.MaxFailedIndexes == nil {
			errs = append(errs, field.Required(p.Child("maxFailedIndexes"), fmt.Sprintf("must be specified when completions is above %d", indexedCompletionsSoft)))
		} else if *s.MaxFailedIndexes > highCompletionsLimit {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *s.MaxFailedIndexes, fmt.Sprintf("must be less than or equal to %d %s", highCompletionsLimit, high)))
		}
		if s.Parallelism != nil && *s.Parallelism > highCompletionsLimit {
			errs = append(errs, field.Invalid(p.Child("parallelism"), *s.Parallelism, fmt.Sprintf("must be less than or equal to %d %s", highCompletionsLimit, high)))
		}
	}
	return errs
}

func validatePodFailurePolicy(s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	rp := p.Child("rules")
	if n := len(s.PodFailurePolicy.Rules); n > maxFailurePolicyRules {
		errs = append(errs, field.TooMany(rp, n, maxFailurePolicyRules))
	}
	containers := map[string]bool{}
	for _, c := range append(slices.Clone(s.Template.Spec.InitContainers), s.Template.Spec.Containers...) {
		containers[c.Name] = true
	}
	actions := []batchv1.PodFailurePolicyAction{batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyActionFailIndex,
		batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionIgnore}
	for i, r := range s.PodFailurePolicy.Rules {
		p := rp.Index(i)
		switch {
		case r.Action == "":
			errs = append(errs, field.Required(p.Child("action"), fmt.Sprintf("valid values: %q", actions)))
		case r.Action == batchv1.PodFailurePolicyActionFailIndex && s.BackoffLimitPerIndex == nil:
			errs = append(errs, field.Invalid(p.Child("action"), r.Action, "requires the backoffLimitPerIndex to be set"))
		case !slices.Contains(actions, r.Action):
			errs = append(errs, field.NotSupported(p.Child("action"), r.Action, actions))
		}
		if r.OnExitCodes != nil {
			errs = append(errs, validateOnExitCodes(r.OnExitCodes, containers, p.Child("onExitCodes"))...)
		}
		cp := p.Child("onPodConditions")
		if n := len(r.OnPodConditions); n > maxConditionPatterns {
			errs = append(errs, field.TooMany(cp, n, maxConditionPatterns))
		}
		for j, c := range r.OnPodConditions {
			errs = append(errs, msgs(cp.Index(j).Child("type"), c.Type, validation.IsQualifiedName(string(c.Type)))...)
			statuses := []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionUnknown}
			if c.Status == "" {
				errs = append(errs, field.Required(cp.Index(j).Child("status"), fmt.Sprintf("valid values: %q", statuses)))
			} else if !slices.Contains(statuses, c.Status) {
				errs = append(errs, field.NotSupported(cp.Index(j).Child("status"), c.Status, statuses))
			}
		}
		switch {
		case r.OnExitCodes != nil && len(r.OnPodConditions) > 0:
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, "specifying both OnExitCodes and OnPodConditions is not supported"))
		case r.OnExitCodes == nil && len(r.OnPodConditions) == 0:
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, "specifying one of OnExitCodes and OnPodConditions is required"))
		}
	}
	return errs
}

func validateOnExitCodes(r *batchv1.PodFailurePolicyOnExitCodesRequirement, containers map[string]bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	ops := []batchv1.PodFailurePolicyOnExitCodesOperator{batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyOnExitCodesOpNotIn}
	if r.Operator == "" {
		errs = append(errs, field.Required(p.Child("operator"), fmt.Sprintf("valid values: %q", ops)))
	} else if !slices.Contains(ops, r.Operator) {
		errs = append(errs, field.NotSupported(p.Child("operator"), r.Operator, ops))
	}
	if r.ContainerName != nil && !containers[*r.ContainerName] {
		errs = append(errs, field.Invalid(p.Child("containerName"), *r.ContainerName, "must be one of the container or initContainer names in the pod template"))
	}
	vp := p.Child("values")
	if len(r.Values) == 0 {
		errs = append(errs, field.Invalid(vp, r.Values, "at least one value is required"))
	} else if len(r.Values) > maxExitCodeValues {
		errs = append(errs, field.TooMany(vp, len(r.Values), maxExitCodeValues))
	}
	seen := map[int32]bool{}
	for j, v := range r.Values {
		if r.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && v == 0 {
			errs = append(errs, field.Invalid(vp.Index(j), v, "must not be 0 for the In operator"))
		}
		errs = append(errs, unique(seen, v, vp.Index(j), v)...)
	}
	if !slices.IsSorted(r.Values) {
		errs = append(errs, field.Invalid(vp, r.Values, "must be ordered"))
	}
	return errs
}

func validateSuccessPolicy(s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	rp := p.Child("rules")
	rules := s.SuccessPolicy.Rules
	if len(rules) == 0 {
		errs = append(errs, field.Required(rp, "at least one rules must be specified when the successPolicy is specified"))
	}
	if len(rules) > maxSuccessPolicyRules {
		errs = append(errs, field.TooMany(rp, len(rules), maxSuccessPolicyRules))
	}
	completions := deref(s.Completions)
	for i, r := range rules {
		p := rp.Index(i)
		if r.SucceededCount == nil && r.SucceededIndexes == nil {
			errs = append(errs, field.Required(p, "at least one of succeededCount or succeededIndexes must be specified"))
		}
		var total int32
		if r.SucceededIndexes != nil {
			ip := p.Child("succeededIndexes")
			if len(*r.SucceededIndexes) > maxSucceededIndexesLen {
				errs = append(errs, field.TooLong(ip, "", maxSucceededIndexesLen))
			}
			n, err := ParseIndexes(*r.SucceededIndexes, completions)
			if err != nil {
				errs = append(errs, field.Invalid(ip, *r.SucceededIndexes, "error parsing succeededIndexes: "+err.Error()))
			}
			total = n
		}
		if c := r.SucceededCount; c != nil {
			cp := p.Child("succeededCount")
			errs = append(errs, nonNegative(*c, cp)...)
			if *c > completions {
				errs = append(errs, field.Invalid(cp, *c, fmt.Sprintf("must be less than or equal to %d (the number of specified completions)", completions)))
			}
			if r.SucceededIndexes != nil && *c > total {
				errs = append(errs, field.Invalid(cp, *c, fmt.Sprintf("must be less than or equal to %d (the number of indexes in the specified succeededIndexes field)", total)))
			}
		}
	}
	return errs
}

// ParseIndexes checks an index list such as "1,3-5,7" (ordered, non-overlapping intervals of
// indexes below completions) and returns how many indexes it holds.
func ParseIndexes(s string, completions int32) (int32, error) {
	if s == "" {
		return 0, nil
	}
	var total int32
	prev := int32(-1)
	for _, part := range strings.Split(s, ",") {
		first, last, err := parseInterval(part, completions)
		if err != nil {
			return 0, err
		}
		if first <= prev {
			return 0, fmt.Errorf("non-increasing order, previous: %d, current: %d", prev, first)
		}
		total += last - first + 1
		prev = last
	}
	return total, nil
}

func parseInterval(s string, completions int32) (int32, int32, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	first, err := parseIndex(lo, completions)
	if err != nil {
		return 0, 0, err
	}
	if !isRange {
		return first, first, nil
	}
	last, err := parseIndex(hi, completions)
	if err != nil {
		return 0, 0, err
	}
	if last <= first {
		return 0, 0, fmt.Errorf("non-increasing order, previous: %d, current: %d", first, last)
	}
	return first, last, nil
}

func parseIndex(s string, completions int32) (int32, error) {
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil || fmt.Sprint(n) != s {
		return 0, fmt.Errorf("cannot convert string to integer for index: %q", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("index must be non-negative: %d", n)
	}
	if n >= int64(completions) {
		return 0, fmt.Errorf("too large index: %d", n)
	}
	return int32(n), nil
}

func validateJobUpdate(j, old *batchv1.Job) field.ErrorList {
	var errs field.ErrorList
	s, o := &j.Spec, &old.Spec
	cp := specPath.Child("completions")
	switch {
	case !isIndexed(s):
		if !apiequality.Semantic.DeepEqual(s.Completions, o.Completions) {
			errs = append(errs, immutable(s.Completions, cp)...)
		}
	case s.Completions != nil && !apiequality.Semantic.DeepEqual(s.Completions, o.Completions) && *s.Completions != deref(s.Parallelism):
		// An Indexed Job scales elastically: completions and parallelism change together.
		errs = append(errs, field.Invalid(cp, s.Completions, "can only be modified in tandem with spec.parallelism"))
	}
	for _, f := range []struct {
		new, old any
		name     string
	}{{s.Selector, o.Selector, "selector"}, {s.CompletionMode, o.CompletionMode, "completionMode"},
		{s.PodFailurePolicy, o.PodFailurePolicy, "podFailurePolicy"}, {s.BackoffLimitPerIndex, o.BackoffLimitPerIndex, "backoffLimitPerIndex"},
		{s.ManagedBy, o.ManagedBy, "managedBy"}, {s.SuccessPolicy, o.SuccessPolicy, "successPolicy"}} {
		if !apiequality.Semantic.DeepEqual(f.new, f.old) {
			errs = append(errs, immutable(f.new, specPath.Child(f.name))...)
		}
	}
	// The template is fixed once the Job runs. A suspended Job that never started may change
	// where its pods go (node affinity, selector, tolerations, scheduling gates, labels and
	// annotations), so that a queueing system can place it before letting it start.
	oldTemplate := o.Template.DeepCopy()
	if deref(o.Suspend) && old.Status.StartTime == nil {
		t := &s.Template
		switch {
		case t.Spec.Affinity == nil && oldTemplate.Spec.Affinity != nil:
			oldTemplate.Spec.Affinity.NodeAffinity = nil
			if *oldTemplate.Spec.Affinity == (corev1.Affinity{}) {
				oldTemplate.Spec.Affinity = nil
			}
		case t.Spec.Affinity != nil && oldTemplate.Spec.Affinity == nil:
			oldTemplate.Spec.Affinity = &corev1.Affinity{NodeAffinity: t.Spec.Affinity.NodeAffinity}
		case t.Spec.Affinity != nil:
			oldTemplate.Spec.Affinity.NodeAffinity = t.Spec.Affinity.NodeAffinity
		}
		oldTemplate.Spec.NodeSelector, oldTemplate.Spec.Tolerations = t.Spec.NodeSelector, t.Spec.Tolerations
		oldTemplate.Spec.SchedulingGates = t.Spec.SchedulingGates
		oldTemplate.Labels, oldTemplate.Annotations = t.Labels, t.Annotations
	}
	if !apiequality.Semantic.DeepEqual(&s.Template, oldTemplate) {
		errs = append(errs, field.Invalid(specPath.Child("template"), field.OmitValueType{}, "field is immutable"))
	}
	return errs
}

func jobStatusCell(j *batchv1.Job) string {
	has := func(t batchv1.JobConditionType) bool {
		return slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
			return c.Type == t && c.Status == corev1.ConditionTrue
		})
	}
	switch {
	case has(batchv1.JobComplete):
		return "Complete"
	case has(batchv1.JobFailed):
		return "Failed"
	case j.DeletionTimestamp != nil:
		return "Terminating"
	case has(batchv1.JobSuspended):
		return "Suspended"
	case has(batchv1.JobFailureTarget):
		return "FailureTarget"
	case has(batchv1.JobSuccessCriteriaMet):
		return "SuccessCriteriaMet"
	}
	return "Running"
}

func completionsCell(j *batchv1.Job) string {
	if c := j.Spec.Completions; c != nil {
		return fmt.Sprintf("%d/%d", j.Status.Succeeded, *c)
	}
	if p := deref(j.Spec.Parallelism); p > 1 {
		return fmt.Sprintf("%d/1 of %d", j.Status.Succeeded, p)
	}
	return fmt.Sprintf("%d/1", j.Status.Succeeded)
}

func jobDurationCell(j *batchv1.Job) string {
	switch st := j.Status; {
	case st.StartTime == nil:
		return ""
	case st.CompletionTime == nil:
		return duration.HumanDuration(time.Since(st.StartTime.Time))
	default:
		return duration.HumanDuration(st.CompletionTime.Sub(st.StartTime.Time))
	}
}

var cronJobs = &Def[*batchv1.CronJob]{
	Info: Info{GroupVersion: batchV1, Resource: "cronjobs", Singular: "cronjob", Kind: "CronJob",
		ShortNames: []string{"cj"}, Categories: []string{"all"}, Namespaced: true, Status: true},
	NewList: func() runtime.Object { return &batchv1.CronJobList{} },
	Defaults: func(c *batchv1.CronJob) {
		s := &c.Spec
		s.ConcurrencyPolicy = or(s.ConcurrencyPolicy, batchv1.AllowConcurrent)
		if s.Suspend == nil {
			s.Suspend = new(false)
		}
		if s.SuccessfulJobsHistoryLimit == nil {
			s.SuccessfulJobsHistoryLimit = new(int32(3))
		}
		if s.FailedJobsHistoryLimit == nil {
			s.FailedJobsHistoryLimit = new(int32(1))
		}
		defaultJobTemplate(&s.JobTemplate.Spec)
	},
	ValidateCreate: func(c *batchv1.CronJob) field.ErrorList {
		errs := validateCronJobSpec(&c.Spec, nil)
		// Only new CronJobs: an old one with a longer name may still be changed or deleted.
		if len(c.Name) > cronJobNameMax {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), c.Name, fmt.Sprintf("must be no more than %d characters", cronJobNameMax)))
		}
		return errs
	},
	ValidateUpdate: func(c, old *batchv1.CronJob) field.ErrorList { return validateCronJobSpec(&c.Spec, &old.Spec) },
	Columns: columns(
		Column("Schedule", "string", 0, "The schedule in Cron format."),
		Column("Timezone", "string", 0, "The time zone name for the given schedule."),
		Column("Suspend", "boolean", 0, "Whether the controller suspends subsequent executions."),
		Column("Active", "integer", 0, "A list of pointers to currently running jobs."),
		Column("Last Schedule", "string", 0, "Information when was the last time the job was successfully scheduled."),
		AgeColumn,
		replicaColumns[4], replicaColumns[5], replicaColumns[6],
	),
	Row: func(c *batchv1.CronJob) []any {
		last := "<none>"
		if t := c.Status.LastScheduleTime; t != nil {
			last = Age(*t)
		}
		tz := "<none>"
		if c.Spec.TimeZone != nil {
			tz = *c.Spec.TimeZone
		}
		names, images := containerCells(c.Spec.JobTemplate.Spec.Template.Spec.Containers)
		// kubectl shows SUSPEND as the words Kubernetes' printer writes, not a JSON bool.
		suspend := map[*bool]string{nil: "<unset>"}[c.Spec.Suspend]
		if c.Spec.Suspend != nil {
			suspend = map[bool]string{true: "True", false: "False"}[*c.Spec.Suspend]
		}
		return []any{c.Spec.Schedule, tz, suspend, int64(len(c.Status.Active)), last, Age(c.CreationTimestamp),
			names, images, metav1.FormatLabelSelector(c.Spec.JobTemplate.Spec.Selector)}
	},
}

// defaultJobTemplate defaults a CronJob's job template as the Job it becomes will be, except
// for what the Job's own creation decides (its selector).
func defaultJobTemplate(s *batchv1.JobSpec) {
	j := &batchv1.Job{Spec: *s}
	defaultJob(j)
	j.Spec.ManualSelector = s.ManualSelector
	*s = j.Spec
}

// validateCronJobSpec checks a CronJob's spec; old, the stored spec on update, relaxes two
// rules: a schedule stored with TZ= may keep it, and an unchanged time zone is not looked up
// again (the machine's zone database may have lost it).
func validateCronJobSpec(s *batchv1.CronJobSpec, old *batchv1.CronJobSpec) field.ErrorList {
	var errs field.ErrorList
	sp := specPath.Child("schedule")
	if s.Schedule == "" {
		errs = append(errs, field.Required(sp, ""))
	} else {
		errs = append(errs, validateSchedule(s.Schedule, old != nil && strings.Contains(old.Schedule, "TZ"), s.TimeZone, sp)...)
	}
	if s.StartingDeadlineSeconds != nil {
		errs = append(errs, nonNegative(*s.StartingDeadlineSeconds, specPath.Child("startingDeadlineSeconds"))...)
	}
	if old == nil || !apiequality.Semantic.DeepEqual(old.TimeZone, s.TimeZone) {
		errs = append(errs, validateTimeZone(s.TimeZone, specPath.Child("timeZone"))...)
	}
	errs = append(errs, oneOf(s.ConcurrencyPolicy, specPath.Child("concurrencyPolicy"), batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent)...)
	jp := specPath.Child("jobTemplate", "spec")
	errs = append(errs, validateJobSpec(&s.JobTemplate.Spec, jp)...)
	if s.JobTemplate.Spec.Selector != nil {
		errs = append(errs, field.Invalid(jp.Child("selector"), s.JobTemplate.Spec.Selector, "`selector` will be auto-generated"))
	}
	if deref(s.JobTemplate.Spec.ManualSelector) {
		errs = append(errs, field.NotSupported(jp.Child("manualSelector"), s.JobTemplate.Spec.ManualSelector, []string{"nil", "false"}))
	}
	if l := s.SuccessfulJobsHistoryLimit; l != nil {
		errs = append(errs, nonNegative(*l, specPath.Child("successfulJobsHistoryLimit"))...)
	}
	if l := s.FailedJobsHistoryLimit; l != nil {
		errs = append(errs, nonNegative(*l, specPath.Child("failedJobsHistoryLimit"))...)
	}
	return errs
}

// ParseSchedule parses a CronJob schedule: five fields (minute, hour, day of month, month, day
// of week) or a macro (@hourly, @daily, ...), as Kubernetes reads them.
func ParseSchedule(s string) (cron.Schedule, error) {
	return cron.ParseStandard(s)
}

func validateSchedule(s string, allowTZ bool, timeZone *string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, err := ParseSchedule(s); err != nil {
		errs = append(errs, field.Invalid(p, s, err.Error()))
	}
	switch {
	case allowTZ && strings.Contains(s, "TZ") && timeZone != nil:
		errs = append(errs, field.Invalid(p, s, "cannot use both timeZone field and TZ or CRON_TZ in schedule"))
	case !allowTZ && strings.Contains(s, "TZ"):
		errs = append(errs, field.Invalid(p, s, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"))
	}
	return errs
}

// timeZonePart is one component of an IANA zone name (digits and '+' allowed for legacy names).
var timeZonePart = regexp.MustCompile(`^[A-Za-z.\-_0-9+]{1,14}$`)

func validateTimeZone(tz *string, p *field.Path) field.ErrorList {
	if tz == nil {
		return nil
	}
	if *tz == "" {
		return field.ErrorList{field.Invalid(p, tz, "timeZone must be nil or non-empty string")}
	}
	for _, part := range strings.Split(*tz, "/") {
		if part == "." || part == ".." || strings.HasPrefix(part, "-") || !timeZonePart.MatchString(part) {
			return field.ErrorList{field.Invalid(p, tz, "unknown time zone "+*tz)}
		}
	}
	if strings.EqualFold(*tz, "Local") {
		return field.ErrorList{field.Invalid(p, tz, "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones")}
	}
	if _, err := time.LoadLocation(*tz); err != nil {
		return field.ErrorList{field.Invalid(p, tz, err.Error())}
	}
	return nil
}
