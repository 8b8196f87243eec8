package registry

import (
	"fmt"
	"math"
	"slices"
	"strings"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// flowcontrol.apiserver.k8s.io/v1: FlowSchemas and PriorityLevelConfigurations are stored,
// defaulted and validated, and the server creates the two mandatory ones of each (exempt and
// catch-all) at start, as kube-apiserver does. kplane does not do API Priority and Fairness:
// no request is classified, queued or rejected by them, and nothing writes their status (the
// FlowSchemas' MissingPL column shows "?"). Kubernetes' suggested objects (system,
// leader-election, workload-high, ...) are not created, and a deleted mandatory object comes
// back only at the server's next start.

var flowcontrolV1 = flowcontrolv1.SchemeGroupVersion

// preserveZeroSharesAnnotation was how v1beta3 clients kept a zero nominalConcurrencyShares;
// v1 has no such need and refuses it.
const preserveZeroSharesAnnotation = "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares"

var flowSchemas = &Def[*flowcontrolv1.FlowSchema]{
	Info: Info{GroupVersion: flowcontrolV1, Resource: "flowschemas", Singular: "flowschema", Kind: "FlowSchema",
		Status: true},
	NewList: func() runtime.Object { return &flowcontrolv1.FlowSchemaList{} },
	Defaults: func(fs *flowcontrolv1.FlowSchema) {
		if fs.Spec.MatchingPrecedence == 0 {
			fs.Spec.MatchingPrecedence = 1000
		}
	},
	Validate: validateFlowSchema,
	Columns: columns(
		Column("PriorityLevel", "string", 0, "The priority level the schema's requests go to."),
		Column("MatchingPrecedence", "string", 0, "Lower numbers match first."),
		Column("DistinguisherMethod", "string", 0, "How the schema's requests are told apart into flows."),
		AgeColumn,
		Column("MissingPL", "string", 0, "references a broken or non-existent PriorityLevelConfiguration"),
	),
	Row: func(fs *flowcontrolv1.FlowSchema) []any {
		method := "<none>"
		if m := fs.Spec.DistinguisherMethod; m != nil {
			method = string(m.Type)
		}
		missing := "?"
		for _, c := range fs.Status.Conditions {
			if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
				missing = string(c.Status)
				break
			}
		}
		return []any{fs.Spec.PriorityLevelConfiguration.Name, int64(fs.Spec.MatchingPrecedence), method, Age(fs.CreationTimestamp), missing}
	},
}

var priorityLevelConfigurations = &Def[*flowcontrolv1.PriorityLevelConfiguration]{
	Info: Info{GroupVersion: flowcontrolV1, Resource: "prioritylevelconfigurations", Singular: "prioritylevelconfiguration",
		Kind: "PriorityLevelConfiguration", Status: true},
	NewList:  func() runtime.Object { return &flowcontrolv1.PriorityLevelConfigurationList{} },
	Defaults: defaultPriorityLevel,
	Validate: validatePriorityLevel,
	Columns: columns(
		Column("Type", "string", 0, "Exempt levels are never limited; Limited ones get a share of the server's concurrency."),
		Column("NominalConcurrencyShares", "string", 0, "The level's share of the server's concurrency."),
		Column("Queues", "string", 0, "The number of queues of the level."),
		Column("HandSize", "string", 0, "The number of queues a flow is shuffle-sharded over."),
		Column("QueueLengthLimit", "string", 0, "The most requests waiting in one queue."),
		AgeColumn,
	),
	Row: func(pl *flowcontrolv1.PriorityLevelConfiguration) []any {
		var shares, queues, hand, length any = "<none>", "<none>", "<none>", "<none>"
		if l := pl.Spec.Limited; l != nil {
			shares = int64(deref(l.NominalConcurrencyShares))
			if q := l.LimitResponse.Queuing; q != nil {
				queues, hand, length = int64(q.Queues), int64(q.HandSize), int64(q.QueueLengthLimit)
			}
		}
		return []any{string(pl.Spec.Type), shares, queues, hand, length, Age(pl.CreationTimestamp)}
	},
}

// flowcontrolResources are the flow-control API's two resources.
func flowcontrolResources() []Strategy {
	return []Strategy{flowSchemas, priorityLevelConfigurations}
}

func defaultPriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) {
	if e := pl.Spec.Exempt; e != nil {
		e.NominalConcurrencyShares = orPtr(e.NominalConcurrencyShares, 0)
		e.LendablePercent = orPtr(e.LendablePercent, 0)
	}
	if l := pl.Spec.Limited; l != nil {
		l.NominalConcurrencyShares = orPtr(l.NominalConcurrencyShares, 30)
		l.LendablePercent = orPtr(l.LendablePercent, 0)
		if q := l.LimitResponse.Queuing; q != nil {
			q.HandSize = or(q.HandSize, 8)
			q.Queues = or(q.Queues, 64)
			q.QueueLengthLimit = or(q.QueueLengthLimit, 50)
		}
	}
}

// orPtr returns p, or a pointer to def when p is nil.
func orPtr[T any](p *T, def T) *T {
	if p == nil {
		return &def
	}
	return p
}

// MandatoryFlowSchemas and MandatoryPriorityLevels are the objects every server has: exempt
// (system:masters, never limited) and catch-all (what no other schema matches). Their specs are
// fixed; the server creates them at start.
func MandatoryFlowSchemas() []*flowcontrolv1.FlowSchema {
	everything := []flowcontrolv1.PolicyRulesWithSubjects{{
		ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"},
			Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"}}},
		NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
	}}
	group := func(name string) flowcontrolv1.Subject {
		return flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: name}}
	}
	exempt := flowcontrolv1.FlowSchemaSpec{
		PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: flowcontrolv1.PriorityLevelConfigurationNameExempt},
		MatchingPrecedence:         1,
		Rules:                      everything,
	}
	exempt.Rules[0].Subjects = []flowcontrolv1.Subject{group("system:masters")}
	catchAll := flowcontrolv1.FlowSchemaSpec{
		PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: flowcontrolv1.PriorityLevelConfigurationNameCatchAll},
		MatchingPrecedence:         flowcontrolv1.FlowSchemaMaxMatchingPrecedence,
		DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
		Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{*everything[0].DeepCopy()},
	}
	catchAll.Rules[0].Subjects = []flowcontrolv1.Subject{group("system:unauthenticated"), group("system:authenticated")}
	return []*flowcontrolv1.FlowSchema{
		{ObjectMeta: mandatoryMeta(flowcontrolv1.FlowSchemaNameExempt), Spec: exempt},
		{ObjectMeta: mandatoryMeta(flowcontrolv1.FlowSchemaNameCatchAll), Spec: catchAll},
	}
}

// MandatoryPriorityLevels: see MandatoryFlowSchemas.
func MandatoryPriorityLevels() []*flowcontrolv1.PriorityLevelConfiguration {
	return []*flowcontrolv1.PriorityLevelConfiguration{
		{ObjectMeta: mandatoryMeta(flowcontrolv1.PriorityLevelConfigurationNameExempt), Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type:   flowcontrolv1.PriorityLevelEnablementExempt,
			Exempt: &flowcontrolv1.ExemptPriorityLevelConfiguration{NominalConcurrencyShares: new(int32(0)), LendablePercent: new(int32(0))},
		}},
		{ObjectMeta: mandatoryMeta(flowcontrolv1.PriorityLevelConfigurationNameCatchAll), Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{NominalConcurrencyShares: new(int32(5)), LendablePercent: new(int32(0)),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}},
		}},
	}
}

// mandatoryMeta marks an object as the server's to keep up to date, as kube-apiserver does.
func mandatoryMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Annotations: map[string]string{flowcontrolv1.AutoUpdateAnnotationKey: "true"}}
}

func mandatoryFlowSchema(name string) *flowcontrolv1.FlowSchema {
	for _, fs := range MandatoryFlowSchemas() {
		if fs.Name == name {
			return fs
		}
	}
	return nil
}

func mandatoryPriorityLevel(name string) *flowcontrolv1.PriorityLevelConfiguration {
	for _, pl := range MandatoryPriorityLevels() {
		if pl.Name == name {
			return pl
		}
	}
	return nil
}

var (
	distinguisherMethods = []flowcontrolv1.FlowDistinguisherMethodType{flowcontrolv1.FlowDistinguisherMethodByNamespaceType, flowcontrolv1.FlowDistinguisherMethodByUserType}
	flowVerbs            = []string{"create", "delete", "deletecollection", "get", "list", "patch", "proxy", "update", "watch"}
	subjectKinds         = []flowcontrolv1.SubjectKind{flowcontrolv1.SubjectKindGroup, flowcontrolv1.SubjectKindServiceAccount, flowcontrolv1.SubjectKindUser}
	priorityLevelTypes   = []flowcontrolv1.PriorityLevelEnablement{flowcontrolv1.PriorityLevelEnablementExempt, flowcontrolv1.PriorityLevelEnablementLimited}
	limitResponseTypes   = []flowcontrolv1.LimitResponseType{flowcontrolv1.LimitResponseTypeQueue, flowcontrolv1.LimitResponseTypeReject}
)

func validateFlowSchema(fs *flowcontrolv1.FlowSchema) field.ErrorList {
	var errs field.ErrorList
	p := specPath
	s := &fs.Spec
	switch {
	case s.MatchingPrecedence <= 0:
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), s.MatchingPrecedence, "must be a positive value"))
	case s.MatchingPrecedence > flowcontrolv1.FlowSchemaMaxMatchingPrecedence:
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), s.MatchingPrecedence, fmt.Sprintf("must not be greater than %d", flowcontrolv1.FlowSchemaMaxMatchingPrecedence)))
	case s.MatchingPrecedence == 1 && fs.Name != flowcontrolv1.FlowSchemaNameExempt:
		errs = append(errs, field.Invalid(p.Child("matchingPrecedence"), s.MatchingPrecedence, "only the schema named 'exempt' may have matchingPrecedence 1"))
	}
	if m := s.DistinguisherMethod; m != nil && !slices.Contains(distinguisherMethods, m.Type) {
		errs = append(errs, field.NotSupported(p.Child("distinguisherMethod", "type"), m.Type, distinguisherMethods))
	}
	if name := s.PriorityLevelConfiguration.Name; name == "" {
		errs = append(errs, field.Required(p.Child("priorityLevelConfiguration", "name"), "must reference a priority level"))
	} else {
		errs = append(errs, dnsSubdomain(name, p.Child("priorityLevelConfiguration", "name"))...)
	}
	for i := range s.Rules {
		errs = append(errs, validateFlowRule(&s.Rules[i], p.Child("rules").Index(i))...)
	}
	if mand := mandatoryFlowSchema(fs.Name); mand != nil && !apiequality.Semantic.DeepEqual(fs.Spec, mand.Spec) {
		errs = append(errs, field.Invalid(p, fs.Spec, fmt.Sprintf("spec of '%s' must equal the fixed value", fs.Name)))
	}
	return append(errs, uniqueConditionTypes(fs.Status.Conditions, func(c flowcontrolv1.FlowSchemaCondition) string { return string(c.Type) })...)
}

// uniqueConditionTypes checks a flow-control status: each condition typed, once.
func uniqueConditionTypes[C any](conditions []C, typeOf func(C) string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, c := range conditions {
		p := field.NewPath("status", "conditions").Index(i).Child("type")
		t := typeOf(c)
		if t == "" {
			errs = append(errs, field.Required(p, ""))
		}
		errs = append(errs, unique(seen, t, p, t)...)
	}
	return errs
}

func validateFlowRule(r *flowcontrolv1.PolicyRulesWithSubjects, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Subjects) == 0 {
		errs = append(errs, field.Required(p.Child("subjects"), "subjects must contain at least one value"))
	}
	for i := range r.Subjects {
		errs = append(errs, validateFlowSubject(&r.Subjects[i], p.Child("subjects").Index(i))...)
	}
	if len(r.ResourceRules) == 0 && len(r.NonResourceRules) == 0 {
		errs = append(errs, field.Required(p, "at least one of resourceRules and nonResourceRules has to be non-empty"))
	}
	for i, rr := range r.ResourceRules {
		rp := p.Child("resourceRules").Index(i)
		errs = append(errs, flowVerbList(rr.Verbs, rp.Child("verbs"))...)
		errs = append(errs, wildcardAlone(rr.APIGroups, rp.Child("apiGroups"), "resource rules must supply at least one api group", "api groups")...)
		errs = append(errs, wildcardAlone(rr.Resources, rp.Child("resources"), "resource rules must supply at least one resource", "resources")...)
		if len(rr.Namespaces) == 0 && !rr.ClusterScope {
			errs = append(errs, field.Required(rp.Child("namespaces"), "resource rules that are not cluster scoped must supply at least one namespace"))
		}
		errs = append(errs, everyOrEach(rr.Namespaces, rp.Child("namespaces"), "namespaces", func(ns string) []string {
			var out []string
			for _, m := range apimachineryvalidation.ValidateNamespaceName(ns, false) {
				out = append(out, "each member of this list must be '*' or a DNS-1123 label; "+m)
			}
			return out
		})...)
	}
	for i, nr := range r.NonResourceRules {
		np := p.Child("nonResourceRules").Index(i)
		errs = append(errs, flowVerbList(nr.Verbs, np.Child("verbs"))...)
		if len(nr.NonResourceURLs) == 0 {
			errs = append(errs, field.Required(np.Child("nonResourceURLs"), "nonResourceURLs must contain at least one value"))
		}
		errs = append(errs, everyOrEach(nr.NonResourceURLs, np.Child("nonResourceURLs"), "non-resource URLs", func(u string) []string {
			if m := nonResourceURLProblem(u); m != "" {
				return []string{m}
			}
			return nil
		})...)
	}
	return errs
}

// everyOrEach checks a list that is either "*" alone or members that problems finds nothing
// wrong with; what names the members in the message about "*".
func everyOrEach(list []string, p *field.Path, what string, problems func(string) []string) field.ErrorList {
	if slices.Contains(list, "*") {
		if len(list) > 1 {
			return field.ErrorList{field.Invalid(p, list, "if '*' is present, must not specify other "+what)}
		}
		return nil
	}
	var errs field.ErrorList
	for i, v := range list {
		for _, m := range problems(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, m))
		}
	}
	return errs
}

// flowVerbList checks a rule's verbs: "*" alone, or known verbs.
func flowVerbList(verbs []string, p *field.Path) field.ErrorList {
	switch {
	case len(verbs) == 0:
		return field.ErrorList{field.Required(p, "verbs must contain at least one value")}
	case slices.Contains(verbs, "*"):
		if len(verbs) > 1 {
			return field.ErrorList{field.Invalid(p, verbs, "if '*' is present, must not specify other verbs")}
		}
	default:
		for _, v := range verbs {
			if !slices.Contains(flowVerbs, v) {
				return field.ErrorList{field.NotSupported(p, verbs, flowVerbs)}
			}
		}
	}
	return nil
}

// wildcardAlone checks a required list in which "*" stands alone.
func wildcardAlone(list []string, p *field.Path, required, what string) field.ErrorList {
	switch {
	case len(list) == 0:
		return field.ErrorList{field.Required(p, required)}
	case len(list) > 1 && slices.Contains(list, "*"):
		return field.ErrorList{field.Invalid(p, list, "if '*' is present, must not specify other "+what)}
	}
	return nil
}

// nonResourceURLProblem says what is wrong with a non-resource URL pattern: an absolute path,
// with at most a trailing "/*".
func nonResourceURLProblem(u string) string {
	switch {
	case u == "":
		return "must not be empty"
	case u == "/":
		return ""
	case !strings.HasPrefix(u, "/"):
		return "must start with slash"
	case strings.Contains(u, " "):
		return "must not contain white-space"
	case strings.Contains(u, "//"):
		return "must not contain double slash"
	}
	if n := strings.Count(u, "*"); n > 1 || n == 1 && !strings.HasSuffix(u, "/*") {
		return "wildcard can only do suffix matching"
	}
	return ""
}

// validateFlowSubject checks a subject: the member its kind names is there and well formed,
// the other two are not set.
func validateFlowSubject(s *flowcontrolv1.Subject, p *field.Path) field.ErrorList {
	members := []struct {
		kind  flowcontrolv1.SubjectKind
		field string
		set   bool
	}{
		{flowcontrolv1.SubjectKindServiceAccount, "serviceAccount", s.ServiceAccount != nil},
		{flowcontrolv1.SubjectKindUser, "user", s.User != nil},
		{flowcontrolv1.SubjectKindGroup, "group", s.Group != nil},
	}
	var errs field.ErrorList
	switch {
	case !slices.Contains(subjectKinds, s.Kind):
		return field.ErrorList{field.NotSupported(p.Child("kind"), s.Kind, subjectKinds)}
	case s.Kind == flowcontrolv1.SubjectKindServiceAccount && s.ServiceAccount != nil:
		sp := p.Child("serviceAccount")
		sa := s.ServiceAccount
		if sa.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), ""))
		} else if sa.Name != flowcontrolv1.NameAll {
			errs = append(errs, dnsSubdomain(sa.Name, sp.Child("name"))...)
		}
		if sa.Namespace == "" {
			errs = append(errs, field.Required(sp.Child("namespace"), "must specify namespace for service account"))
		} else {
			errs = append(errs, dnsLabel(sa.Namespace, sp.Child("namespace"))...)
		}
	case s.Kind == flowcontrolv1.SubjectKindUser && s.User != nil && s.User.Name == "":
		errs = append(errs, field.Required(p.Child("user", "name"), ""))
	case s.Kind == flowcontrolv1.SubjectKindGroup && s.Group != nil && s.Group.Name == "":
		errs = append(errs, field.Required(p.Child("group", "name"), ""))
	}
	for _, m := range members {
		switch {
		case m.kind == s.Kind && !m.set:
			errs = append(errs, field.Required(p.Child(m.field), fmt.Sprintf("%s is required when subject kind is '%s'", m.field, m.kind)))
		case m.kind != s.Kind && m.set:
			errs = append(errs, field.Forbidden(p.Child(m.field), fmt.Sprintf("%s is forbidden when subject kind is not '%s'", m.field, m.kind)))
		}
	}
	return errs
}

func validatePriorityLevel(pl *flowcontrolv1.PriorityLevelConfiguration) field.ErrorList {
	var errs field.ErrorList
	if _, ok := pl.Annotations[preserveZeroSharesAnnotation]; ok {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations"), fmt.Sprintf("annotation '%s' is forbidden", preserveZeroSharesAnnotation)))
	}
	p := specPath
	s := &pl.Spec
	if (pl.Name == flowcontrolv1.PriorityLevelConfigurationNameExempt) != (s.Type == flowcontrolv1.PriorityLevelEnablementExempt) {
		errs = append(errs, field.Invalid(p.Child("type"), s.Type, "must be 'Exempt' if and only if `name` is 'exempt'"))
	}
	switch s.Type {
	case flowcontrolv1.PriorityLevelEnablementExempt:
		if s.Limited != nil {
			errs = append(errs, field.Forbidden(p.Child("limited"), "must be nil if the type is not Limited"))
		}
		if e := s.Exempt; e != nil {
			if v := e.NominalConcurrencyShares; v != nil && *v < 0 {
				errs = append(errs, field.Invalid(p.Child("exempt", "nominalConcurrencyShares"), *v, "must be a non-negative integer"))
			}
			errs = append(errs, percent(e.LendablePercent, p.Child("exempt", "lendablePercent"))...)
		}
	case flowcontrolv1.PriorityLevelEnablementLimited:
		if s.Exempt != nil {
			errs = append(errs, field.Forbidden(p.Child("exempt"), "must be nil if the type is Limited"))
		}
		if s.Limited == nil {
			errs = append(errs, field.Required(p.Child("limited"), "must not be empty when type is Limited"))
		} else {
			errs = append(errs, validateLimited(s.Limited, p.Child("limited"))...)
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), s.Type, priorityLevelTypes))
	}
	if mand := mandatoryPriorityLevel(pl.Name); mand != nil {
		have := s.DeepCopy()
		msg := fmt.Sprintf("spec of '%s' must equal the fixed value", pl.Name)
		if pl.Name == flowcontrolv1.PriorityLevelConfigurationNameExempt {
			// The exempt level's shares and lending are the operator's to tune.
			have.Exempt = mand.Spec.Exempt
			msg = fmt.Sprintf("spec of '%s' except the 'spec.exempt' field must equal the fixed value", pl.Name)
		}
		if !apiequality.Semantic.DeepEqual(*have, mand.Spec) {
			errs = append(errs, field.Invalid(p, pl.Spec, msg))
		}
	}
	return append(errs, uniqueConditionTypes(pl.Status.Conditions, func(c flowcontrolv1.PriorityLevelConfigurationCondition) string { return string(c.Type) })...)
}

func percent(v *int32, p *field.Path) field.ErrorList {
	if v != nil && (*v < 0 || *v > 100) {
		return field.ErrorList{field.Invalid(p, *v, "must be between 0 and 100, inclusive")}
	}
	return nil
}

// maxQueues bounds a level's queues (Kubernetes' limit, 10^7).
const maxQueues = 10_000_000

// maxHashBits is how many bits of a flow's hash shuffle sharding may consume.
const maxHashBits = 60

func validateLimited(l *flowcontrolv1.LimitedPriorityLevelConfiguration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if v := l.NominalConcurrencyShares; v != nil && *v < 0 {
		errs = append(errs, field.Invalid(p.Child("nominalConcurrencyShares"), *v, "must be a non-negative integer"))
	}
	rp := p.Child("limitResponse")
	r := l.LimitResponse
	switch r.Type {
	case flowcontrolv1.LimitResponseTypeReject:
		if r.Queuing != nil {
			errs = append(errs, field.Forbidden(rp.Child("queuing"), "must be nil if limited.limitResponse.type is not Limited"))
		}
	case flowcontrolv1.LimitResponseTypeQueue:
		if r.Queuing == nil {
			errs = append(errs, field.Required(rp.Child("queuing"), "must not be empty if limited.limitResponse.type is Limited"))
		} else {
			errs = append(errs, validateQueuing(r.Queuing, rp.Child("queuing"))...)
		}
	default:
		errs = append(errs, field.NotSupported(rp.Child("type"), r.Type, limitResponseTypes))
	}
	errs = append(errs, percent(l.LendablePercent, p.Child("lendablePercent"))...)
	if v := l.BorrowingLimitPercent; v != nil && *v < 0 {
		errs = append(errs, field.Invalid(p.Child("borrowingLimitPercent"), *v, "if specified, must be a non-negative integer"))
	}
	return errs
}

func validateQueuing(q *flowcontrolv1.QueuingConfiguration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if q.QueueLengthLimit <= 0 {
		errs = append(errs, field.Invalid(p.Child("queueLengthLimit"), q.QueueLengthLimit, "must be positive"))
	}
	switch {
	case q.Queues <= 0:
		errs = append(errs, field.Invalid(p.Child("queues"), q.Queues, "must be positive"))
	case q.Queues > maxQueues:
		errs = append(errs, field.Invalid(p.Child("queues"), q.Queues, fmt.Sprintf("must not be greater than %d", maxQueues)))
	}
	switch {
	case q.HandSize <= 0:
		errs = append(errs, field.Invalid(p.Child("handSize"), q.HandSize, "must be positive"))
	case q.HandSize > q.Queues:
		errs = append(errs, field.Invalid(p.Child("handSize"), q.HandSize, fmt.Sprintf("should not be greater than queues (%d)", q.Queues)))
	case int(math.Ceil(math.Log2(float64(q.Queues))*float64(q.HandSize))) > maxHashBits:
		// Dealing a hand consumes log2(queues) bits of the hash per card.
		errs = append(errs, field.Invalid(p.Child("handSize"), q.HandSize,
			fmt.Sprintf("required entropy bits of deckSize %d and handSize %d should not be greater than %d", q.Queues, q.HandSize, maxHashBits)))
	}
	return errs
}
