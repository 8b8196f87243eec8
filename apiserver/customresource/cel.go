package customresource

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Kubernetes' limits on the cost of CEL rules, in cel-go's cost units.
const (
	// perCallCostLimit stops one evaluation of one rule.
	perCallCostLimit = 1000000
	// objectCostBudget is what all the rules of one object write may spend together.
	objectCostBudget = 10000000
	// estimatedCostLimit refuses, when the CRD is written, a rule whose worst case (times how
	// often it can run in one object) is larger.
	estimatedCostLimit = 10000000
	// maxMessageBytes bounds what a messageExpression may return.
	maxMessageBytes = 5 * 1024
)

const selfVar, oldSelfVar = "self", "oldSelf"

// baseEnv is the CEL environment every rule compiles in: the language options and function
// libraries of Kubernetes v1.36's validation rules (without its authorizer libraries, whose
// functions only apply to the authorizer variable CRD rules do not have).
var baseEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		cel.ASTValidators(cel.ValidateDurationLiterals(), cel.ValidateTimestampLiterals(),
			cel.ValidateRegexLiterals(), cel.ValidateHomogeneousAggregateLiterals()),
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
		ext.TwoVarComprehensions(),
		ext.Lists(ext.ListsVersion(3)),
		cel.Lib(kubeLists{}),
		cel.Lib(kubeRegex{}),
		cel.Lib(kubeQuantity{}),
		cel.Lib(kubeURLs{}),
		cel.Lib(kubeIP{}),
		cel.Lib(kubeCIDR{}),
		cel.Lib(kubeFormat{}),
		cel.Lib(kubeSemver{}),
		cel.CostEstimatorOptions(checker.PresenceTestHasCost(false)),
	)
})

// ruleSet holds the compiled x-kubernetes-validations rules of a schema, as a tree that
// follows the schema down to every node holding rules.
type ruleSet struct {
	root *ruleNode
}

// ruleNode is one schema node on the way to rules: its own compiled rules and the nodes
// below it that hold some.
type ruleNode struct {
	schema *Schema
	typ    *celType
	rules  []*compiledRule
	// usesOldSelf: some rule reads oldSelf, so oldSelf must be bound.
	usesOldSelf bool
	props       map[string]*ruleNode
	items       *ruleNode
	values      *ruleNode
}

// compiledRule is one rule, ready to run, with what its CRD-time checks need.
type compiledRule struct {
	rule        apiextv1.ValidationRule
	index       int
	program     cel.Program
	message     cel.Program
	usesOldSelf bool
	// cost is the estimated worst-case cost of one evaluation, messageCost of the message.
	cost, messageCost uint64
	// fieldPath is the rule's fieldPath as a field path relative to the node, if any.
	fieldPath []pathStep
	// err and messageErr are why the rule or its messageExpression did not compile.
	err, messageErr string
}

// compileRules compiles every rule of s; nil when s has none. ValidateCRD refuses rules
// that do not compile; should a stored CRD still hold one, each object write reports it, as
// kube-apiserver does, rather than the version not being served.
func compileRules(s *Schema) (*ruleSet, error) {
	root, err := compileTree(s)
	if err != nil || root == nil {
		return nil, err
	}
	return &ruleSet{root: root}, nil
}

// compileTree builds the rule tree of the resource schema s, nil if s holds no rules.
func compileTree(s *Schema) (*ruleNode, error) {
	if !hasRules(s) {
		return nil, nil
	}
	env, err := baseEnv()
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	provider := &celTypes{Provider: env.CELTypeProvider(), objects: map[string]*celType{}}
	t := provider.declare(s, "selfType", true)
	return compileNode(env, provider, s, t)
}

func hasRules(s *Schema) bool {
	if s == nil {
		return false
	}
	if len(s.Rules) > 0 || hasRules(s.Items) || hasRules(s.Additional) {
		return true
	}
	for _, p := range s.Properties {
		if hasRules(p) {
			return true
		}
	}
	return false
}

func compileNode(env *cel.Env, provider *celTypes, s *Schema, t *celType) (*ruleNode, error) {
	if !hasRules(s) || t == nil {
		// Kubernetes skips rules under nodes CEL cannot type.
		return nil, nil
	}
	n := &ruleNode{schema: s, typ: t}
	if len(s.Rules) > 0 {
		if err := n.compile(env, provider); err != nil {
			return nil, err
		}
	}
	var err error
	for prop, ps := range s.Properties {
		var pt *celType
		if name, ok := escapeProperty(prop); ok && t.fields != nil {
			if f := t.fields[name]; f != nil {
				pt = f.typ
			}
		} else {
			pt = provider.declare(ps, fmt.Sprintf("%s.%q", t.cel.TypeName(), prop), ps.Embedded)
		}
		child, err := compileNode(env, provider, ps, pt)
		if err != nil {
			return nil, err
		}
		if child != nil {
			if n.props == nil {
				n.props = map[string]*ruleNode{}
			}
			n.props[prop] = child
		}
	}
	if s.Items != nil && t.elem != nil {
		if n.items, err = compileNode(env, provider, s.Items, t.elem); err != nil {
			return nil, err
		}
	}
	if s.Additional != nil && t.elem != nil && t.fields == nil {
		if n.values, err = compileNode(env, provider, s.Additional, t.elem); err != nil {
			return nil, err
		}
	}
	if len(n.rules) == 0 && n.props == nil && n.items == nil && n.values == nil {
		return nil, nil
	}
	return n, nil
}

// compile compiles the node's rules, with self (and oldSelf) typed as the node.
func (n *ruleNode) compile(base *cel.Env, provider *celTypes) error {
	env, err := base.Extend(cel.CustomTypeProvider(provider),
		cel.Variable(selfVar, n.typ.cel), cel.Variable(oldSelfVar, n.typ.cel))
	if err != nil {
		return fmt.Errorf("CEL environment: %w", err)
	}
	optEnv, err := base.Extend(cel.CustomTypeProvider(provider),
		cel.Variable(selfVar, n.typ.cel), cel.Variable(oldSelfVar, cel.OptionalType(n.typ.cel)))
	if err != nil {
		return fmt.Errorf("CEL environment: %w", err)
	}
	costs := &libraryCosts{sizes: &schemaSizes{root: n.typ}}
	for i, rule := range n.schema.Rules {
		if strings.TrimSpace(rule.Rule) == "" {
			continue
		}
		e := env
		if rule.OptionalOldSelf != nil && *rule.OptionalOldSelf {
			e = optEnv
		}
		c := &compiledRule{rule: rule, index: i}
		c.compile(e, costs, n.schema)
		if c.usesOldSelf {
			n.usesOldSelf = true
		}
		n.rules = append(n.rules, c)
	}
	return nil
}

func (c *compiledRule) compile(env *cel.Env, costs *libraryCosts, s *Schema) {
	ast, issues := env.Compile(c.rule.Rule)
	if issues != nil && issues.Err() != nil {
		c.err = "compilation failed: " + issues.String()
		return
	}
	if ast.OutputType() != cel.BoolType {
		c.err = "cel expression must evaluate to a bool"
		return
	}
	checked, err := cel.AstToCheckedExpr(ast)
	if err != nil {
		c.err = "unexpected compilation error: " + err.Error()
		return
	}
	for _, ref := range checked.GetReferenceMap() {
		if ref.GetName() == oldSelfVar {
			c.usesOldSelf = true
		}
	}
	if c.program, err = env.Program(ast, programOptions(costs)...); err != nil {
		c.err = "program instantiation failed: " + err.Error()
		return
	}
	est, err := env.EstimateCost(ast, costs)
	if err != nil {
		c.err = "cost estimation failed: " + err.Error()
		return
	}
	c.cost = est.Max
	if c.rule.MessageExpression != "" {
		ast, issues := env.Compile(c.rule.MessageExpression)
		switch {
		case issues != nil && issues.Err() != nil:
			c.messageErr = "messageExpression compilation failed: " + issues.String()
		case ast.OutputType() != cel.StringType:
			c.messageErr = "messageExpression must evaluate to a string"
		default:
			if c.message, err = env.Program(ast, programOptions(costs)...); err != nil {
				c.messageErr = "messageExpression instantiation failed: " + err.Error()
			} else if est, err := env.EstimateCost(ast, costs); err != nil {
				c.messageErr = "cost estimation failed for messageExpression: " + err.Error()
			} else {
				c.messageCost = est.Max
			}
		}
	}
	if c.rule.FieldPath != "" {
		c.fieldPath, _ = ruleFieldPath(c.rule.FieldPath, s)
	}
}

func programOptions(costs *libraryCosts) []cel.ProgramOption {
	return []cel.ProgramOption{
		cel.EvalOptions(cel.OptOptimize, cel.OptTrackCost),
		cel.CostLimit(perCallCostLimit),
		cel.CostTracking(costs),
		cel.CostTrackerOptions(interpreter.PresenceTestHasCost(false)),
		cel.InterruptCheckFrequency(100),
	}
}

// schemaSizes tells the cost estimator how large the values a rule reads can be, from the
// schema's maxItems, maxProperties and maxLength (or what fits in a request without them).
type schemaSizes struct {
	root *celType
}

func (z *schemaSizes) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	path := n.Path()
	if len(path) == 0 || (path[0] != selfVar && path[0] != oldSelfVar) {
		return nil
	}
	t := z.root
	for _, step := range path[1:] {
		switch step {
		case "@items", "@values":
			t = t.elem
		case "@keys":
			return nil
		default:
			f := t.fields[step]
			if f == nil {
				return nil
			}
			t = f.typ
		}
		if t == nil {
			return nil
		}
	}
	return &checker.SizeEstimate{Min: 0, Max: uint64(t.maxElements)}
}

func (z *schemaSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// validateUnlessBlocked evaluates the rules unless errs, the object's other errors, say it
// is too broken for them (a wrong type, a missing field, a value too long or not allowed):
// then one error says the rules were not checked, as kube-apiserver does.
func (rs *ruleSet) validateUnlessBlocked(errs field.ErrorList, obj, old map[string]any) (field.ErrorList, []string) {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return field.ErrorList{field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")}, nil
		}
	}
	return rs.validateWithWarnings(obj, old)
}

// ruleRun is what one object's evaluation of the rules carries along: the cost budget left,
// and the warnings of the failures ratcheting let through.
type ruleRun struct {
	budget   int64
	warnings []string
}

// validate evaluates the rules against obj (and old, on update).
func (rs *ruleSet) validate(obj, old map[string]any) field.ErrorList {
	errs, _ := rs.validateWithWarnings(obj, old)
	return errs
}

// validateWithWarnings is validate that also returns, as warnings, the failures of values
// the update did not change: Kubernetes lets those through (ratcheting) but tells the client.
func (rs *ruleSet) validateWithWarnings(obj, old map[string]any) (field.ErrorList, []string) {
	if rs == nil {
		return nil, nil
	}
	var oldVal any
	if old != nil {
		oldVal = old
	}
	run := &ruleRun{budget: objectCostBudget}
	errs := rs.root.validate(context.Background(), nil, obj, oldVal, old != nil && jsonEqual(obj, old), run)
	return errs, run.warnings
}

// validate runs the rules of n against v (old is the correlated old value, nil if none),
// then those below it. unchanged says v is as it was before the update: its failures are
// then not errors (Kubernetes ratchets them, so that tightened rules do not lock objects),
// except for transition rules. It stops when budget is spent.
func (n *ruleNode) validate(ctx context.Context, path *field.Path, v, old any, unchanged bool, run *ruleRun) field.ErrorList {
	if n == nil || v == nil {
		return nil
	}
	errs := n.evaluate(ctx, path, v, old, unchanged, run)
	if run.budget < 0 {
		return errs
	}
	// below: the old value a child correlates with, and whether the child is unchanged;
	// a child without an old value is unchanged when its parent is.
	below := func(child, oldChild any) (any, bool) {
		if oldChild == nil {
			return nil, unchanged
		}
		return oldChild, jsonEqual(child, oldChild)
	}
	switch val := v.(type) {
	case map[string]any:
		// Every map type (granular, atomic) correlates keys with the old map's.
		oldMap, _ := old.(map[string]any)
		for _, k := range sortedKeys(val) {
			child := n.props[k]
			p := path.Child(k)
			if child == nil && n.values != nil {
				child, p = n.values, path.Key(k)
			}
			if child == nil {
				continue
			}
			oldChild, same := below(val[k], oldMap[k])
			errs = append(errs, child.validate(ctx, p, val[k], oldChild, same, run)...)
			if run.budget < 0 {
				return errs
			}
		}
	case []any:
		if n.items == nil {
			return errs
		}
		oldItems, _ := old.([]any)
		for i, item := range val {
			oldChild, same := below(item, n.oldItem(item, oldItems))
			errs = append(errs, n.items.validate(ctx, path.Index(i), item, oldChild, same, run)...)
			if run.budget < 0 {
				return errs
			}
		}
	}
	return errs
}

// oldItem is the old item an item of a list of type map correlates with, nil if none.
func (n *ruleNode) oldItem(item any, old []any) any {
	o, _ := n.schema.correlatedItem(item, old)
	return o
}

// activation binds self and oldSelf.
type activation struct {
	self, oldSelf ref.Val
	hasOldSelf    bool
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case selfVar:
		return a.self, true
	case oldSelfVar:
		return a.oldSelf, a.hasOldSelf
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

// evaluate runs n's own rules against v; the errors read as kube-apiserver's.
func (n *ruleNode) evaluate(ctx context.Context, path *field.Path, v, old any, unchanged bool, run *ruleRun) field.ErrorList {
	if len(n.rules) == 0 {
		return nil
	}
	var errs field.ErrorList
	typeName := n.schema.Type
	if run.budget <= 0 {
		run.budget = -1
		return field.ErrorList{field.Invalid(path, typeName, "validation failed due to running out of cost budget, no further validation rules will be run")}
	}
	act := &activation{self: toCEL(v, n.typ)}
	optAct := &activation{self: act.self, oldSelf: types.OptionalNone, hasOldSelf: true}
	if n.usesOldSelf && old != nil {
		act.oldSelf, act.hasOldSelf = toCEL(old, n.typ), true
		optAct.oldSelf = types.OptionalOf(act.oldSelf)
	}
	for _, c := range n.rules {
		optional := c.rule.OptionalOldSelf != nil && *c.rule.OptionalOldSelf
		if c.usesOldSelf && old == nil && !optional {
			// A transition rule says nothing about a value that was not there before.
			continue
		}
		if c.err != "" {
			errs = append(errs, field.Invalid(path, typeName, "rule compile error: "+c.err))
			continue
		}
		a := act
		if optional {
			a = optAct
		}
		out, details, err := c.program.ContextEval(ctx, a)
		if !spend(details, run) {
			return append(errs, field.Invalid(path, typeName, "validation failed due to running out of cost budget, no further validation rules will be run"))
		}
		if err != nil {
			msg := err.Error()
			switch {
			case strings.HasPrefix(msg, "no such overload"):
				errs = append(errs, field.Invalid(path, typeName, fmt.Sprintf("'%v': call arguments did not match a supported operator, function or macro signature for rule: %v", err, ruleText(c.rule))))
			case strings.HasPrefix(msg, "operation cancelled: actual cost limit exceeded"):
				run.budget = -1
				return append(errs, field.Invalid(path, typeName, fmt.Sprintf("'%v': no further validation rules will be run due to call cost exceeds limit for rule: %v", err, ruleText(c.rule))))
			default:
				errs = append(errs, field.Invalid(path, typeName, fmt.Sprintf("%v evaluating rule: %v", err, ruleText(c.rule))))
			}
			continue
		}
		if out == types.True {
			continue
		}
		at := path
		if c.fieldPath != nil {
			at = joinPath(path, c.fieldPath)
		}
		detail := ""
		if c.message != nil {
			msg, fatal := c.evalMessage(ctx, act, run)
			if fatal != "" {
				return append(errs, field.Invalid(at, typeName, fatal))
			}
			detail = msg
		}
		if detail == "" {
			detail = "failed rule: " + ruleText(c.rule)
			if strings.TrimSpace(c.rule.Message) != "" {
				detail = strings.TrimSpace(c.rule.Message)
			}
		}
		var bad any = v
		if n.schema.Type == "object" || n.schema.Type == "array" {
			bad = field.OmitValueType{}
		}
		e := reasonError(at, bad, detail, c.rule.Reason)
		if unchanged && !c.usesOldSelf {
			run.warnings = append(run.warnings, e.Error())
			continue
		}
		errs = append(errs, e)
	}
	return errs
}

// spend takes a rule's cost out of the budget; false when it did not fit.
func spend(details *cel.EvalDetails, run *ruleRun) bool {
	if details == nil || details.ActualCost() == nil {
		run.budget = -1
		return false
	}
	cost := *details.ActualCost()
	if cost > math.MaxInt64 || int64(cost) > run.budget {
		run.budget = -1
		return false
	}
	run.budget -= int64(cost)
	return true
}

// evalMessage evaluates the messageExpression of a failed rule. An empty result means the
// static message applies; fatal is set when the budget ran out.
func (c *compiledRule) evalMessage(ctx context.Context, act *activation, run *ruleRun) (msg, fatal string) {
	out, details, err := c.message.ContextEval(ctx, act)
	if !spend(details, run) {
		return "", "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run"
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "operation cancelled: actual cost limit exceeded") {
			run.budget = -1
			return "", fmt.Sprintf("no further validation rules will be run due to call cost exceeds limit for messageExpression: %q", c.rule.MessageExpression)
		}
		return "", ""
	}
	s, ok := out.Value().(string)
	if !ok {
		return "", ""
	}
	s = strings.TrimSpace(s)
	if len(s) > maxMessageBytes || strings.Contains(s, "\n") {
		return "", ""
	}
	return s, ""
}

func ruleText(r apiextv1.ValidationRule) string {
	if m := strings.TrimSpace(r.Message); m != "" {
		return m
	}
	return strings.TrimSpace(r.Rule)
}

// reasonError is the field error of a failed rule, of the type its reason names.
func reasonError(path *field.Path, value any, detail string, reason *apiextv1.FieldValueErrorReason) *field.Error {
	if reason == nil {
		return field.Invalid(path, value, detail)
	}
	switch *reason {
	case apiextv1.FieldValueForbidden:
		return field.Forbidden(path, detail)
	case apiextv1.FieldValueRequired:
		return field.Required(path, detail)
	case apiextv1.FieldValueDuplicate:
		return field.Duplicate(path, value)
	}
	return field.Invalid(path, value, detail)
}

// pathStep is one step of a rule's fieldPath: a property, or a key of a map.
type pathStep struct {
	name  string
	isKey bool
}

// joinPath appends a rule's fieldPath to the path of its node.
func joinPath(base *field.Path, steps []pathStep) *field.Path {
	for _, s := range steps {
		if s.isKey {
			base = base.Key(s.name)
		} else {
			base = base.Child(s.name)
		}
	}
	return base
}
