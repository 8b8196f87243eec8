package customresource

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// totalCostLimit bounds the estimated cost of all the rules of one version's schema.
const totalCostLimit = 100000000

var ruleReasons = []string{string(apiextv1.FieldValueDuplicate), string(apiextv1.FieldValueForbidden), string(apiextv1.FieldValueInvalid), string(apiextv1.FieldValueRequired)}

// validateRuleDeclarations checks the x-kubernetes-validations of a version's schema as
// kube-apiserver does when the CRD is written: each rule is well formed, compiles to a bool
// (its messageExpression to a string), and its estimated worst-case cost, times how often it
// can run in one object, is within the limits.
func validateRuleDeclarations(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	errs := validateRuleFields(path, p)
	if len(errs) > 0 || len(ValidateSchema(path, p)) > 0 {
		// CEL types come from a valid structural schema; fix that first.
		return errs
	}
	s, err := Compile(p)
	if err != nil {
		return errs
	}
	root, err := compileTree(s)
	if err != nil {
		return append(errs, field.InternalError(path.Child("x-kubernetes-validations"), err))
	}
	var total ruleCosts
	errs = append(errs, root.check(path, 1, nil, &total)...)
	if total.sum > totalCostLimit {
		for _, c := range total.top {
			errs = append(errs, field.Forbidden(c.path, "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"))
		}
		errs = append(errs, field.Forbidden(path, costMessage("x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema", total.sum, totalCostLimit)))
	}
	return errs
}

// validateRuleFields checks what each rule says besides its expressions.
func validateRuleFields(path *field.Path, p *apiextv1.JSONSchemaProps) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	var s *Schema
	for i, r := range p.XValidations {
		rp := path.Child("x-kubernetes-validations").Index(i)
		rule, msg := strings.TrimSpace(r.Rule), strings.TrimSpace(r.Message)
		switch {
		case rule == "":
			errs = append(errs, field.Required(rp.Child("rule"), "rule is not specified"))
		case r.Message != "" && msg == "":
			errs = append(errs, field.Invalid(rp.Child("message"), r.Message, "must be non-empty if specified"))
		case hasLineBreak(msg):
			errs = append(errs, field.Invalid(rp.Child("message"), r.Message, "must not contain line breaks"))
		case hasLineBreak(rule) && msg == "":
			errs = append(errs, field.Required(rp.Child("message"), "message must be specified if rule contains line breaks"))
		}
		if r.MessageExpression != "" && strings.TrimSpace(r.MessageExpression) == "" {
			errs = append(errs, field.Required(rp.Child("messageExpression"), "messageExpression must be non-empty if specified"))
		}
		if r.Reason != nil && !slices.Contains(ruleReasons, string(*r.Reason)) {
			errs = append(errs, field.NotSupported(rp.Child("reason"), *r.Reason, ruleReasons))
		}
		if r.FieldPath != "" && strings.TrimSpace(r.FieldPath) == "" {
			errs = append(errs, field.Invalid(rp.Child("fieldPath"), r.FieldPath, "must be non-empty if specified"))
		}
		if hasLineBreak(r.FieldPath) {
			errs = append(errs, field.Invalid(rp.Child("fieldPath"), r.FieldPath, "must not contain line breaks"))
		}
		if r.FieldPath != "" {
			if s == nil {
				s, _ = Compile(&apiextv1.JSONSchemaProps{Type: p.Type, Properties: p.Properties, AdditionalProperties: p.AdditionalProperties})
			}
			if _, err := ruleFieldPath(r.FieldPath, s); s != nil && err != nil {
				errs = append(errs, field.Invalid(rp.Child("fieldPath"), r.FieldPath, "must be a valid path"))
			}
		}
	}
	for _, k := range sortedKeys(p.Properties) {
		prop := p.Properties[k]
		errs = append(errs, validateRuleFields(path.Child("properties").Key(k), &prop)...)
	}
	if p.Items != nil {
		errs = append(errs, validateRuleFields(path.Child("items"), p.Items.Schema)...)
	}
	if p.AdditionalProperties != nil {
		errs = append(errs, validateRuleFields(path.Child("additionalProperties"), p.AdditionalProperties.Schema)...)
	}
	return errs
}

func hasLineBreak(s string) bool { return strings.ContainsAny(s, "\n\r") }

// ruleCosts adds up the estimated costs of a schema's rules and keeps the largest ones.
type ruleCosts struct {
	sum uint64
	top []pathCost
}

type pathCost struct {
	path *field.Path
	cost uint64
}

func (t *ruleCosts) add(path *field.Path, cost uint64) {
	if math.MaxUint64-t.sum < cost {
		t.sum = math.MaxUint64
	} else {
		t.sum += cost
	}
	if cost < totalCostLimit/100 {
		return
	}
	t.top = append(t.top, pathCost{path, cost})
	slices.SortStableFunc(t.top, func(a, b pathCost) int {
		switch {
		case a.cost > b.cost:
			return -1
		case a.cost < b.cost:
			return 1
		}
		return 0
	})
	if len(t.top) > 4 {
		t.top = t.top[:4]
	}
}

// check reports the compile and cost errors of the rules of n (at path) and below.
// cardinality is how many times n's value can occur in one object (0: unbounded); within
// is the path of the list whose items cannot be matched with old ones, if n is under one.
func (n *ruleNode) check(path *field.Path, cardinality uint64, within *field.Path, total *ruleCosts) field.ErrorList {
	if n == nil {
		return nil
	}
	var errs field.ErrorList
	times := cardinality
	if times == 0 {
		times = maxRequestBytes / uint64(n.typ.minSize+1)
	}
	for _, c := range n.rules {
		rp := path.Child("x-kubernetes-validations").Index(c.index)
		cost := timesGuarded(c.cost, times)
		if cost > estimatedCostLimit {
			errs = append(errs, field.Forbidden(rp.Child("rule"), costMessage("estimated rule cost", cost, estimatedCostLimit)))
		}
		total.add(rp.Child("rule"), cost)
		if c.err != "" {
			errs = append(errs, field.Invalid(rp.Child("rule"), storedRule(c.rule), c.err))
		}
		if c.messageErr != "" {
			errs = append(errs, field.Invalid(rp.Child("messageExpression"), storedRule(c.rule), c.messageErr))
		} else if c.message != nil {
			if c.messageCost > estimatedCostLimit {
				errs = append(errs, field.Forbidden(rp.Child("messageExpression"), costMessage("estimated messageExpression cost", c.messageCost, estimatedCostLimit)))
			}
			total.add(rp.Child("messageExpression"), c.messageCost)
		}
		if c.usesOldSelf {
			if within != nil {
				errs = append(errs, field.Invalid(rp.Child("rule"), c.rule.Rule, fmt.Sprintf("oldSelf cannot be used on the uncorrelatable portion of the schema within %v", within)))
			}
		} else if c.err == "" && c.rule.OptionalOldSelf != nil {
			errs = append(errs, field.Invalid(rp.Child("optionalOldSelf"), *c.rule.OptionalOldSelf, "may not be set if oldSelf is not used in rule"))
		}
	}
	s := n.schema
	child := func(limit *int64) uint64 {
		if cardinality == 0 || limit == nil {
			return 0
		}
		return timesGuarded(cardinality, uint64(max(*limit, 0)))
	}
	for _, k := range sortedKeys(n.props) {
		one := int64(1)
		errs = append(errs, n.props[k].check(path.Child("properties").Key(k), child(&one), within, total)...)
	}
	if n.items != nil {
		itemsWithin := within
		if s.ListType != "map" && itemsWithin == nil {
			itemsWithin = path
		}
		errs = append(errs, n.items.check(path.Child("items"), child(s.MaxItems), itemsWithin, total)...)
	}
	if n.values != nil {
		errs = append(errs, n.values.check(path.Child("additionalProperties"), child(s.MaxProps), within, total)...)
	}
	return errs
}

func timesGuarded(cost, times uint64) uint64 {
	if cost == 0 {
		return 0
	}
	if math.MaxUint64/cost < times {
		return math.MaxUint64
	}
	return cost * times
}

func costMessage(what string, cost, limit uint64) string {
	factor := float64(cost) / float64(limit)
	var f string
	switch {
	case factor > 100:
		f = "more than 100x"
	case factor < 1.5:
		f = fmt.Sprintf("%fx", factor)
	default:
		f = fmt.Sprintf("%.1fx", factor)
	}
	return fmt.Sprintf("%s exceeds budget by factor of %s (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)", what, f)
}

// storedRule is a rule as kube-apiserver prints it in errors: its internal form, whose
// fields have no JSON names.
type storedRuleFields struct {
	Rule              string
	Message           string
	MessageExpression string
	Reason            *apiextv1.FieldValueErrorReason
	FieldPath         string
	OptionalOldSelf   *bool
}

func storedRule(r apiextv1.ValidationRule) storedRuleFields {
	return storedRuleFields{r.Rule, r.Message, r.MessageExpression, r.Reason, r.FieldPath, r.OptionalOldSelf}
}

// ruleFieldPath parses a rule's fieldPath (".spec.x", "['a.b']"), relative to the node s:
// each step names a property of an object, or a key of a map.
func ruleFieldPath(path string, s *Schema) ([]pathStep, error) {
	var steps []pathStep
	step := func(name string) error {
		switch {
		case s == nil:
			return errors.New("does not refer to a valid field")
		case s.Properties != nil:
			next, ok := s.Properties[name]
			if !ok {
				return errors.New("does not refer to a valid field")
			}
			steps, s = append(steps, pathStep{name: name}), next
		case s.Additional != nil:
			steps, s = append(steps, pathStep{name: name, isKey: true}), s.Additional
		default:
			return errors.New("does not refer to a valid field")
		}
		return nil
	}
	rest := path
	for rest != "" {
		switch rest[0] {
		case '.':
			rest = rest[1:]
			end := strings.IndexAny(rest, ".[]")
			if end < 0 {
				end = len(rest)
			}
			if end == 0 {
				return nil, errors.New("unexpected end of JSON path")
			}
			if err := step(rest[:end]); err != nil {
				return nil, err
			}
			rest = rest[end:]
		case '[':
			name, after, err := quotedKey(rest[1:])
			if err != nil {
				return nil, err
			}
			if err := step(name); err != nil {
				return nil, err
			}
			rest = after
		default:
			return nil, fmt.Errorf("expected [ or . but got: %s", rest)
		}
	}
	return steps, nil
}

// quotedKey reads 'name'] from the start of s, with the escapes of a CEL single-quoted
// string, and returns the name and what follows.
func quotedKey(s string) (string, string, error) {
	if !strings.HasPrefix(s, "'") {
		return "", "", errors.New("expected single quoted string")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 >= len(s) {
				return "", "", errors.New("invalid string literal")
			}
			i++
			esc, ok := map[byte]byte{'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v', '\'': '\'', '\\': '\\'}[s[i]]
			if !ok {
				return "", "", fmt.Errorf("invalid escape char \\%c", s[i])
			}
			b.WriteByte(esc)
		case '\'':
			if !strings.HasPrefix(s[i+1:], "]") {
				return "", "", errors.New("expected ]")
			}
			return b.String(), s[i+2:], nil
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unexpected end of JSON path")
}
