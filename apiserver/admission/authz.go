package admission

import (
	"fmt"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Policies see Kubernetes' authorizer variable. kplane does not authorize (every request is
// allowed), so every check it builds answers allowed, with a reason that says why.

const (
	varAuthorizer      = "authorizer"
	varRequestResource = "authorizer.requestResource"
	// allowedReason is what decision.reason() says.
	allowedReason = "kplane does not authorize: every request is allowed"
)

var (
	authorizerType    = cel.OpaqueType("kubernetes.authorization.Authorizer")
	pathCheckType     = cel.OpaqueType("kubernetes.authorization.PathCheck")
	groupCheckType    = cel.OpaqueType("kubernetes.authorization.GroupCheck")
	resourceCheckType = cel.OpaqueType("kubernetes.authorization.ResourceCheck")
	decisionType      = cel.OpaqueType("kubernetes.authorization.Decision")
)

// authzValue is a step of an authorization check; it carries nothing but its type, since the
// decision does not depend on what is checked.
type authzValue struct{ t *types.Type }

func (v authzValue) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("%s cannot be converted to a native value", v.t)
}
func (v authzValue) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return v.t
	}
	return types.NewErr("type conversion error from %s to %s", v.t, t)
}
func (v authzValue) Equal(other ref.Val) ref.Val { return types.Bool(other == ref.Val(v)) }
func (v authzValue) Type() ref.Type              { return v.t }
func (v authzValue) Value() any                  { return v }

// authzLibrary declares the authorizer's functions, each step returning the next kind of check.
func authzLibrary() []cel.EnvOption {
	to := func(t *types.Type) func(...ref.Val) ref.Val {
		return func(...ref.Val) ref.Val { return authzValue{t} }
	}
	step := func(name string, from, result *types.Type, args int) cel.EnvOption {
		params := []*cel.Type{from}
		for range args {
			params = append(params, cel.StringType)
		}
		return cel.Function(name, cel.MemberOverload(from.TypeName()+"_"+name, params, result, cel.FunctionBinding(to(result))))
	}
	answer := func(name string, result *types.Type, val ref.Val) cel.EnvOption {
		return cel.Function(name, cel.MemberOverload("decision_"+name, []*cel.Type{decisionType}, result,
			cel.UnaryBinding(func(ref.Val) ref.Val { return val })))
	}
	return []cel.EnvOption{
		cel.Variable(varAuthorizer, authorizerType),
		cel.Variable(varRequestResource, resourceCheckType),
		step("path", authorizerType, pathCheckType, 1),
		step("group", authorizerType, groupCheckType, 1),
		step("serviceAccount", authorizerType, authorizerType, 2),
		step("resource", groupCheckType, resourceCheckType, 1),
		step("subresource", resourceCheckType, resourceCheckType, 1),
		step("namespace", resourceCheckType, resourceCheckType, 1),
		step("name", resourceCheckType, resourceCheckType, 1),
		step("fieldSelector", resourceCheckType, resourceCheckType, 1),
		step("labelSelector", resourceCheckType, resourceCheckType, 1),
		cel.Function("check",
			cel.MemberOverload("pathcheck_check", []*cel.Type{pathCheckType, cel.StringType}, decisionType, cel.FunctionBinding(to(decisionType))),
			cel.MemberOverload("resourcecheck_check", []*cel.Type{resourceCheckType, cel.StringType}, decisionType, cel.FunctionBinding(to(decisionType)))),
		answer("allowed", cel.BoolType, types.True),
		answer("reason", cel.StringType, types.String(allowedReason)),
		answer("errored", cel.BoolType, types.False),
		answer("error", cel.StringType, types.String("")),
	}
}

// authzBindings are the authorizer variables of one evaluation.
func authzBindings(vars map[string]any) {
	vars[varAuthorizer] = authzValue{authorizerType}
	vars[varRequestResource] = authzValue{resourceCheckType}
}
