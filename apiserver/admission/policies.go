package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
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
func compileExpr(env *cel.Env, expr string, want *cel.Type, path *field.Path) (cel.Program, *field.Error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, field.Invalid(path, expr, "compilation failed: "+iss.String())
	}
	if want != nil && !ast.OutputType().IsExactType(want) && !ast.OutputType().IsExactType(cel.DynType) {
		return nil, field.Invalid(path, expr, fmt.Sprintf("must evaluate to %v but got %v", want, ast.OutputType()))
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

// Policy is a compiled ValidatingAdmissionPolicy with its bindings.
type Policy struct {
	Name        string
	failOpen    bool
	constraints *admissionregistrationv1.MatchResources
	paramKind   *admissionregistrationv1.ParamKind
	conditions  []namedProgram
	variables   []namedProgram
	validations []validation
	// broken is why the policy cannot be evaluated: each matching request fails with it,
	// per the failure policy.
	broken   error
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// Policies are the compiled policies of the server, by name.
type Policies []*Policy

// CompileValidatingPolicy compiles the CEL of a policy; the errors are the policy's invalid
// expressions, under spec.
func CompileValidatingPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) (*Policy, field.ErrorList) {
	out := &Policy{Name: p.Name, failOpen: p.Spec.FailurePolicy != nil && *p.Spec.FailurePolicy == admissionregistrationv1.Ignore,
		constraints: p.Spec.MatchConstraints, paramKind: p.Spec.ParamKind}
	spec := field.NewPath("spec")
	env, err := policyEnv()
	if err != nil {
		return nil, field.ErrorList{field.InternalError(spec, err)}
	}
	var errs field.ErrorList
	add := func(list *[]namedProgram, name, expr string, want *cel.Type, path *field.Path) {
		prog, ferr := compileExpr(env, expr, want, path)
		if ferr != nil {
			errs = append(errs, ferr)
			return
		}
		*list = append(*list, namedProgram{name, prog})
	}
	for i, mc := range p.Spec.MatchConditions {
		add(&out.conditions, mc.Name, mc.Expression, cel.BoolType, spec.Child("matchConditions").Index(i).Child("expression"))
	}
	for i, v := range p.Spec.Variables {
		add(&out.variables, v.Name, v.Expression, nil, spec.Child("variables").Index(i).Child("expression"))
	}
	for i, v := range p.Spec.Validations {
		path := spec.Child("validations").Index(i)
		val := validation{expression: v.Expression, message: v.Message, reason: metav1.StatusReasonInvalid}
		if v.Reason != nil {
			val.reason = *v.Reason
		}
		var ferr *field.Error
		if val.prog, ferr = compileExpr(env, v.Expression, cel.BoolType, path.Child("expression")); ferr != nil {
			errs = append(errs, ferr)
		}
		if v.MessageExpression != "" {
			if val.messageProg, ferr = compileExpr(env, v.MessageExpression, cel.StringType, path.Child("messageExpression")); ferr != nil {
				errs = append(errs, ferr)
			}
		}
		out.validations = append(out.validations, val)
	}
	if len(errs) > 0 {
		out.broken = errs.ToAggregate()
	}
	return out, errs
}

// ValidatingPolicies compiles policies and attaches their bindings; a binding of a policy that
// does not exist does nothing.
func ValidatingPolicies(policies []*admissionregistrationv1.ValidatingAdmissionPolicy, bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) Policies {
	sort.Slice(policies, func(i, j int) bool { return policies[i].Name < policies[j].Name })
	sort.Slice(bindings, func(i, j int) bool { return bindings[i].Name < bindings[j].Name })
	var out Policies
	for _, p := range policies {
		c, _ := CompileValidatingPolicy(p)
		for _, b := range bindings {
			if b.Spec.PolicyName == p.Name {
				c.bindings = append(c.bindings, b)
			}
		}
		if len(c.bindings) > 0 {
			out = append(out, c)
		}
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
	for _, p := range policies {
		d, err := r.judge(ctx, p, pc)
		if err != nil {
			return err
		}
		denied = append(denied, d...)
	}
	if len(denied) == 0 {
		return nil
	}
	d := denied[0]
	msg := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", d.policy, d.binding, d.message)
	if d.binding == "" {
		msg = fmt.Sprintf("ValidatingAdmissionPolicy '%s' denied request: %s", d.policy, d.message)
	}
	return r.policyError(msg, d.reason)
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
// the exclusions and the selectors.
func resourcesMatch(ctx context.Context, m *admissionregistrationv1.MatchResources, a *Attributes, nsLabels NamespaceLabels, binding bool) (bool, error) {
	if m == nil {
		return binding, nil
	}
	if !(binding && len(m.ResourceRules) == 0) && !namedRulesMatch(m.ResourceRules, a) {
		return false, nil
	}
	if namedRulesMatch(m.ExcludeResourceRules, a) {
		return false, nil
	}
	ok, err := NamespaceSelected(ctx, m.NamespaceSelector, a, nsLabels)
	if err != nil || !ok {
		return false, err
	}
	return ObjectSelected(m.ObjectSelector, a)
}

func namedRulesMatch(rules []admissionregistrationv1.NamedRuleWithOperations, a *Attributes) bool {
	return slices.ContainsFunc(rules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
		return ruleMatches(r.RuleWithOperations, a) && (len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, a.Name))
	})
}

// judge evaluates one policy under each of its bindings; it returns the Deny decisions.
func (r *Request) judge(ctx context.Context, p *Policy, pc PolicyContext) ([]decision, error) {
	ok, err := resourcesMatch(ctx, p.constraints, r.Attributes, r.NamespaceLabels, false)
	if err != nil || !ok {
		return nil, err
	}
	var denied []decision
	configError := func(b string, err error) {
		if p.failOpen {
			return
		}
		what := "policy"
		if b != "" {
			what = "binding"
		}
		denied = append(denied, decision{policy: p.Name, binding: b, message: fmt.Sprintf("failed to configure %s: %v", what, err), reason: metav1.StatusReasonInvalid})
	}
	if p.broken != nil {
		configError("", p.broken)
		return denied, nil
	}
	for _, b := range p.bindings {
		ok, err := resourcesMatch(ctx, b.Spec.MatchResources, r.Attributes, r.NamespaceLabels, true)
		if err != nil {
			configError(b.Name, err)
			continue
		}
		if !ok {
			continue
		}
		params, err := r.params(p.paramKind, b.Spec.ParamRef, pc.Params)
		if err != nil {
			configError(b.Name, err)
			continue
		}
		for _, param := range params {
			ds, err := r.evaluate(ctx, p, param, pc)
			if err != nil {
				return nil, err
			}
			for _, d := range ds {
				d.policy, d.binding = p.Name, b.Name
				for _, action := range b.Spec.ValidationActions {
					switch action {
					case admissionregistrationv1.Deny:
						denied = append(denied, d)
					case admissionregistrationv1.Warn:
						r.Warnings = append(r.Warnings, fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s", p.Name, b.Name, d.message))
					}
					// Audit annotates the audit event, and kplane keeps no audit log.
				}
			}
		}
	}
	return denied, nil
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

// activation binds the variables of one evaluation; variables are evaluated in order, each
// seeing the ones before it, and one that fails fails only the expressions that read it.
func (r *Request) activation(ctx context.Context, p *Policy, param runtime.Object, pc PolicyContext) (map[string]any, error) {
	base, err := Variables(r.Attributes)
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
	authzBindings(vars)
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

// evaluate runs a policy's conditions and validations for one param; evaluation errors are
// decisions per the failure policy.
func (r *Request) evaluate(ctx context.Context, p *Policy, param runtime.Object, pc PolicyContext) ([]decision, error) {
	vars, err := r.activation(ctx, p, param, pc)
	if err != nil {
		return nil, err
	}
	failed := func(err error) []decision {
		if p.failOpen {
			return nil
		}
		return []decision{{message: err.Error(), reason: metav1.StatusReasonInvalid}}
	}
	for _, c := range p.conditions {
		out, _, err := c.prog.Eval(vars)
		if err != nil {
			return failed(fmt.Errorf("failed to evaluate match condition %q: %v", c.name, err)), nil
		}
		b, ok := out.Value().(bool)
		if !ok {
			return failed(fmt.Errorf("match condition %q did not evaluate to bool", c.name)), nil
		}
		if !b {
			return nil, nil
		}
	}
	var out []decision
	for _, v := range p.validations {
		res, _, err := v.prog.Eval(vars)
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
