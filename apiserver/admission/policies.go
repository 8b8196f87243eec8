package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidatingAdmissionPolicies are judged in the validating phase, before the validating
// webhooks. A policy says which requests it can judge (matchConstraints) and how (CEL
// validations); its bindings say which of those it does judge (matchResources), with which
// params and what a failed validation does (Deny, Warn, Audit).

// Variables of policy expressions besides object, oldObject and request.
const (
	varParams          = "params"
	varNamespaceObject = "namespaceObject"
	varVariables       = "variables"
)

// runtimeCostBudget bounds the cost of all the validations of one evaluation of a policy, as
// Kubernetes' RuntimeCELCostBudget does (each expression is also bound by perCallCostLimit).
// A variable only so that a test can spend it without ten million units of evaluation.
var runtimeCostBudget int64 = 10000000

var errOutOfBudget = errors.New("validation failed due to running out of cost budget, no further validation rules will be run")

// cost is what an evaluation cost, 0 when unknown.
func cost(det *cel.EvalDetails) int64 {
	if det == nil || det.ActualCost() == nil {
		return 0
	}
	return int64(*det.ActualCost())
}

// maxMessageBytes bounds what a messageExpression may return before it is ignored.
const maxMessageBytes = 5 * 1024

// policyEnv is the environment of policy expressions. The objects have no declared type (dyn):
// kplane checks field names when the expression runs, not when it is written.
var policyEnv = sync.OnceValues(func() (*cel.Env, error) {
	return requestEnv(append(authzLibrary(),
		cel.Variable(varParams, cel.DynType),
		cel.Variable(varNamespaceObject, cel.DynType),
		cel.Variable(varVariables, cel.MapType(cel.StringType, cel.DynType)),
	)...)
})

// compileExpr compiles one expression that must give want (or dyn, decided when it runs).
func compileExpr(env *cel.Env, expr string, want *cel.Type, path *field.Path, onWrite bool) (cel.Program, *field.Error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, field.Invalid(path, expr, "compilation failed: "+iss.String())
	}
	if want != nil && !ast.OutputType().IsExactType(want) && !ast.OutputType().IsExactType(cel.DynType) {
		return nil, field.Invalid(path, expr, fmt.Sprintf("must evaluate to %v but got %v", want, ast.OutputType()))
	}
	if onWrite {
		if ferr := costExceeded(env, ast, path); ferr != nil {
			return nil, ferr
		}
	}
	prog, err := env.Program(ast, cel.CostLimit(perCallCostLimit), cel.EvalOptions(cel.OptTrackCost))
	if err != nil {
		return nil, field.InternalError(path, fmt.Errorf("program instantiation failed: %w", err))
	}
	return prog, nil
}

type namedProgram struct {
	name string
	prog cel.Program
}

type validation struct {
	expression, message string
	prog, messageProg   cel.Program
	reason              metav1.StatusReason
}

// policy is what validating and mutating admission policies share: what they can judge
// (matchConstraints), their params, match conditions and variables, and their bindings.
type policy struct {
	Name        string
	failOpen    bool
	constraints *admissionregistrationv1.MatchResources
	paramKind   *admissionregistrationv1.ParamKind
	conditions  []namedProgram
	variables   []namedProgram
	// broken is why the policy cannot be evaluated: each matching request fails with it,
	// per the failure policy.
	broken   error
	bindings []policyBinding
}

// policyBinding is a binding of either kind of policy: what it selects and its params.
type policyBinding struct {
	name     string
	match    *admissionregistrationv1.MatchResources
	paramRef *admissionregistrationv1.ParamRef
	// actions are a validating binding's validationActions.
	actions []admissionregistrationv1.ValidationAction
}

// Policy is a compiled ValidatingAdmissionPolicy with its bindings.
type Policy struct {
	policy
	validations []validation
}

// Policies are the compiled policies of the server, by name.
type Policies []*Policy

// policyCompiler compiles the expressions of one policy, collecting what does not compile.
type policyCompiler struct {
	env  *cel.Env
	errs field.ErrorList
	// onWrite adds the checks of a configuration being written (its estimated cost) to
	// those of compiling it to run.
	onWrite bool
}

func newPolicyCompiler(env func() (*cel.Env, error), spec *field.Path, onWrite bool) (*policyCompiler, field.ErrorList) {
	e, err := env()
	if err != nil {
		return nil, field.ErrorList{field.InternalError(spec, err)}
	}
	return &policyCompiler{env: e, onWrite: onWrite}, nil
}

func (c *policyCompiler) compile(expr string, want *cel.Type, path *field.Path) cel.Program {
	prog, ferr := compileExpr(c.env, expr, want, path, c.onWrite)
	if ferr != nil {
		c.errs = append(c.errs, ferr)
	}
	return prog
}

func (c *policyCompiler) add(list *[]namedProgram, name, expr string, want *cel.Type, path *field.Path) {
	if prog := c.compile(expr, want, path); prog != nil {
		*list = append(*list, namedProgram{name, prog})
	}
}

// common compiles what every policy has: match conditions and variables.
func (c *policyCompiler) common(out *policy, conds []admissionregistrationv1.MatchCondition, vars []admissionregistrationv1.Variable, spec *field.Path) {
	for i, mc := range conds {
		c.add(&out.conditions, mc.Name, mc.Expression, cel.BoolType, spec.Child("matchConditions").Index(i).Child("expression"))
	}
	for i, v := range vars {
		c.add(&out.variables, v.Name, v.Expression, nil, spec.Child("variables").Index(i).Child("expression"))
	}
}

// done records what did not compile as why the policy is broken.
func (c *policyCompiler) done(out *policy) field.ErrorList {
	if len(c.errs) > 0 {
		out.broken = c.errs.ToAggregate()
	}
	return c.errs
}

// CompileValidatingPolicy compiles the CEL of a policy to run it; the errors are the policy's
// invalid expressions, under spec.
func CompileValidatingPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) (*Policy, field.ErrorList) {
	return compileValidatingPolicy(p, false)
}

// CheckValidatingPolicy is what is wrong with the CEL of a policy being written: what
// CompileValidatingPolicy finds, and expressions over the cost budget even on an empty object.
func CheckValidatingPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	_, errs := compileValidatingPolicy(p, true)
	return errs
}

func compileValidatingPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy, onWrite bool) (*Policy, field.ErrorList) {
	out := &Policy{policy: policy{Name: p.Name, failOpen: p.Spec.FailurePolicy != nil && *p.Spec.FailurePolicy == admissionregistrationv1.Ignore,
		constraints: p.Spec.MatchConstraints, paramKind: p.Spec.ParamKind}}
	spec := field.NewPath("spec")
	c, errs := newPolicyCompiler(policyEnv, spec, onWrite)
	if errs != nil {
		return nil, errs
	}
	c.common(&out.policy, p.Spec.MatchConditions, p.Spec.Variables, spec)
	for i, v := range p.Spec.Validations {
		path := spec.Child("validations").Index(i)
		val := validation{expression: v.Expression, message: v.Message, reason: metav1.StatusReasonInvalid}
		if v.Reason != nil {
			val.reason = *v.Reason
		}
		val.prog = c.compile(v.Expression, cel.BoolType, path.Child("expression"))
		if v.MessageExpression != "" {
			val.messageProg = c.compile(v.MessageExpression, cel.StringType, path.Child("messageExpression"))
		}
		out.validations = append(out.validations, val)
	}
	for i, a := range p.Spec.AuditAnnotations {
		// Audit annotations go to the audit log, which kplane does not keep; their
		// expressions are still checked, so a policy that would break there is refused.
		c.compile(a.ValueExpression, nil, spec.Child("auditAnnotations").Index(i).Child("valueExpression"))
	}
	return out, c.done(&out.policy)
}

// ValidatingPolicies compiles policies and attaches their bindings; a binding of a policy that
// does not exist does nothing.
func ValidatingPolicies(policies []*admissionregistrationv1.ValidatingAdmissionPolicy, bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) Policies {
	return bind(policies, bindings,
		func(p *admissionregistrationv1.ValidatingAdmissionPolicy) (*Policy, *policy) {
			c, _ := CompileValidatingPolicy(p)
			return c, &c.policy
		},
		func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) (string, policyBinding) {
			return b.Spec.PolicyName, policyBinding{name: b.Name, match: b.Spec.MatchResources, paramRef: b.Spec.ParamRef, actions: b.Spec.ValidationActions}
		})
}

// bind compiles policies and attaches to each the bindings naming it, both in name order;
// policies without bindings are left out.
func bind[P, B metav1.Object, C any](policies []P, bindings []B, compile func(P) (C, *policy), binding func(B) (string, policyBinding)) []C {
	byName := func(a, b metav1.Object) int { return strings.Compare(a.GetName(), b.GetName()) }
	slices.SortFunc(policies, func(a, b P) int { return byName(a, b) })
	slices.SortFunc(bindings, func(a, b B) int { return byName(a, b) })
	byPolicy := map[string][]policyBinding{}
	for _, b := range bindings {
		name, pb := binding(b)
		byPolicy[name] = append(byPolicy[name], pb)
	}
	var out []C
	for _, p := range policies {
		bs := byPolicy[p.GetName()]
		if len(bs) == 0 {
			continue // nothing binds it: not compiled
		}
		c, core := compile(p)
		core.bindings = bs
		out = append(out, c)
	}
	return out
}

// ParamStore reads the params of one kind.
type ParamStore struct {
	Namespaced bool
	// Get returns a NotFound error when there is no such object.
	Get  func(namespace, name string) (runtime.Object, error)
	List func(namespace string, sel labels.Selector) ([]runtime.Object, error)
}

// ParamStores finds the store of a paramKind, false when no such kind is served.
type ParamStores func(apiVersion, kind string) (*ParamStore, bool)

// PolicyContext is what policies read besides the request: params and the namespace.
type PolicyContext struct {
	Params ParamStores
	// Namespace returns the request's Namespace object.
	Namespace func(ctx context.Context, name string) (runtime.Object, error)
	// Merge merges the apply configurations of mutating policies.
	Merge Merger
}

// decision is the outcome of one validation under one binding.
type decision struct {
	policy, binding string
	message         string
	reason          metav1.StatusReason
}

// ValidatePolicies judges the request by the policies, adding Warn decisions to r.Warnings;
// the first Deny decision is the error, as Kubernetes reports it.
func (r *Request) ValidatePolicies(ctx context.Context, policies Policies, pc PolicyContext) error {
	var denied []decision
	var failures []policyFailure
	for _, p := range policies {
		d, f, err := r.judge(ctx, p, pc)
		if err != nil {
			return err
		}
		denied, failures = append(denied, d...), append(failures, f...)
	}
	// A denial is reported before any policy that could not be applied, as Kubernetes' validating
	// dispatcher returns it before its generic dispatcher looks at configuration errors.
	if len(denied) == 0 {
		return r.policiesFailed(failures)
	}
	d := denied[0]
	msg := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", d.policy, d.binding, d.message)
	if d.binding == "" {
		msg = fmt.Sprintf("ValidatingAdmissionPolicy '%s' denied request: %s", d.policy, d.message)
	}
	return r.policyError(msg, d.reason)
}

// policyFailure is a policy that failed (per its failure policy) in Kubernetes' generic
// wording; reason is empty for a policy or binding that could not be applied, Invalid for a
// mutation that failed.
type policyFailure struct {
	message string
	reason  metav1.StatusReason
}

func newPolicyFailure(policy, binding string, err error, reason metav1.StatusReason) policyFailure {
	if binding == "" {
		return policyFailure{fmt.Sprintf("policy %q denied request: %v", policy, err), reason}
	}
	return policyFailure{fmt.Sprintf("policy '%s' with binding '%s' denied request: %v", policy, binding, err), reason}
}

// policiesFailed is the error of failed policies as Kubernetes' generic policy dispatcher
// gives it: Forbidden, the first failure as the message (and its reason, when it has one),
// each failure a cause; nil when there are none.
func (r *Request) policiesFailed(failures []policyFailure) error {
	if len(failures) == 0 {
		return nil
	}
	err := apierrors.NewForbidden(r.Resource.GroupResource(), r.Name, errors.New("admission request denied by policy"))
	err.ErrStatus.Message = failures[0].message
	if failures[0].reason != "" {
		err.ErrStatus.Reason = failures[0].reason
	}
	for _, f := range failures {
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Message: f.message})
	}
	return err
}

// policyError is a denial in Kubernetes' form: a Forbidden error on the request's object,
// with the policy's reason and its code.
func (r *Request) policyError(msg string, reason metav1.StatusReason) error {
	name := r.Name
	if name == "" && r.Object != nil {
		if o, ok := r.Object.(metav1.Object); ok {
			name = o.GetName()
		}
	}
	err := apierrors.NewForbidden(r.Resource.GroupResource(), name, errors.New(msg))
	if reason == "" {
		reason = metav1.StatusReasonInvalid
	}
	err.ErrStatus.Reason, err.ErrStatus.Code = reason, reasonCode(reason)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Message: msg})
	return err
}

func reasonCode(reason metav1.StatusReason) int32 {
	switch reason {
	case metav1.StatusReasonForbidden:
		return http.StatusForbidden
	case metav1.StatusReasonUnauthorized:
		return http.StatusUnauthorized
	case metav1.StatusReasonRequestEntityTooLarge:
		return http.StatusRequestEntityTooLarge
	case metav1.StatusReasonInvalid:
		return http.StatusUnprocessableEntity
	}
	return http.StatusBadRequest
}

// resourcesMatch applies a MatchResources: the rules (all resources when binding and empty),
// the exclusions and the selectors. With matchPolicy Equivalent (the default), rules that name
// another version the resource is served at match too, and v is that version (nil: the
// request's own).
func resourcesMatch(ctx context.Context, m *admissionregistrationv1.MatchResources, a *Attributes, nsLabels NamespaceLabels, binding bool) (v *Version, ok bool, err error) {
	if m == nil {
		return nil, binding, nil
	}
	if !(binding && len(m.ResourceRules) == 0) {
		if v, ok = matchingNamedVersion(m.ResourceRules, m.MatchPolicy, a); !ok {
			return nil, false, nil
		}
	}
	if _, excluded := matchingNamedVersion(m.ExcludeResourceRules, m.MatchPolicy, a); excluded {
		return nil, false, nil
	}
	if ok, err = NamespaceSelected(ctx, m.NamespaceSelector, a, nsLabels); err != nil || !ok {
		return nil, false, err
	}
	if ok, err = ObjectSelected(m.ObjectSelector, a); err != nil || !ok {
		return nil, false, err
	}
	return v, true, nil
}

// matchingNamedVersion is MatchingVersion for rules that may also name resources.
func matchingNamedVersion(rules []admissionregistrationv1.NamedRuleWithOperations, policy *admissionregistrationv1.MatchPolicyType, a *Attributes) (*Version, bool) {
	if len(rules) == 0 {
		return nil, false
	}
	plain := make([]admissionregistrationv1.RuleWithOperations, 0, len(rules))
	for _, r := range rules {
		if len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, a.Name) {
			plain = append(plain, r.RuleWithOperations)
		}
	}
	return MatchingVersion(plain, policy, a)
}

// invocation is a policy evaluated under one of its bindings with one param, on the request
// as seen at the version the policy's constraints name.
type invocation struct {
	binding *policyBinding
	param   runtime.Object
	version *Version
}

// configError is a policy or binding that could not be applied to a request.
type configError struct {
	binding string
	err     error
}

func (e configError) message() string {
	what := "policy"
	if e.binding != "" {
		what = "binding"
	}
	return fmt.Sprintf("failed to configure %s: %v", what, e.err)
}

// invocations are the bindings and params p judges the request under; problems with the
// policy or a binding (a selector that cannot be read, params missing) come back as config
// errors, to be reported per the failure policy.
func (r *Request) invocations(ctx context.Context, p *policy, pc PolicyContext) ([]invocation, []configError, error) {
	v, ok, err := resourcesMatch(ctx, p.constraints, r.Attributes, r.NamespaceLabels, false)
	if err != nil {
		return nil, []configError{{err: err}}, nil
	}
	if !ok {
		return nil, nil, nil
	}
	if p.broken != nil {
		return nil, []configError{{err: p.broken}}, nil
	}
	var invs []invocation
	var errs []configError
	for i := range p.bindings {
		b := &p.bindings[i]
		ok, err := bindingMatches(ctx, b, r)
		if err != nil {
			errs = append(errs, configError{b.name, err})
			continue
		}
		if !ok {
			continue
		}
		params, err := r.params(p.paramKind, b.paramRef, pc.Params)
		if err != nil {
			errs = append(errs, configError{b.name, err})
			continue
		}
		for _, param := range params {
			invs = append(invs, invocation{binding: b, param: param, version: v})
		}
	}
	return invs, errs, nil
}

func bindingMatches(ctx context.Context, b *policyBinding, r *Request) (bool, error) {
	_, ok, err := resourcesMatch(ctx, b.match, r.Attributes, r.NamespaceLabels, true)
	return ok, err
}

// judge evaluates one policy under each of its bindings; it returns the Deny decisions, and
// the failures of bindings that could not be applied.
func (r *Request) judge(ctx context.Context, p *Policy, pc PolicyContext) ([]decision, []policyFailure, error) {
	invs, cerrs, err := r.invocations(ctx, &p.policy, pc)
	if err != nil {
		return nil, nil, err
	}
	failures := p.configFailures(cerrs)
	var denied []decision
	for _, inv := range invs {
		ds, err := r.evaluate(ctx, p, inv, pc)
		if err != nil {
			return nil, nil, err
		}
		b := inv.binding
		for _, d := range ds {
			d.policy, d.binding = p.Name, b.name
			for _, action := range b.actions {
				switch action {
				case admissionregistrationv1.Deny:
					denied = append(denied, d)
				case admissionregistrationv1.Warn:
					r.Warnings = append(r.Warnings, fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s", p.Name, b.name, d.message))
				}
				// Audit annotates the audit event, and kplane keeps no audit log.
			}
		}
	}
	return denied, failures, nil
}

// configFailures are the failures of a policy's configuration errors, none when it fails open.
func (p *policy) configFailures(errs []configError) []policyFailure {
	if p.failOpen {
		return nil
	}
	var out []policyFailure
	for _, e := range errs {
		out = append(out, newPolicyFailure(p.Name, e.binding, errors.New(e.message()), ""))
	}
	return out
}

// params are the param objects a binding names: one nil param when the policy takes none.
func (r *Request) params(kind *admissionregistrationv1.ParamKind, ref *admissionregistrationv1.ParamRef, stores ParamStores) ([]runtime.Object, error) {
	if kind == nil || ref == nil {
		return []runtime.Object{nil}, nil
	}
	store, ok := stores(kind.APIVersion, kind.Kind)
	if !ok {
		return nil, fmt.Errorf("paramKind kind `%s, Kind=%s` not known", kind.APIVersion, kind.Kind)
	}
	ns := ""
	if store.Namespaced {
		ns = r.Namespace
		if ref.Namespace != "" {
			ns = ref.Namespace
		} else if ns == "" {
			return nil, errors.New("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, errors.New("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var params []runtime.Object
	switch {
	case ref.Name != "":
		p, err := store.Get(ns, ref.Name)
		switch {
		case err == nil:
			params = []runtime.Object{p}
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	case ref.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return nil, err
		}
		if params, err = store.List(ns, sel); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("one of name or selector must be provided")
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.DenyAction {
		return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	return params, nil
}

// baseVariables are Variables(view). Those of the request's own attributes are computed once
// and kept (r.vars) until a mutation replaces the object: every webhook's match conditions and
// every policy invocation reads the same ones. A view at another version, or one a policy's
// earlier mutation changed, gets its own. Webhooks and policies are matched one at a time, so
// r.vars needs no lock.
func (r *Request) baseVariables(view *Attributes) (map[string]any, error) {
	if view != r.Attributes {
		return Variables(view)
	}
	if r.vars == nil {
		vars, err := Variables(view)
		if err != nil {
			return nil, err
		}
		r.vars = vars
	}
	return r.vars, nil
}

// activation binds the variables of one evaluation; variables are evaluated in order, each
// seeing the ones before it, and one that fails fails only the expressions that read it.
func (r *Request) activation(ctx context.Context, p *policy, view *Attributes, param runtime.Object, pc PolicyContext) (map[string]any, error) {
	base, err := r.baseVariables(view)
	if err != nil {
		return nil, err
	}
	vars := make(map[string]any, len(base)+3)
	for k, v := range base {
		vars[k] = v
	}
	if vars[varParams], err = toMap(param); err != nil {
		return nil, err
	}
	vars[varNamespaceObject] = types.NullValue
	if r.Namespace != "" && !(r.Kind.Group == "" && r.Kind.Kind == "Namespace") && pc.Namespace != nil {
		ns, err := pc.Namespace(ctx, r.Namespace)
		if err != nil {
			return nil, err
		}
		if vars[varNamespaceObject], err = toMap(ns); err != nil {
			return nil, err
		}
	}
	composed := map[string]ref.Val{}
	vars[varVariables] = composed
	for _, v := range p.variables {
		out, _, err := v.prog.Eval(vars)
		if err != nil {
			out = types.NewErr("composited variable %q fails to evaluate: %v", v.name, err)
		}
		composed[v.name] = out
	}
	return vars, nil
}

// conditionsMatch evaluates a policy's match conditions.
func (p *policy) conditionsMatch(vars map[string]any) (bool, error) {
	for _, c := range p.conditions {
		out, _, err := c.prog.Eval(vars)
		if err != nil {
			return false, fmt.Errorf("failed to evaluate match condition %q: %v", c.name, err)
		}
		b, ok := out.Value().(bool)
		if !ok {
			return false, fmt.Errorf("match condition %q did not evaluate to bool", c.name)
		}
		if !b {
			return false, nil
		}
	}
	return true, nil
}

// evaluate runs a policy's conditions and validations for one invocation; evaluation errors
// are decisions per the failure policy.
func (r *Request) evaluate(ctx context.Context, p *Policy, inv invocation, pc PolicyContext) ([]decision, error) {
	view, err := r.viewAt(ctx, inv.version)
	if err != nil {
		return nil, err
	}
	vars, err := r.activation(ctx, &p.policy, view, inv.param, pc)
	if err != nil {
		return nil, err
	}
	failed := func(err error) []decision {
		if p.failOpen {
			return nil
		}
		return []decision{{message: err.Error(), reason: metav1.StatusReasonInvalid}}
	}
	if ok, err := p.conditionsMatch(vars); err != nil || !ok {
		if err != nil {
			return failed(err), nil
		}
		return nil, nil
	}
	var out []decision
	budget := runtimeCostBudget
	for _, v := range p.validations {
		res, det, err := v.prog.Eval(vars)
		if budget -= cost(det); budget < 0 {
			return failed(errOutOfBudget), nil
		}
		if err != nil {
			out = append(out, failed(fmt.Errorf("expression '%s' resulted in error: %v", v.expression, err))...)
			continue
		}
		if res == types.True {
			continue
		}
		if _, ok := res.Value().(bool); !ok {
			out = append(out, failed(fmt.Errorf("expression '%s' did not evaluate to bool", v.expression))...)
			continue
		}
		out = append(out, decision{message: v.denial(vars), reason: v.reason})
	}
	return out, nil
}

// denial is the message of a failed validation: its messageExpression's value when that is a
// usable one-line string, else its message, else the expression.
func (v validation) denial(vars map[string]any) string {
	if v.messageProg != nil {
		if out, _, err := v.messageProg.Eval(vars); err == nil {
			if s, ok := out.Value().(string); ok {
				s = strings.TrimSpace(s)
				if s != "" && len(s) <= maxMessageBytes && !strings.Contains(s, "\n") {
					return s
				}
			}
		}
	}
	if m := strings.TrimSpace(v.message); m != "" {
		return m
	}
	return "failed expression: " + strings.TrimSpace(v.expression)
}
