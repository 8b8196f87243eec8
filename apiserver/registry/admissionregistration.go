package registry

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// admissionregistration.k8s.io/v1: webhook configurations and admission policies (validating
// and mutating) with their bindings are stored, defaulted and validated structurally as
// Kubernetes does. None of them acts yet: kplane calls no webhook and evaluates no policy, so
// they change no write. Their CEL expressions are only checked for presence, not compiled
// (TODO: compile them, with the policy's variables and params, when policies are enforced).

var admissionregistrationV1 = admissionregistrationv1.SchemeGroupVersion

var apiExtensionsCategory = []string{"api-extensions"}

type (
	validatingWebhookConfiguration = admissionregistrationv1.ValidatingWebhookConfiguration
	mutatingWebhookConfiguration   = admissionregistrationv1.MutatingWebhookConfiguration
	validatingAdmissionPolicy      = admissionregistrationv1.ValidatingAdmissionPolicy
	validatingPolicyBinding        = admissionregistrationv1.ValidatingAdmissionPolicyBinding
	mutatingAdmissionPolicy        = admissionregistrationv1.MutatingAdmissionPolicy
	mutatingPolicyBinding          = admissionregistrationv1.MutatingAdmissionPolicyBinding
)

func webhooksColumns() []metav1.TableColumnDefinition {
	return columns(Column("Webhooks", "integer", 0, "Webhooks indicates the number of webhooks registered in this configuration"), AgeColumn)
}

var validatingWebhookConfigurations = &Def[*validatingWebhookConfiguration]{
	Info: Info{GroupVersion: admissionregistrationV1, Resource: "validatingwebhookconfigurations", Singular: "validatingwebhookconfiguration",
		Kind: "ValidatingWebhookConfiguration", Categories: apiExtensionsCategory},
	NewList: func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfigurationList{} },
	Defaults: func(c *validatingWebhookConfiguration) {
		for i := range c.Webhooks {
			h := &c.Webhooks[i]
			defaultWebhook(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds, h.Rules, &h.ClientConfig)
		}
	},
	Validate: func(c *validatingWebhookConfiguration) field.ErrorList {
		hooks := make([]webhook, len(c.Webhooks))
		for i, h := range c.Webhooks {
			hooks[i] = webhook{h.Name, h.ClientConfig, h.Rules, h.FailurePolicy, h.MatchPolicy, h.NamespaceSelector, h.ObjectSelector,
				h.SideEffects, h.TimeoutSeconds, h.AdmissionReviewVersions, h.MatchConditions, nil}
		}
		return validateWebhooks(hooks)
	},
	SpecChanged: func(c, old *validatingWebhookConfiguration) bool {
		return !apiequality.Semantic.DeepEqual(c.Webhooks, old.Webhooks)
	},
	Columns: webhooksColumns(),
	Row: func(c *validatingWebhookConfiguration) []any {
		return []any{int64(len(c.Webhooks)), Age(c.CreationTimestamp)}
	},
}

var mutatingWebhookConfigurations = &Def[*mutatingWebhookConfiguration]{
	Info: Info{GroupVersion: admissionregistrationV1, Resource: "mutatingwebhookconfigurations", Singular: "mutatingwebhookconfiguration",
		Kind: "MutatingWebhookConfiguration", Categories: apiExtensionsCategory},
	NewList: func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfigurationList{} },
	Defaults: func(c *mutatingWebhookConfiguration) {
		for i := range c.Webhooks {
			h := &c.Webhooks[i]
			defaultWebhook(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds, h.Rules, &h.ClientConfig)
			h.ReinvocationPolicy = orPtr(h.ReinvocationPolicy, admissionregistrationv1.NeverReinvocationPolicy)
		}
	},
	Validate: func(c *mutatingWebhookConfiguration) field.ErrorList {
		hooks := make([]webhook, len(c.Webhooks))
		for i, h := range c.Webhooks {
			hooks[i] = webhook{h.Name, h.ClientConfig, h.Rules, h.FailurePolicy, h.MatchPolicy, h.NamespaceSelector, h.ObjectSelector,
				h.SideEffects, h.TimeoutSeconds, h.AdmissionReviewVersions, h.MatchConditions, h.ReinvocationPolicy}
		}
		return validateWebhooks(hooks)
	},
	SpecChanged: func(c, old *mutatingWebhookConfiguration) bool {
		return !apiequality.Semantic.DeepEqual(c.Webhooks, old.Webhooks)
	},
	Columns: webhooksColumns(),
	Row: func(c *mutatingWebhookConfiguration) []any {
		return []any{int64(len(c.Webhooks)), Age(c.CreationTimestamp)}
	},
}

var validatingAdmissionPolicies = &Def[*validatingAdmissionPolicy]{
	Info: Info{GroupVersion: admissionregistrationV1, Resource: "validatingadmissionpolicies", Singular: "validatingadmissionpolicy",
		Kind: "ValidatingAdmissionPolicy", Categories: apiExtensionsCategory, Status: true},
	NewList: func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} },
	Defaults: func(p *validatingAdmissionPolicy) {
		p.Spec.FailurePolicy = orPtr(p.Spec.FailurePolicy, admissionregistrationv1.Fail)
		defaultMatchResources(p.Spec.MatchConstraints)
	},
	Validate: validateValidatingPolicy,
	Columns: columns(
		Column("Validations", "integer", 0, "Validations indicates the number of validation rules defined in this configuration"),
		Column("ParamKind", "string", 0, "ParamKind specifies the kind of resources used to parameterize this policy"),
		AgeColumn,
	),
	Row: func(p *validatingAdmissionPolicy) []any {
		return []any{int64(len(p.Spec.Validations)), paramKindCell(p.Spec.ParamKind), Age(p.CreationTimestamp)}
	},
}

var validatingAdmissionPolicyBindings = &Def[*validatingPolicyBinding]{
	Info: Info{GroupVersion: admissionregistrationV1, Resource: "validatingadmissionpolicybindings", Singular: "validatingadmissionpolicybinding",
		Kind: "ValidatingAdmissionPolicyBinding", Categories: apiExtensionsCategory},
	NewList:  func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} },
	Defaults: func(b *validatingPolicyBinding) { defaultMatchResources(b.Spec.MatchResources) },
	Validate: func(b *validatingPolicyBinding) field.ErrorList {
		errs := validatePolicyBinding(b.Spec.PolicyName, b.Spec.ParamRef, b.Spec.MatchResources, false)
		return append(errs, validateValidationActions(b.Spec.ValidationActions)...)
	},
	Columns: policyBindingColumns(),
	Row: func(b *validatingPolicyBinding) []any {
		return []any{b.Spec.PolicyName, paramRefCell(b.Spec.ParamRef), Age(b.CreationTimestamp)}
	},
}

var mutatingAdmissionPolicies = &Def[*mutatingAdmissionPolicy]{
	Info: Info{GroupVersion: admissionregistrationV1, Resource: "mutatingadmissionpolicies", Singular: "mutatingadmissionpolicy",
		Kind: "MutatingAdmissionPolicy", Categories: apiExtensionsCategory},
	NewList: func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyList{} },
	Defaults: func(p *mutatingAdmissionPolicy) {
		p.Spec.FailurePolicy = orPtr(p.Spec.FailurePolicy, admissionregistrationv1.Fail)
		defaultMatchResources(p.Spec.MatchConstraints)
	},
	Validate: validateMutatingPolicy,
	Columns: columns(
		Column("Mutations", "integer", 0, "Mutation indicates the number of mutations rules defined in this configuration"),
		Column("ParamKind", "string", 0, "ParamKind specifies the kind of resources used to parameterize this policy"),
		AgeColumn,
	),
	Row: func(p *mutatingAdmissionPolicy) []any {
		return []any{int64(len(p.Spec.Mutations)), paramKindCell(p.Spec.ParamKind), Age(p.CreationTimestamp)}
	},
}

var mutatingAdmissionPolicyBindings = &Def[*mutatingPolicyBinding]{
	Info: Info{GroupVersion: admissionregistrationV1, Resource: "mutatingadmissionpolicybindings", Singular: "mutatingadmissionpolicybinding",
		Kind: "MutatingAdmissionPolicyBinding", Categories: apiExtensionsCategory},
	NewList:  func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBindingList{} },
	Defaults: func(b *mutatingPolicyBinding) { defaultMatchResources(b.Spec.MatchResources) },
	Validate: func(b *mutatingPolicyBinding) field.ErrorList {
		return validatePolicyBinding(b.Spec.PolicyName, b.Spec.ParamRef, b.Spec.MatchResources, true)
	},
	Columns: policyBindingColumns(),
	Row: func(b *mutatingPolicyBinding) []any {
		return []any{b.Spec.PolicyName, paramRefCell(b.Spec.ParamRef), Age(b.CreationTimestamp)}
	},
}

// admissionregistrationResources are the admission registration API's six resources.
func admissionregistrationResources() []Strategy {
	return []Strategy{mutatingAdmissionPolicies, mutatingAdmissionPolicyBindings, mutatingWebhookConfigurations,
		validatingAdmissionPolicies, validatingAdmissionPolicyBindings, validatingWebhookConfigurations}
}

func policyBindingColumns() []metav1.TableColumnDefinition {
	return columns(
		Column("PolicyName", "string", 0, "PolicyName indicates the policy definition which the policy binding binded to"),
		Column("ParamRef", "string", 0, "ParamRef indicates the param resource which sets the configuration param"),
		AgeColumn,
	)
}

func paramKindCell(k *admissionregistrationv1.ParamKind) string {
	if k == nil {
		return "<unset>"
	}
	return k.APIVersion + "/" + k.Kind
}

func paramRefCell(r *admissionregistrationv1.ParamRef) string {
	switch {
	case r == nil:
		return "<unset>"
	case r.Name != "" && r.Namespace != "":
		return r.Namespace + "/" + r.Name
	case r.Name != "":
		// Whether the param is cluster-scoped is not known here: any namespace.
		return "*/" + r.Name
	case r.Selector != nil:
		return metav1.FormatLabelSelector(r.Selector)
	}
	return "<unset>"
}

func defaultWebhook(failure **admissionregistrationv1.FailurePolicyType, match **admissionregistrationv1.MatchPolicyType,
	nsSel, objSel **metav1.LabelSelector, timeout **int32, rules []admissionregistrationv1.RuleWithOperations,
	cc *admissionregistrationv1.WebhookClientConfig) {
	*failure = orPtr(*failure, admissionregistrationv1.Fail)
	*match = orPtr(*match, admissionregistrationv1.Equivalent)
	*nsSel = orPtr(*nsSel, metav1.LabelSelector{})
	*objSel = orPtr(*objSel, metav1.LabelSelector{})
	*timeout = orPtr(*timeout, 10)
	defaultRules(rules)
	if s := cc.Service; s != nil {
		s.Port = orPtr(s.Port, 443)
	}
}

func defaultRules(rules []admissionregistrationv1.RuleWithOperations) {
	for i := range rules {
		rules[i].Scope = orPtr(rules[i].Scope, admissionregistrationv1.AllScopes)
	}
}

func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	m.MatchPolicy = orPtr(m.MatchPolicy, admissionregistrationv1.Equivalent)
	m.NamespaceSelector = orPtr(m.NamespaceSelector, metav1.LabelSelector{})
	m.ObjectSelector = orPtr(m.ObjectSelector, metav1.LabelSelector{})
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			rules[i].Scope = orPtr(rules[i].Scope, admissionregistrationv1.AllScopes)
		}
	}
}

// webhook is what validating and mutating webhooks share; reinvocation is the mutating
// webhooks' own.
type webhook struct {
	name           string
	clientConfig   admissionregistrationv1.WebhookClientConfig
	rules          []admissionregistrationv1.RuleWithOperations
	failure        *admissionregistrationv1.FailurePolicyType
	match          *admissionregistrationv1.MatchPolicyType
	nsSel, objSel  *metav1.LabelSelector
	sideEffects    *admissionregistrationv1.SideEffectClass
	timeout        *int32
	reviewVersions []string
	conditions     []admissionregistrationv1.MatchCondition
	reinvocation   *admissionregistrationv1.ReinvocationPolicyType
}

var (
	failurePolicies      = []admissionregistrationv1.FailurePolicyType{admissionregistrationv1.Fail, admissionregistrationv1.Ignore}
	matchPolicies        = []admissionregistrationv1.MatchPolicyType{admissionregistrationv1.Equivalent, admissionregistrationv1.Exact}
	noSideEffects        = []admissionregistrationv1.SideEffectClass{admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.SideEffectClassNoneOnDryRun}
	reinvocationPolicies = []admissionregistrationv1.ReinvocationPolicyType{admissionregistrationv1.IfNeededReinvocationPolicy, admissionregistrationv1.NeverReinvocationPolicy}
	operations           = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll, admissionregistrationv1.Connect,
		admissionregistrationv1.Create, admissionregistrationv1.Delete, admissionregistrationv1.Update}
	mutatingOperations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll, admissionregistrationv1.Connect,
		admissionregistrationv1.Create, admissionregistrationv1.Update}
	ruleScopes          = []admissionregistrationv1.ScopeType{admissionregistrationv1.AllScopes, admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope}
	reviewVersions      = []string{"v1", "v1beta1"}
	validationActions   = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit, admissionregistrationv1.Deny, admissionregistrationv1.Warn}
	validationReasons   = []metav1.StatusReason{metav1.StatusReasonForbidden, metav1.StatusReasonInvalid, metav1.StatusReasonRequestEntityTooLarge}
	patchTypes          = []admissionregistrationv1.PatchType{admissionregistrationv1.PatchTypeApplyConfiguration, admissionregistrationv1.PatchTypeJSONPatch}
	paramNotFoundAction = []admissionregistrationv1.ParameterNotFoundActionType{admissionregistrationv1.AllowAction, admissionregistrationv1.DenyAction}
)

// enum checks an optional enumerated field: NotSupported when set to an unknown value.
func enum[T ~string](v *T, p *field.Path, allowed []T) field.ErrorList {
	if v != nil && !slices.Contains(allowed, *v) {
		return field.ErrorList{field.NotSupported(p, *v, allowed)}
	}
	return nil
}

func validateWebhooks(hooks []webhook) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, h := range hooks {
		p := field.NewPath("webhooks").Index(i)
		errs = append(errs, validation.IsFullyQualifiedName(p.Child("name"), h.name)...)
		for j := range h.rules {
			errs = append(errs, validateRuleWithOperations(&h.rules[j], p.Child("rules").Index(j), true)...)
		}
		errs = append(errs, enum(h.failure, p.Child("failurePolicy"), failurePolicies)...)
		errs = append(errs, enum(h.match, p.Child("matchPolicy"), matchPolicies)...)
		// v1 webhooks must be safe to call on dry runs.
		if h.sideEffects == nil {
			errs = append(errs, field.Required(p.Child("sideEffects"), "must specify one of None, NoneOnDryRun"))
		}
		errs = append(errs, enum(h.sideEffects, p.Child("sideEffects"), noSideEffects)...)
		if t := h.timeout; t != nil && (*t < 1 || *t > 30) {
			errs = append(errs, field.Invalid(p.Child("timeoutSeconds"), *t, "the timeout value must be between 1 and 30 seconds"))
		}
		errs = append(errs, labelSelector(h.nsSel, p.Child("namespaceSelector"))...)
		errs = append(errs, labelSelector(h.objSel, p.Child("objectSelector"))...)
		errs = append(errs, enum(h.reinvocation, p.Child("reinvocationPolicy"), reinvocationPolicies)...)
		errs = append(errs, validateClientConfig(&h.clientConfig, p.Child("clientConfig"))...)
		errs = append(errs, validateMatchConditions(h.conditions, p.Child("matchConditions"))...)
		errs = append(errs, validateReviewVersions(h.reviewVersions, p.Child("admissionReviewVersions"))...)
		if h.name != "" {
			errs = append(errs, unique(seen, h.name, p.Child("name"), h.name)...)
		}
	}
	return errs
}

func labelSelector(s *metav1.LabelSelector, p *field.Path) field.ErrorList {
	if s == nil {
		return nil
	}
	return metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, p)
}

func validateReviewVersions(versions []string, p *field.Path) field.ErrorList {
	if len(versions) == 0 {
		return field.ErrorList{field.Required(p, "must specify one of v1, v1beta1")}
	}
	var errs field.ErrorList
	seen, known := map[string]bool{}, false
	for i, v := range versions {
		if seen[v] {
			errs = append(errs, field.Invalid(p.Index(i), v, "duplicate version"))
			continue
		}
		seen[v] = true
		errs = append(errs, msgs(p.Index(i), v, validation.IsDNS1035Label(v))...)
		known = known || slices.Contains(reviewVersions, v)
	}
	if !known {
		errs = append(errs, field.Invalid(p, versions, "must include at least one of v1, v1beta1"))
	}
	return errs
}

// validateClientConfig checks where a webhook is reached: an https URL, or a service.
func validateClientConfig(cc *admissionregistrationv1.WebhookClientConfig, p *field.Path) field.ErrorList {
	switch {
	case (cc.URL == nil) == (cc.Service == nil):
		return field.ErrorList{field.Required(p, "exactly one of url or service is required")}
	case cc.URL != nil:
		return validateWebhookURL(*cc.URL, p.Child("url"))
	}
	s := cc.Service
	sp := p.Child("service")
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(sp.Child("name"), ""))
	}
	if s.Namespace == "" {
		errs = append(errs, field.Required(sp.Child("namespace"), ""))
	}
	if s.Port != nil {
		if bad := validation.IsValidPortNum(int(*s.Port)); len(bad) > 0 {
			errs = append(errs, field.Invalid(sp.Child("port"), *s.Port, "port is not valid: "+strings.Join(bad, ", ")))
		}
	}
	if s.Path != nil {
		errs = append(errs, validateServicePath(*s.Path, sp.Child("path"))...)
	}
	return errs
}

func validateWebhookURL(raw string, p *field.Path) field.ErrorList {
	const form = "; desired format: https://host[/path]"
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Required(p, "url must be a valid URL: "+err.Error()+form)}
	}
	var errs field.ErrorList
	if u.Scheme != "https" {
		errs = append(errs, field.Invalid(p, u.Scheme, "'https' is the only allowed URL scheme"+form))
	}
	if u.Host == "" {
		errs = append(errs, field.Invalid(p, u.Host, "host must be specified"+form))
	}
	if u.User != nil {
		errs = append(errs, field.Invalid(p, u.User.String(), "user information is not permitted in the URL"))
	}
	if u.Fragment != "" {
		errs = append(errs, field.Invalid(p, u.Fragment, "fragments are not permitted in the URL"))
	}
	if u.RawQuery != "" {
		errs = append(errs, field.Invalid(p, u.RawQuery, "query parameters are not permitted in the URL"))
	}
	return errs
}

// validateServicePath checks a path on a webhook's service: "/" and segments that are DNS
// subdomains.
func validateServicePath(sp string, p *field.Path) field.ErrorList {
	if sp == "" || sp == "/" {
		return nil
	}
	if !strings.HasPrefix(sp, "/") {
		return field.ErrorList{field.Invalid(p, sp, "must start with a '/'")}
	}
	var errs field.ErrorList
	for i, seg := range strings.Split(strings.TrimSuffix(sp[1:], "/"), "/") {
		if seg == "" {
			errs = append(errs, field.Invalid(p, sp, fmt.Sprintf("segment[%d] may not be empty", i)))
			continue
		}
		for _, m := range validation.IsDNS1123Subdomain(seg) {
			errs = append(errs, field.Invalid(p, sp, fmt.Sprintf("segment[%d]: %v", i, m)))
		}
	}
	return errs
}

func validateRuleWithOperations(r *admissionregistrationv1.RuleWithOperations, p *field.Path, subresources bool) field.ErrorList {
	var errs field.ErrorList
	if len(r.Operations) == 0 {
		errs = append(errs, field.Required(p.Child("operations"), ""))
	}
	if len(r.Operations) > 1 && slices.Contains(r.Operations, admissionregistrationv1.OperationAll) {
		errs = append(errs, field.Invalid(p.Child("operations"), r.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, op := range r.Operations {
		if !slices.Contains(operations, op) {
			errs = append(errs, field.NotSupported(p.Child("operations").Index(i), op, operations))
		}
	}
	errs = append(errs, wildcardList(r.APIGroups, p.Child("apiGroups"), "API groups")...)
	errs = append(errs, wildcardList(r.APIVersions, p.Child("apiVersions"), "API versions")...)
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(p.Child("apiVersions").Index(i), ""))
		}
	}
	errs = append(errs, validateRuleResources(r.Resources, p.Child("resources"))...)
	return append(errs, enum(r.Scope, p.Child("scope"), ruleScopes)...)
}

// wildcardList checks a required list in which "*" stands alone.
func wildcardList(list []string, p *field.Path, what string) field.ErrorList {
	switch {
	case len(list) == 0:
		return field.ErrorList{field.Required(p, "")}
	case len(list) > 1 && slices.Contains(list, "*"):
		return field.ErrorList{field.Invalid(p, list, "if '*' is present, must not specify other "+what)}
	}
	return nil
}

// validateRuleResources checks a rule's "resource/subresource" patterns: "*/*" alone, "*" with
// subresource patterns only, and no pattern already covered by a wildcard one.
func validateRuleResources(resources []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(resources) == 0 {
		errs = append(errs, field.Required(p, ""))
	}
	allSubsOf, allResourcesWith := map[string]bool{}, map[string]bool{}
	doubleWildcard, singleWildcard, plain := false, false, false
	for i, rs := range resources {
		if rs == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
			continue
		}
		doubleWildcard = doubleWildcard || rs == "*/*"
		singleWildcard = singleWildcard || rs == "*"
		res, sub, ok := strings.Cut(rs, "/")
		if !ok {
			plain = rs != "*"
			continue
		}
		if allSubsOf[res] {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, rs)))
		}
		if allResourcesWith[sub] {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, rs)))
		}
		allSubsOf[res] = allSubsOf[res] || sub == "*"
		allResourcesWith[sub] = allResourcesWith[sub] || res == "*"
	}
	if len(resources) > 1 && doubleWildcard {
		errs = append(errs, field.Invalid(p, resources, "if '*/*' is present, must not specify other resources"))
	}
	if singleWildcard && plain {
		errs = append(errs, field.Invalid(p, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return errs
}

// maxMatchConditions bounds a webhook's or policy's match conditions.
const maxMatchConditions = 64

func validateMatchConditions(conditions []admissionregistrationv1.MatchCondition, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(conditions) > maxMatchConditions {
		errs = append(errs, field.TooMany(p, len(conditions), maxMatchConditions))
	}
	seen := map[string]bool{}
	for i, c := range conditions {
		cp := p.Index(i)
		errs = append(errs, celExpression(c.Expression, cp.Child("expression"), "")...)
		if c.Name == "" {
			errs = append(errs, field.Required(cp.Child("name"), ""))
		} else {
			errs = append(errs, qualifiedName(c.Name, cp.Child("name"))...)
			errs = append(errs, unique(seen, c.Name, cp.Child("name"), c.Name)...)
		}
	}
	return errs
}

func qualifiedName(name string, p *field.Path) field.ErrorList {
	return msgs(p, name, validation.IsQualifiedName(name))
}

// celExpression checks that a CEL expression is there. TODO: compile it (with the variables a
// policy declares), as Kubernetes does, once kplane evaluates policies.
func celExpression(expr string, p *field.Path, missing string) field.ErrorList {
	if strings.TrimSpace(expr) == "" {
		return field.ErrorList{field.Required(p, missing)}
	}
	return nil
}

func validateParamKind(k *admissionregistrationv1.ParamKind, p *field.Path) field.ErrorList {
	if k == nil {
		return nil
	}
	var errs field.ErrorList
	vp := p.Child("apiVersion")
	switch group, version, slashes := splitAPIVersion(k.APIVersion); {
	case k.APIVersion == "":
		errs = append(errs, field.Required(vp, ""))
	case slashes > 1:
		errs = append(errs, field.Invalid(vp, k.APIVersion, "unexpected GroupVersion string: "+k.APIVersion))
	default:
		if group != "" {
			if bad := validation.IsDNS1123Subdomain(group); len(bad) > 0 {
				errs = append(errs, field.Invalid(vp, group, strings.Join(bad, ",")))
			}
		}
		if version == "" {
			errs = append(errs, field.Invalid(vp, k.APIVersion, "version must be specified"))
		} else if bad := validation.IsDNS1035Label(version); len(bad) > 0 {
			errs = append(errs, field.Invalid(vp, version, strings.Join(bad, ",")))
		}
	}
	if k.Kind == "" {
		errs = append(errs, field.Required(p.Child("kind"), ""))
	} else if bad := validation.IsDNS1035Label(strings.ToLower(k.Kind)); len(bad) > 0 {
		errs = append(errs, field.Invalid(p.Child("kind"), k.Kind, "may have mixed case, but should otherwise match: "+strings.Join(bad, ",")))
	}
	return errs
}

func splitAPIVersion(v string) (group, version string, slashes int) {
	slashes = strings.Count(v, "/")
	if g, ver, ok := strings.Cut(v, "/"); ok {
		return g, ver, slashes
	}
	return "", v, slashes
}

// validateMatchResources checks what a policy or binding applies to; defaults have filled the
// policy and selectors a client left out.
func validateMatchResources(m *admissionregistrationv1.MatchResources, p *field.Path, mutating bool) field.ErrorList {
	if m == nil {
		return nil
	}
	var errs field.ErrorList
	if m.MatchPolicy == nil {
		errs = append(errs, field.Required(p.Child("matchPolicy"), ""))
	}
	errs = append(errs, enum(m.MatchPolicy, p.Child("matchPolicy"), matchPolicies)...)
	for _, sel := range []struct {
		name string
		s    *metav1.LabelSelector
	}{{"namespaceSelector", m.NamespaceSelector}, {"objectSelector", m.ObjectSelector}} {
		if sel.s == nil {
			errs = append(errs, field.Required(p.Child(sel.name), ""))
		}
		errs = append(errs, labelSelector(sel.s, p.Child(sel.name))...)
	}
	for _, list := range []struct {
		name  string
		rules []admissionregistrationv1.NamedRuleWithOperations
	}{{"resourceRules", m.ResourceRules}, {"excludeResourceRules", m.ExcludeResourceRules}} {
		for i := range list.rules {
			r := &list.rules[i]
			rp := p.Child(list.name).Index(i)
			seen := map[string]bool{}
			for j, n := range r.ResourceNames {
				errs = append(errs, msgs(rp.Child("resourceNames").Index(j), n, path.IsValidPathSegmentName(n))...)
				errs = append(errs, unique(seen, n, rp.Child("resourceNames").Index(j), n)...)
			}
			errs = append(errs, validateRuleWithOperations(&r.RuleWithOperations, rp, true)...)
		}
	}
	if mutating {
		// A mutating policy cannot act on deletions: there is nothing left to mutate.
		for _, r := range m.ResourceRules {
			for _, op := range r.Operations {
				if !slices.Contains(mutatingOperations, op) {
					errs = append(errs, field.NotSupported(p.Child("resourceRules", "operations"), op, mutatingOperations))
				}
			}
		}
	}
	return errs
}

// validatePolicyHead checks what validating and mutating policies share: the failure policy,
// the params' kind and the required match constraints.
func validatePolicyHead(failure *admissionregistrationv1.FailurePolicyType, params *admissionregistrationv1.ParamKind,
	match *admissionregistrationv1.MatchResources, conditions []admissionregistrationv1.MatchCondition,
	variables []admissionregistrationv1.Variable, mutating bool) field.ErrorList {
	var errs field.ErrorList
	if failure == nil {
		errs = append(errs, field.Required(specPath.Child("failurePolicy"), ""))
	}
	errs = append(errs, enum(failure, specPath.Child("failurePolicy"), failurePolicies)...)
	errs = append(errs, validateParamKind(params, specPath.Child("paramKind"))...)
	mp := specPath.Child("matchConstraints")
	if match == nil {
		errs = append(errs, field.Required(mp, ""))
	} else {
		errs = append(errs, validateMatchResources(match, mp, mutating)...)
		if len(match.ResourceRules) == 0 {
			errs = append(errs, field.Required(mp.Child("resourceRules"), ""))
		}
	}
	errs = append(errs, validateMatchConditions(conditions, specPath.Child("matchConditions"))...)
	for i, v := range variables {
		vp := specPath.Child("variables").Index(i)
		if strings.TrimSpace(v.Name) == "" {
			errs = append(errs, field.Required(vp.Child("name"), "name is not specified"))
		} else if !isCELIdentifier(v.Name) {
			errs = append(errs, field.Invalid(vp.Child("name"), v.Name, "must be a valid CEL identifier"))
		}
		errs = append(errs, celExpression(v.Expression, vp.Child("expression"), "expression is not specified")...)
	}
	return errs
}

var celIdentifier = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)

// celReserved are CEL's reserved words, which no variable may be named.
var celReserved = []string{"as", "break", "const", "continue", "else", "false", "for", "function", "if", "import",
	"in", "let", "loop", "namespace", "null", "package", "return", "true", "var", "void", "while"}

func isCELIdentifier(name string) bool {
	return celIdentifier.MatchString(name) && !slices.Contains(celReserved, name)
}

// maxAuditAnnotations bounds a validating policy's audit annotations.
const (
	maxAuditAnnotations             = 20
	maxAuditAnnotationValueExprSize = 5 * 1024
)

func validateValidatingPolicy(p *validatingAdmissionPolicy) field.ErrorList {
	s := &p.Spec
	errs := validatePolicyHead(s.FailurePolicy, s.ParamKind, s.MatchConstraints, s.MatchConditions, s.Variables, false)
	if len(s.Validations) == 0 && len(s.AuditAnnotations) == 0 {
		const msg = "validations or auditAnnotations must contain at least one item"
		return append(errs, field.Required(specPath.Child("validations"), msg), field.Required(specPath.Child("auditAnnotations"), msg))
	}
	for i, v := range s.Validations {
		vp := specPath.Child("validations").Index(i)
		errs = append(errs, celExpression(v.Expression, vp.Child("expression"), "expression is not specified")...)
		if v.MessageExpression != "" && strings.TrimSpace(v.MessageExpression) == "" {
			errs = append(errs, field.Invalid(vp.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
		}
		switch msg := strings.TrimSpace(v.Message); {
		case v.Message != "" && msg == "":
			errs = append(errs, field.Invalid(vp.Child("message"), v.Message, "must be non-empty if specified"))
		case strings.ContainsAny(msg, "\r\n"):
			errs = append(errs, field.Invalid(vp.Child("message"), v.Message, "must not contain line breaks"))
		}
		errs = append(errs, enum(v.Reason, vp.Child("reason"), validationReasons)...)
	}
	if len(s.AuditAnnotations) > maxAuditAnnotations {
		errs = append(errs, field.Invalid(specPath.Child("auditAnnotations"), s.AuditAnnotations, fmt.Sprintf("must not have more than %d auditAnnotations", maxAuditAnnotations)))
	}
	seen := map[string]bool{}
	for i, a := range s.AuditAnnotations {
		ap := specPath.Child("auditAnnotations").Index(i)
		// The annotation is recorded as "<policy name>/<key>": that must be a qualified name.
		if p.Name == "" {
			errs = append(errs, field.Invalid(ap.Child("key"), a.Key, "requires metadata.name be non-empty"))
		} else {
			errs = append(errs, qualifiedName(p.Name+"/"+a.Key, ap.Child("key"))...)
		}
		switch expr := strings.TrimSpace(a.ValueExpression); {
		case expr == "":
			errs = append(errs, field.Required(ap.Child("valueExpression"), "valueExpression is not specified"))
		case len(expr) > maxAuditAnnotationValueExprSize:
			errs = append(errs, field.Required(ap.Child("valueExpression"), fmt.Sprintf("must not exceed %d bytes in length", maxAuditAnnotationValueExprSize)))
		}
		errs = append(errs, unique(seen, a.Key, ap.Child("key"), a.Key)...)
	}
	return append(errs, validatePolicyStatus(&p.Status)...)
}

// validatePolicyStatus checks what the policy's type checker writes: conditions and warnings.
func validatePolicyStatus(s *admissionregistrationv1.ValidatingAdmissionPolicyStatus) field.ErrorList {
	p := field.NewPath("status")
	errs := metav1validation.ValidateConditions(s.Conditions, p.Child("conditions"))
	if tc := s.TypeChecking; tc != nil {
		for i, w := range tc.ExpressionWarnings {
			wp := p.Child("typeChecking", "expressionWarnings").Index(i)
			if w.Warning == "" {
				errs = append(errs, field.Required(wp.Child("warning"), ""))
			}
			if strings.TrimSpace(w.FieldRef) == "" {
				errs = append(errs, field.Required(wp.Child("fieldRef"), ""))
			}
		}
	}
	return errs
}

func validateMutatingPolicy(p *mutatingAdmissionPolicy) field.ErrorList {
	s := &p.Spec
	errs := validatePolicyHead(s.FailurePolicy, s.ParamKind, s.MatchConstraints, s.MatchConditions, s.Variables, true)
	if len(s.Mutations) == 0 {
		errs = append(errs, field.Required(specPath.Child("mutations"), "mutations must contain at least one item"))
	}
	for i, m := range s.Mutations {
		mp := specPath.Child("mutations").Index(i)
		switch m.PatchType {
		case "":
			errs = append(errs, field.Required(mp.Child("patchType"), ""))
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch == nil {
				errs = append(errs, field.Required(mp.Child("jsonPatch"), "must be specified when patchType is JSONPatch"))
			} else {
				errs = append(errs, celExpression(m.JSONPatch.Expression, mp.Child("jsonPatch", "expression"), "")...)
			}
			if m.ApplyConfiguration != nil {
				errs = append(errs, field.Invalid(mp.Child("applyConfiguration"), "{applyConfiguration}", "must not be specified when patchType is JSONPatch"))
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration == nil {
				errs = append(errs, field.Required(mp.Child("applyConfiguration"), "must be specified when patchType is ApplyConfiguration"))
			} else {
				errs = append(errs, celExpression(m.ApplyConfiguration.Expression, mp.Child("applyConfiguration", "expression"), "")...)
			}
			if m.JSONPatch != nil {
				errs = append(errs, field.Invalid(mp.Child("jsonPatch"), "{jsonPatch}", "must not be specified when patchType is ApplyConfiguration"))
			}
		default:
			errs = append(errs, field.NotSupported(mp.Child("patchType"), m.PatchType, patchTypes))
		}
	}
	if s.ReinvocationPolicy == "" {
		errs = append(errs, field.Required(specPath.Child("reinvocationPolicy"), ""))
	} else {
		errs = append(errs, enum(&s.ReinvocationPolicy, specPath.Child("reinvocationPolicy"), reinvocationPolicies)...)
	}
	return errs
}

// validatePolicyBinding checks what both kinds of binding share: the policy they bind, where
// its params come from, and what they narrow it to.
func validatePolicyBinding(policy string, ref *admissionregistrationv1.ParamRef, match *admissionregistrationv1.MatchResources, mutating bool) field.ErrorList {
	var errs field.ErrorList
	if policy == "" {
		errs = append(errs, field.Required(specPath.Child("policyName"), ""))
	} else {
		errs = append(errs, dnsSubdomain(policy, specPath.Child("policyName"))...)
	}
	if ref != nil {
		rp := specPath.Child("paramRef")
		if ref.Name != "" {
			errs = append(errs, msgs(rp.Child("name"), ref.Name, path.IsValidPathSegmentName(ref.Name))...)
		}
		if ref.Selector != nil {
			errs = append(errs, labelSelector(ref.Selector, rp.Child("selector"))...)
		}
		switch {
		case ref.Name != "" && ref.Selector != nil:
			errs = append(errs, field.Forbidden(rp.Child("name"), `name and selector are mutually exclusive`),
				field.Forbidden(rp.Child("selector"), `name and selector are mutually exclusive`))
		case ref.Name == "" && ref.Selector == nil:
			errs = append(errs, field.Required(rp, `one of name or selector must be specified`))
		}
		if a := ref.ParameterNotFoundAction; a == nil || *a == "" {
			errs = append(errs, field.Required(rp.Child("parameterNotFoundAction"), ""))
		} else {
			errs = append(errs, enum(a, rp.Child("parameterNotFoundAction"), paramNotFoundAction)...)
		}
	}
	return append(errs, validateMatchResources(match, specPath.Child("matchResources"), mutating)...)
}

func validateValidationActions(actions []admissionregistrationv1.ValidationAction) field.ErrorList {
	p := specPath.Child("validationActions")
	if len(actions) == 0 {
		return field.ErrorList{field.Required(p, "at least one validation action is required")}
	}
	var errs field.ErrorList
	seen := map[admissionregistrationv1.ValidationAction]bool{}
	for i, a := range actions {
		if !slices.Contains(validationActions, a) {
			errs = append(errs, field.NotSupported(p.Index(i), a, validationActions))
		}
		errs = append(errs, unique(seen, a, p.Index(i), a)...)
	}
	if seen[admissionregistrationv1.Deny] && seen[admissionregistrationv1.Warn] {
		errs = append(errs, field.Invalid(p, actions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	return errs
}
