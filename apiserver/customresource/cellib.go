package customresource

import (
	"errors"
	"math"
	"reflect"
	"regexp"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The functions Kubernetes adds to CEL for validation rules, beyond cel-go's extensions:
// list aggregates, regular expression matches, and resource quantities here; URLs, IPs and
// CIDRs in celnet.go, named formats and semantic versions in celformat.go. (Its
// authorization functions need the authorizer variable, which CRD rules do not have.)

// kubeLists: list.isSorted(), sum(), min(), max(), indexOf(x), lastIndexOf(x).
type kubeLists struct{}

func (kubeLists) LibraryName() string { return "kplane.lists" }

func (kubeLists) CompileOptions() []cel.EnvOption {
	comparable := []*cel.Type{cel.IntType, cel.UintType, cel.DoubleType, cel.BoolType, cel.DurationType, cel.TimestampType, cel.StringType, cel.BytesType}
	summable := map[*cel.Type]ref.Val{cel.IntType: types.Int(0), cel.UintType: types.Uint(0), cel.DoubleType: types.Double(0), cel.DurationType: types.Duration{}}
	var sorted, mins, maxs, sums []cel.FunctionOpt
	for _, t := range comparable {
		name := t.String()
		sorted = append(sorted, cel.MemberOverload("list_"+name+"_is_sorted", []*cel.Type{cel.ListType(t)}, cel.BoolType, cel.UnaryBinding(listIsSorted)))
		mins = append(mins, cel.MemberOverload("list_"+name+"_min", []*cel.Type{cel.ListType(t)}, t, cel.UnaryBinding(listExtreme("min", -1))))
		maxs = append(maxs, cel.MemberOverload("list_"+name+"_max", []*cel.Type{cel.ListType(t)}, t, cel.UnaryBinding(listExtreme("max", 1))))
		if zero, ok := summable[t]; ok {
			sums = append(sums, cel.MemberOverload("list_"+name+"_sum", []*cel.Type{cel.ListType(t)}, t, cel.UnaryBinding(listSum(zero))))
		}
	}
	a := cel.TypeParamType("A")
	return []cel.EnvOption{
		cel.Function("isSorted", sorted...),
		cel.Function("min", mins...),
		cel.Function("max", maxs...),
		cel.Function("sum", sums...),
		cel.Function("indexOf", cel.MemberOverload("list_a_index_of", []*cel.Type{cel.ListType(a), a}, cel.IntType,
			cel.BinaryBinding(func(l, v ref.Val) ref.Val { return listIndexOf(l, v, false) }))),
		cel.Function("lastIndexOf", cel.MemberOverload("list_a_last_index_of", []*cel.Type{cel.ListType(a), a}, cel.IntType,
			cel.BinaryBinding(func(l, v ref.Val) ref.Val { return listIndexOf(l, v, true) }))),
	}
}

func (kubeLists) ProgramOptions() []cel.ProgramOption { return nil }

func listItems(v ref.Val) ([]ref.Val, ref.Val) {
	l, ok := v.(traits.Lister)
	if !ok {
		return nil, types.MaybeNoSuchOverloadErr(v)
	}
	var items []ref.Val
	for it := l.Iterator(); it.HasNext() == types.True; {
		items = append(items, it.Next())
	}
	return items, nil
}

func listIsSorted(v ref.Val) ref.Val {
	items, err := listItems(v)
	if err != nil {
		return err
	}
	for i := 1; i < len(items); i++ {
		prev, ok := items[i-1].(traits.Comparer)
		if !ok {
			return types.MaybeNoSuchOverloadErr(items[i-1])
		}
		if c := prev.Compare(items[i]); c == types.IntOne {
			return types.False
		} else if types.IsError(c) {
			return c
		}
	}
	return types.True
}

// listExtreme is min (want -1) or max (want 1) of a list; an empty list has neither.
func listExtreme(name string, want types.Int) func(ref.Val) ref.Val {
	return func(v ref.Val) ref.Val {
		items, err := listItems(v)
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return types.NewErr("%s called on empty list", name)
		}
		best := items[0]
		for _, e := range items[1:] {
			c, ok := e.(traits.Comparer)
			if !ok {
				return types.MaybeNoSuchOverloadErr(e)
			}
			r := c.Compare(best)
			if types.IsError(r) {
				return r
			}
			if r == want {
				best = e
			}
		}
		return best
	}
}

func listSum(zero ref.Val) func(ref.Val) ref.Val {
	return func(v ref.Val) ref.Val {
		items, err := listItems(v)
		if err != nil {
			return err
		}
		acc := zero
		for _, e := range items {
			a, ok := acc.(traits.Adder)
			if !ok {
				return types.MaybeNoSuchOverloadErr(acc)
			}
			if acc = a.Add(e); types.IsError(acc) {
				return acc
			}
		}
		return acc
	}
}

func listIndexOf(l, v ref.Val, last bool) ref.Val {
	items, err := listItems(l)
	if err != nil {
		return err
	}
	found := types.Int(-1)
	for i, e := range items {
		if e.Equal(v) == types.True {
			found = types.Int(i)
			if !last {
				break
			}
		}
	}
	return found
}

// kubeRegex: string.find(regex) and string.findAll(regex[, limit]).
type kubeRegex struct{}

func (kubeRegex) LibraryName() string { return "kplane.regex" }

func (kubeRegex) CompileOptions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("find", cel.MemberOverload("string_find_string", []*cel.Type{cel.StringType, cel.StringType}, cel.StringType,
			cel.BinaryBinding(regexFind))),
		cel.Function("findAll",
			cel.MemberOverload("string_find_all_string", []*cel.Type{cel.StringType, cel.StringType}, cel.ListType(cel.StringType),
				cel.BinaryBinding(func(s, re ref.Val) ref.Val { return regexFindAll(s, re, types.Int(-1)) })),
			cel.MemberOverload("string_find_all_string_int", []*cel.Type{cel.StringType, cel.StringType, cel.IntType}, cel.ListType(cel.StringType),
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return regexFindAll(args[0], args[1], args[2]) }))),
	}
}

func (kubeRegex) ProgramOptions() []cel.ProgramOption { return nil }

func compileRegex(s, re ref.Val) (string, *regexp.Regexp, ref.Val) {
	str, ok := s.(types.String)
	if !ok {
		return "", nil, types.MaybeNoSuchOverloadErr(s)
	}
	pattern, ok := re.(types.String)
	if !ok {
		return "", nil, types.MaybeNoSuchOverloadErr(re)
	}
	compiled, err := regexp.Compile(string(pattern))
	if err != nil {
		return "", nil, types.WrapErr(err)
	}
	return string(str), compiled, nil
}

func regexFind(s, re ref.Val) ref.Val {
	str, compiled, err := compileRegex(s, re)
	if err != nil {
		return err
	}
	return types.String(compiled.FindString(str))
}

func regexFindAll(s, re, limit ref.Val) ref.Val {
	str, compiled, err := compileRegex(s, re)
	if err != nil {
		return err
	}
	n, ok := limit.(types.Int)
	if !ok {
		return types.MaybeNoSuchOverloadErr(limit)
	}
	return types.DefaultTypeAdapter.NativeToValue(compiled.FindAllString(str, int(n)))
}

// quantityType is Kubernetes' kubernetes.Quantity: a resource.Quantity ("500m", "1Gi").
var quantityType = cel.ObjectType("kubernetes.Quantity")

type quantity struct{ q *resource.Quantity }

func (q quantity) ConvertToNative(t reflect.Type) (any, error) {
	if reflect.TypeOf(q.q).AssignableTo(t) {
		return q.q, nil
	}
	return nil, errors.New("type conversion error from 'Quantity' to '" + t.String() + "'")
}

func (q quantity) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case quantityType:
		return q
	case types.TypeType:
		return quantityType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", quantityType, t)
}

func (q quantity) Equal(other ref.Val) ref.Val {
	o, ok := other.(quantity)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(q.q.Equal(*o.q))
}

func (q quantity) Type() ref.Type { return quantityType }
func (q quantity) Value() any     { return q.q }

// kubeQuantity: quantity(s), isQuantity(s), sign(q) and the Quantity methods.
type kubeQuantity struct{}

func (kubeQuantity) LibraryName() string { return "kplane.quantity" }

func (kubeQuantity) CompileOptions() []cel.EnvOption {
	qq := []*cel.Type{quantityType, quantityType}
	q1 := []*cel.Type{quantityType}
	return []cel.EnvOption{
		cel.Function("quantity", cel.Overload("string_to_quantity", []*cel.Type{cel.StringType}, quantityType, cel.UnaryBinding(func(s ref.Val) ref.Val {
			str, ok := s.(types.String)
			if !ok {
				return types.MaybeNoSuchOverloadErr(s)
			}
			q, err := resource.ParseQuantity(string(str))
			if err != nil {
				return types.WrapErr(err)
			}
			return quantity{&q}
		}))),
		cel.Function("isQuantity", cel.Overload("is_quantity_string", []*cel.Type{cel.StringType}, cel.BoolType, cel.UnaryBinding(func(s ref.Val) ref.Val {
			str, ok := s.(types.String)
			if !ok {
				return types.MaybeNoSuchOverloadErr(s)
			}
			_, err := resource.ParseQuantity(string(str))
			return types.Bool(err == nil)
		}))),
		cel.Function("sign", cel.Overload("quantity_sign", q1, cel.IntType, quantityUnary(func(q *resource.Quantity) ref.Val { return types.Int(q.Sign()) }))),
		cel.Function("isGreaterThan", cel.MemberOverload("quantity_is_greater_than", qq, cel.BoolType, quantityBinary(func(a, b *resource.Quantity) ref.Val { return types.Bool(a.Cmp(*b) == 1) }))),
		cel.Function("isLessThan", cel.MemberOverload("quantity_is_less_than", qq, cel.BoolType, quantityBinary(func(a, b *resource.Quantity) ref.Val { return types.Bool(a.Cmp(*b) == -1) }))),
		cel.Function("compareTo", cel.MemberOverload("quantity_compare_to", qq, cel.IntType, quantityBinary(func(a, b *resource.Quantity) ref.Val { return types.Int(a.Cmp(*b)) }))),
		cel.Function("asApproximateFloat", cel.MemberOverload("quantity_get_float", q1, cel.DoubleType, quantityUnary(func(q *resource.Quantity) ref.Val { return types.Double(q.AsApproximateFloat64()) }))),
		cel.Function("asInteger", cel.MemberOverload("quantity_get_int", q1, cel.IntType, quantityUnary(func(q *resource.Quantity) ref.Val {
			if v, ok := q.AsInt64(); ok {
				return types.Int(v)
			}
			return types.NewErr("cannot convert value to integer")
		}))),
		cel.Function("isInteger", cel.MemberOverload("quantity_is_integer", q1, cel.BoolType, quantityUnary(func(q *resource.Quantity) ref.Val {
			_, ok := q.AsInt64()
			return types.Bool(ok)
		}))),
		cel.Function("add",
			cel.MemberOverload("quantity_add", qq, quantityType, quantityBinary(func(a, b *resource.Quantity) ref.Val {
				sum := a.DeepCopy()
				sum.Add(*b)
				return quantity{&sum}
			})),
			cel.MemberOverload("quantity_add_int", []*cel.Type{quantityType, cel.IntType}, quantityType, cel.BinaryBinding(quantityPlusInt(1)))),
		cel.Function("sub",
			cel.MemberOverload("quantity_sub", qq, quantityType, quantityBinary(func(a, b *resource.Quantity) ref.Val {
				diff := a.DeepCopy()
				diff.Sub(*b)
				return quantity{&diff}
			})),
			cel.MemberOverload("quantity_sub_int", []*cel.Type{quantityType, cel.IntType}, quantityType, cel.BinaryBinding(quantityPlusInt(-1)))),
	}
}

func (kubeQuantity) ProgramOptions() []cel.ProgramOption { return nil }

func quantityUnary(f func(*resource.Quantity) ref.Val) cel.OverloadOpt {
	return cel.UnaryBinding(func(v ref.Val) ref.Val {
		q, ok := v.(quantity)
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		return f(q.q)
	})
}

func quantityBinary(f func(a, b *resource.Quantity) ref.Val) cel.OverloadOpt {
	return cel.BinaryBinding(func(x, y ref.Val) ref.Val {
		a, ok := x.(quantity)
		if !ok {
			return types.MaybeNoSuchOverloadErr(x)
		}
		b, ok := y.(quantity)
		if !ok {
			return types.MaybeNoSuchOverloadErr(y)
		}
		return f(a.q, b.q)
	})
}

// quantityPlusInt adds (sign 1) or subtracts (sign -1) an integer from a quantity.
func quantityPlusInt(sign int64) func(x, y ref.Val) ref.Val {
	return func(x, y ref.Val) ref.Val {
		a, ok := x.(quantity)
		if !ok {
			return types.MaybeNoSuchOverloadErr(x)
		}
		n, ok := y.(types.Int)
		if !ok {
			return types.MaybeNoSuchOverloadErr(y)
		}
		res := a.q.DeepCopy()
		res.Add(*resource.NewQuantity(sign*int64(n), resource.DecimalExponent))
		return quantity{&res}
	}
}

// libraryCosts prices the library functions whose cost depends on their arguments' sizes,
// both when a rule is checked (EstimateCallCost, from the schema's size limits) and when it
// runs (CallCost, from the actual values); cel-go prices the rest.
type libraryCosts struct {
	sizes checker.CostEstimator
}

func (c *libraryCosts) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	if c.sizes == nil {
		return nil
	}
	return c.sizes.EstimateSize(n)
}

func (c *libraryCosts) sizeOf(n checker.AstNode) checker.SizeEstimate {
	if s := n.ComputedSize(); s != nil {
		return *s
	}
	if s := c.EstimateSize(n); s != nil {
		return *s
	}
	return checker.SizeEstimate{Min: 0, Max: math.MaxUint64}
}

func (c *libraryCosts) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	switch function {
	case "isSorted", "sum", "max", "min", "indexOf", "lastIndexOf":
		if target == nil {
			return nil
		}
		// One traversal of the list (or, for a string's indexOf, of the string).
		if (*target).Type().Kind() == types.ListKind {
			return &checker.CallEstimate{CostEstimate: c.sizeOf(*target).MultiplyByCost(checker.CostEstimate{Min: 1, Max: 1})}
		}
		return &checker.CallEstimate{CostEstimate: c.sizeOf(*target).MultiplyByCostFactor(common.StringTraversalCostFactor)}
	case "lowerAscii", "upperAscii", "substring", "trim":
		if target != nil {
			sz := c.sizeOf(*target)
			return &checker.CallEstimate{CostEstimate: sz.MultiplyByCostFactor(common.StringTraversalCostFactor), ResultSize: &sz}
		}
	case "replace", "split", "join":
		if target != nil {
			return &checker.CallEstimate{CostEstimate: c.sizeOf(*target).MultiplyByCostFactor(2 * common.StringTraversalCostFactor)}
		}
	case "find", "findAll":
		if target != nil && len(args) >= 1 {
			str := c.sizeOf(*target).Add(checker.SizeEstimate{Min: 1, Max: 1}).MultiplyByCostFactor(common.StringTraversalCostFactor)
			re := c.sizeOf(args[0]).MultiplyByCostFactor(common.RegexStringLengthCostFactor)
			est := &checker.CallEstimate{CostEstimate: str.Multiply(re)}
			if function == "findAll" {
				sz := c.sizeOf(*target)
				est.ResultSize = &sz
			}
			return est
		}
	case "url":
		if len(args) == 1 {
			sz := c.sizeOf(args[0])
			return &checker.CallEstimate{CostEstimate: sz.MultiplyByCostFactor(common.StringTraversalCostFactor), ResultSize: &sz}
		}
	case "quantity", "isQuantity", "semver", "isSemver", "cidr", "isIP", "isCIDR":
		if len(args) >= 1 {
			return &checker.CallEstimate{CostEstimate: c.sizeOf(args[0]).MultiplyByCostFactor(common.StringTraversalCostFactor)}
		}
	case "ip":
		if overloadID == "cidr_ip" {
			return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}}
		}
		if len(args) >= 1 {
			return &checker.CallEstimate{CostEstimate: c.sizeOf(args[0]).MultiplyByCostFactor(common.StringTraversalCostFactor)}
		}
	case "ip.isCanonical":
		if len(args) >= 1 {
			return &checker.CallEstimate{CostEstimate: c.sizeOf(args[0]).MultiplyByCostFactor(2 * common.StringTraversalCostFactor)}
		}
	case "containsIP", "containsCIDR":
		if len(args) >= 1 {
			// Comparing addresses: both at most 16 bytes; containsCIDR also compares lengths.
			addr := checker.SizeEstimate{Min: 4, Max: 16}
			est := addr.Add(addr).MultiplyByCostFactor(common.StringTraversalCostFactor)
			if function == "containsCIDR" {
				est = est.Add(addr.MultiplyByCostFactor(common.StringTraversalCostFactor)).Add(checker.CostEstimate{Min: 1, Max: 1})
			}
			if strings.HasSuffix(overloadID, "_string") {
				// Kubernetes prices the parse by the size of the call's first argument.
				est = est.Add(checker.CostEstimate(c.sizeOf(args[0])).MultiplyByCostFactor(common.StringTraversalCostFactor))
			}
			return &checker.CallEstimate{CostEstimate: est}
		}
	case "validate":
		if len(args) >= 1 {
			est := c.sizeOf(args[0]).MultiplyByCostFactor(common.StringTraversalCostFactor).MultiplyByCostFactor(maxFormatRegexSize * common.RegexStringLengthCostFactor)
			return &checker.CallEstimate{CostEstimate: est}
		}
	case "sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan", "isLessThan", "compareTo", "add", "sub",
		"major", "minor", "patch", "format.named", "masked", "prefixLength", "family",
		"isUnspecified", "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast",
		"getScheme", "getHostname", "getHost", "getPort", "getEscapedPath", "getQuery":
		return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}}
	case "_==_":
		if len(args) == 2 && args[0].Type().Equal(args[1].Type()) == types.True {
			return equalityEstimate(args[0].Type(), args[1])
		}
	}
	return nil
}

// equalityEstimate prices comparing two values of Kubernetes' library types t, which cel-go
// cannot size; nil for other types.
func equalityEstimate(t *cel.Type, rhs checker.AstNode) *checker.CallEstimate {
	switch {
	case t.Equal(quantityType) == types.True, t.Equal(semverType) == types.True,
		t.Equal(ipType) == types.True, t.Equal(cidrType) == types.True:
		return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}}
	case t.Equal(formatType) == types.True:
		return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: maxFormatNameSize}.MultiplyByCostFactor(common.StringTraversalCostFactor)}
	case t.Equal(urlType) == types.True:
		size := checker.SizeEstimate{Min: 1, Max: 1}
		if s := rhs.ComputedSize(); s != nil {
			size = *s
		}
		return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: size.Max}.MultiplyByCostFactor(common.StringTraversalCostFactor)}
	}
	return nil
}

func (c *libraryCosts) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	traversal := func(v ref.Val, factor float64) *uint64 {
		n := uint64(math.Ceil(float64(actualSize(v)) * factor))
		return &n
	}
	switch function {
	case "isSorted", "sum", "max", "min", "indexOf", "lastIndexOf":
		if len(args) > 0 {
			if _, isList := args[0].(traits.Lister); isList {
				return traversal(args[0], 1)
			}
			return traversal(args[0], common.StringTraversalCostFactor)
		}
	case "lowerAscii", "upperAscii", "substring", "trim", "quantity", "isQuantity", "url", "semver", "isSemver", "cidr", "isIP", "isCIDR":
		if len(args) > 0 {
			return traversal(args[0], common.StringTraversalCostFactor)
		}
	case "ip":
		if overloadID == "cidr_ip" {
			n := uint64(1)
			return &n
		}
		if len(args) > 0 {
			return traversal(args[0], common.StringTraversalCostFactor)
		}
	case "ip.isCanonical":
		if len(args) > 0 {
			return traversal(args[0], 2*common.StringTraversalCostFactor)
		}
	case "containsIP", "containsCIDR":
		if len(args) >= 2 {
			cidr := actualSize(args[0])
			n := uint64(math.Ceil(float64(2*cidr) * common.StringTraversalCostFactor))
			if function == "containsCIDR" {
				n += uint64(math.Ceil(float64(cidr)*common.StringTraversalCostFactor)) + 1
			}
			if strings.HasSuffix(overloadID, "_string") {
				n += uint64(math.Ceil(float64(actualSize(args[1])) * common.StringTraversalCostFactor))
			}
			return &n
		}
	case "validate":
		if len(args) >= 2 {
			if f, ok := args[0].(*namedFormat); ok {
				str := uint64(math.Ceil((1 + float64(actualSize(args[1]))) * common.StringTraversalCostFactor))
				re := uint64(math.Ceil(float64(f.maxRegexSize) * common.RegexStringLengthCostFactor))
				n := str * re
				return &n
			}
		}
	case "replace", "split":
		if len(args) > 0 {
			return traversal(args[0], 2*common.StringTraversalCostFactor)
		}
	case "join":
		return traversal(result, 2*common.StringTraversalCostFactor)
	case "find", "findAll":
		if len(args) >= 2 {
			str := uint64(math.Ceil((1 + float64(actualSize(args[0]))) * common.StringTraversalCostFactor))
			re := uint64(math.Ceil(float64(actualSize(args[1])) * common.RegexStringLengthCostFactor))
			n := str * re
			return &n
		}
	case "sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan", "isLessThan", "compareTo", "add", "sub",
		"major", "minor", "patch", "format.named", "masked", "prefixLength", "family",
		"isUnspecified", "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast",
		"getScheme", "getHostname", "getHost", "getPort", "getEscapedPath", "getQuery":
		n := uint64(1)
		return &n
	case "_==_":
		if len(args) == 2 {
			switch args[0].(type) {
			case quantity, ipValue, cidrValue, *namedFormat, urlValue, semverValue:
				n := uint64(1)
				return &n
			}
		}
	}
	return nil
}

func actualSize(v ref.Val) uint64 {
	if s, ok := v.(traits.Sizer); ok {
		if n, ok := s.Size().(types.Int); ok {
			return uint64(n)
		}
	}
	return 1
}
