package admission

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/kplane/kplane/apiserver/customresource"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// perCallCostLimit bounds the runtime cost of one expression, as Kubernetes' admission does.
const perCallCostLimit = 1000000

// Variables of admission expressions.
const (
	varObject    = "object"
	varOldObject = "oldObject"
	varRequest   = "request"
)

// conditionEnv is the environment of webhooks' match conditions: the base library with the
// request's object, oldObject and request, all of dynamic type, and the authorizer.
var conditionEnv = sync.OnceValues(func() (*cel.Env, error) { return requestEnv(authzLibrary()...) })

// requestEnv is the base library with object, oldObject and request, and more declarations.
func requestEnv(more ...cel.EnvOption) (*cel.Env, error) {
	base, err := customresource.CELEnv()
	if err != nil {
		return nil, err
	}
	return base.Extend(append([]cel.EnvOption{
		cel.Variable(varObject, cel.DynType),
		cel.Variable(varOldObject, cel.DynType),
		cel.Variable(varRequest, cel.DynType),
	}, more...)...)
}

// emptyInputs estimates every value an expression reads as empty: what is left of its cost
// is what it spends whatever the object, on its own literals and loops over them.
type emptyInputs struct{}

func (emptyInputs) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{}
}

func (emptyInputs) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// costExceeded refuses an expression whose worst case on an empty object (every conditional
// taking its costlier branch, every loop over its literals running whole) is over the per-call
// limit. Kubernetes checks admission expressions' cost only when they run (their objects are
// untyped, so nothing bounds their size when they are written); kplane also refuses these when
// they are written, and only then: a configuration already stored runs, limited per call.
func costExceeded(env *cel.Env, ast *cel.Ast, path *field.Path) *field.Error {
	est, err := env.EstimateCost(ast, emptyInputs{})
	if err != nil || est.Max <= perCallCostLimit {
		return nil
	}
	return field.Forbidden(path, fmt.Sprintf("estimated expression cost exceeds budget by factor of %.1fx even on an empty object (budget %d; try simplifying the expression)",
		float64(est.Max)/perCallCostLimit, perCallCostLimit))
}

// Conditions are compiled matchConditions: a request matches when every one is true.
type Conditions struct {
	names []string
	progs []cel.Program
}

// CompileConditions compiles matchConditions to run them; the errors name each expression
// that does not compile, under path.
func CompileConditions(conds []admissionregistrationv1.MatchCondition, path *field.Path) (*Conditions, field.ErrorList) {
	return compileConditions(conds, path, false)
}

// CheckConditions is what is wrong with the matchConditions of a configuration being written:
// what CompileConditions finds, and expressions over the cost budget even on an empty object.
func CheckConditions(conds []admissionregistrationv1.MatchCondition, path *field.Path) field.ErrorList {
	_, errs := compileConditions(conds, path, true)
	return errs
}

func compileConditions(conds []admissionregistrationv1.MatchCondition, path *field.Path, onWrite bool) (*Conditions, field.ErrorList) {
	c := &Conditions{}
	if len(conds) == 0 {
		return c, nil
	}
	env, err := conditionEnv()
	if err != nil {
		return nil, field.ErrorList{field.InternalError(path, err)}
	}
	var errs field.ErrorList
	for i, mc := range conds {
		p := path.Index(i).Child("expression")
		ast, iss := env.Compile(mc.Expression)
		if iss.Err() != nil {
			errs = append(errs, field.Invalid(p, mc.Expression, "compilation failed: "+iss.Err().Error()))
			continue
		}
		if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
			errs = append(errs, field.Invalid(p, mc.Expression, "must evaluate to bool"))
			continue
		}
		if onWrite {
			if ferr := costExceeded(env, ast, p); ferr != nil {
				errs = append(errs, ferr)
				continue
			}
		}
		prog, err := env.Program(ast, cel.CostLimit(perCallCostLimit))
		if err != nil {
			errs = append(errs, field.Invalid(p, mc.Expression, err.Error()))
			continue
		}
		c.names = append(c.names, mc.Name)
		c.progs = append(c.progs, prog)
	}
	return c, errs
}

// Match evaluates the conditions on a request: false as soon as one is false; an error names
// the condition that could not be evaluated.
func (c *Conditions) Match(vars map[string]any) (bool, error) {
	for i, prog := range c.progs {
		out, _, err := prog.Eval(vars)
		if err != nil {
			return false, fmt.Errorf("failed to evaluate match condition %q: %v", c.names[i], err)
		}
		b, ok := out.Value().(bool)
		if !ok {
			return false, fmt.Errorf("match condition %q did not evaluate to bool", c.names[i])
		}
		if !b {
			return false, nil
		}
	}
	return true, nil
}

// Empty reports whether there are no conditions.
func (c *Conditions) Empty() bool { return c == nil || len(c.progs) == 0 }

// Variables are the values of object, oldObject, request and the authorizer for a request's
// expressions.
func Variables(a *Attributes) (map[string]any, error) {
	obj, err := toMap(a.Object)
	if err != nil {
		return nil, err
	}
	old, err := toMap(a.OldObject)
	if err != nil {
		return nil, err
	}
	req, err := requestMap(a)
	if err != nil {
		return nil, err
	}
	vars := map[string]any{varObject: obj, varOldObject: old, varRequest: req}
	authzBindings(vars)
	return vars, nil
}

// toMap is an object as the JSON map expressions see (null when absent).
func toMap(o runtime.Object) (any, error) {
	if o == nil {
		return types.NullValue, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// requestMap is the request variable: the AdmissionRequest without its objects.
func requestMap(a *Attributes) (map[string]any, error) {
	req := request(a, "")
	req.Object, req.OldObject = runtime.RawExtension{}, runtime.RawExtension{}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(data, &m)
	return m, err
}

// request is the AdmissionRequest of a, without its objects, identified by uid.
func request(a *Attributes, uid string) *admissionv1.AdmissionRequest {
	kind := metav1.GroupVersionKind{Group: a.Kind.Group, Version: a.Kind.Version, Kind: a.Kind.Kind}
	resource := metav1.GroupVersionResource{Group: a.Resource.Group, Version: a.Resource.Version, Resource: a.Resource.Resource}
	dry := a.DryRun
	requestKind, requestResource := kind, resource
	if !a.RequestKind.Empty() {
		requestKind = metav1.GroupVersionKind{Group: a.RequestKind.Group, Version: a.RequestKind.Version, Kind: a.RequestKind.Kind}
		requestResource = metav1.GroupVersionResource{Group: a.RequestResource.Group, Version: a.RequestResource.Version, Resource: a.RequestResource.Resource}
	}
	req := &admissionv1.AdmissionRequest{
		Kind: kind, Resource: resource, SubResource: a.Subresource,
		RequestKind: &requestKind, RequestResource: &requestResource, RequestSubResource: a.Subresource,
		Name: a.Name, Namespace: a.Namespace, Operation: a.Operation, UserInfo: a.User, DryRun: &dry,
	}
	req.UID = k8stypes.UID(uid)
	if a.Options != nil {
		if raw, err := json.Marshal(a.Options); err == nil {
			req.Options = runtime.RawExtension{Raw: raw}
		}
	}
	return req
}
