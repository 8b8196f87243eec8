package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MutatingAdmissionPolicies mutate in the mutating phase, before the mutating webhooks, as
// kube-apiserver orders its plugins. A policy matches and takes params as a validating one
// does; each of its mutations is a CEL expression giving either an apply configuration (the
// fields to set, merged as server-side apply merges) or a JSON patch. Mutations run in order,
// each on the object the previous one left; a policy with reinvocationPolicy IfNeeded runs
// again, once, when a later policy or webhook changed the object after it.

// mutationEnv is the environment of mutating policies: the policies' variables and the Object
// and JSONPatch types their mutations build.
var mutationEnv = sync.OnceValues(func() (*cel.Env, error) {
	env, err := policyEnv()
	if err != nil {
		return nil, err
	}
	return env.Extend(cel.CustomTypeProvider(mutationTypes{env.CELTypeProvider()}), jsonPatchLibrary())
})

type mutation struct {
	patchType  admissionregistrationv1.PatchType
	expression string
	prog       cel.Program
}

// MutatingPolicy is a compiled MutatingAdmissionPolicy with its bindings.
type MutatingPolicy struct {
	policy
	reinvoke  bool
	mutations []mutation
}

// MutatingPolicies are the compiled mutating policies of the server, by name.
type MutatingPolicies []*MutatingPolicy

// CompileMutatingPolicy compiles the CEL of a policy; the errors are the policy's invalid
// expressions, under spec.
func CompileMutatingPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) (*MutatingPolicy, field.ErrorList) {
	return compileMutatingPolicy(p, false)
}

// CheckMutatingPolicy is what is wrong with the CEL of a policy being written: what
// CompileMutatingPolicy finds, and expressions over the cost budget even on an empty object.
func CheckMutatingPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) field.ErrorList {
	_, errs := compileMutatingPolicy(p, true)
	return errs
}

func compileMutatingPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy, onWrite bool) (*MutatingPolicy, field.ErrorList) {
	out := &MutatingPolicy{policy: policy{Name: p.Name, failOpen: p.Spec.FailurePolicy != nil && *p.Spec.FailurePolicy == admissionregistrationv1.Ignore,
		constraints: p.Spec.MatchConstraints, paramKind: p.Spec.ParamKind},
		reinvoke: p.Spec.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy}
	spec := field.NewPath("spec")
	c, errs := newPolicyCompiler(mutationEnv, spec, onWrite)
	if errs != nil {
		return nil, errs
	}
	c.common(&out.policy, p.Spec.MatchConditions, p.Spec.Variables, spec)
	for i, m := range p.Spec.Mutations {
		path := spec.Child("mutations").Index(i)
		var expr string
		var want *cel.Type
		switch {
		case m.PatchType == admissionregistrationv1.PatchTypeApplyConfiguration && m.ApplyConfiguration != nil:
			expr, want, path = m.ApplyConfiguration.Expression, types.NewObjectType(objectTypeName), path.Child("applyConfiguration", "expression")
		case m.PatchType == admissionregistrationv1.PatchTypeJSONPatch && m.JSONPatch != nil:
			expr, want, path = m.JSONPatch.Expression, cel.ListType(jsonPatchType), path.Child("jsonPatch", "expression")
		default:
			continue // the registry's validation refuses these
		}
		prog := c.compile(expr, want, path)
		out.mutations = append(out.mutations, mutation{patchType: m.PatchType, expression: expr, prog: prog})
	}
	return out, c.done(&out.policy)
}

// CompileMutatingPolicies compiles policies and attaches their bindings; a binding of a
// policy that does not exist does nothing.
func CompileMutatingPolicies(policies []*admissionregistrationv1.MutatingAdmissionPolicy, bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding) MutatingPolicies {
	return bind(policies, bindings,
		func(p *admissionregistrationv1.MutatingAdmissionPolicy) (*MutatingPolicy, *policy) {
			c, _ := CompileMutatingPolicy(p)
			return c, &c.policy
		},
		func(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) (string, policyBinding) {
			return b.Spec.PolicyName, policyBinding{name: b.Name, match: b.Spec.MatchResources, paramRef: b.Spec.ParamRef}
		})
}

// Merger merges an apply configuration into an object of kind gvk, as server-side apply
// merges (the apiserver's field managers know each kind's list and map semantics).
type Merger func(gvk schema.GroupVersionKind, obj runtime.Object, patch map[string]any) (runtime.Object, error)

// viewAt is the request as seen at version v (nil: as it is).
func (r *Request) viewAt(ctx context.Context, v *Version) (*Attributes, error) {
	if v == nil {
		return r.Attributes, nil
	}
	view, err := r.Attributes.AsVersion(ctx, *v)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return view, nil
}

// mutateBy runs one policy invocation: its match conditions, then its mutations in order,
// each on the object the one before it left; a mutation that fails is skipped, the others
// still apply, as in Kubernetes. It reports whether the invocation ran (its conditions
// matched) and whether it changed the object. The policy's failures come back as failures, to
// be reported per its failure policy; err is an error of the server's.
func (r *Request) mutateBy(ctx context.Context, p *MutatingPolicy, inv invocation, pc PolicyContext) (ran, changed bool, failures []error, err error) {
	view, err := r.viewAt(ctx, inv.version)
	if err != nil {
		return false, false, nil, err
	}
	cur := *view // what the mutations change, one after another
	vars, err := r.activation(ctx, &p.policy, view, inv.param, pc)
	if err != nil {
		return false, false, nil, err
	}
	if ok, err := p.conditionsMatch(vars); err != nil || !ok {
		if err != nil {
			failures = []error{err}
		}
		return false, false, failures, nil
	}
	if cur.Object == nil { // DELETE: nothing to mutate
		return true, false, nil, nil
	}
	for i, m := range p.mutations {
		if i > 0 {
			if vars, err = r.activation(ctx, &p.policy, &cur, inv.param, pc); err != nil {
				return true, false, nil, err
			}
		}
		next, failure := m.apply(cur.Kind, cur.Object, vars, pc.Merge)
		if failure != nil {
			failures = append(failures, failure)
			continue
		}
		cur.Object = next
	}
	if apiequality.Semantic.DeepEqual(cur.Object, view.Object) {
		return true, false, failures, nil
	}
	out := cur.Object
	if inv.version != nil {
		if out, err = inv.version.From(ctx, out); err != nil {
			return true, false, nil, apierrors.NewInternalError(err)
		}
	}
	r.Object, r.vars = out, nil
	return true, true, failures, nil
}

// apply evaluates one mutation and applies its result to obj.
func (m mutation) apply(gvk schema.GroupVersionKind, obj runtime.Object, vars map[string]any, merge Merger) (runtime.Object, error) {
	res, _, err := m.prog.Eval(vars)
	if err != nil {
		return nil, fmt.Errorf("expression '%s' resulted in error: %v", m.expression, err)
	}
	if m.patchType == admissionregistrationv1.PatchTypeApplyConfiguration {
		o, ok := res.(*objectVal)
		if !ok {
			return nil, fmt.Errorf("unsupported return type from ApplyConfiguration expression: %v", res.Type().TypeName())
		}
		if err := checkTypeNames(o, objectTypeName); err != nil {
			return nil, fmt.Errorf("type mismatch: %w", err)
		}
		patch, err := jsonOf(o)
		if err != nil {
			return nil, err
		}
		if merge == nil {
			return nil, errors.New("apply configurations are not supported here")
		}
		out, err := merge(gvk, obj, patch.(map[string]any))
		if err != nil {
			return nil, fmt.Errorf("error applying patch: %w", err)
		}
		return out, nil
	}
	list, ok := res.(traits.Lister)
	if !ok {
		return nil, errors.New("type mismatch: JSONPatchType.expression should evaluate to array")
	}
	var ops []map[string]any
	for it := list.Iterator(); it.HasNext() == types.True; {
		v := it.Next()
		op, ok := v.(*jsonPatchOp)
		if !ok {
			return nil, fmt.Errorf("type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch, got element of %s", v.Type().TypeName())
		}
		j, err := op.jsonOp()
		if err != nil {
			return nil, err
		}
		ops = append(ops, j)
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	out, _, err := applyPatch(obj, data)
	switch {
	case errors.Is(err, jsonpatch.ErrTestFailed):
		return obj, nil // a failed test op leaves the object as it was
	case err != nil:
		return nil, fmt.Errorf("JSON Patch: %w", err)
	}
	return out, nil
}

// mutatingInvocations are the policy invocations of the mutating phase, decided before any
// of them runs, with the failures of policies and bindings that could not be applied.
func (r *Request) mutatingInvocations(ctx context.Context, policies MutatingPolicies, pc PolicyContext) ([]policyStep, []policyFailure, error) {
	var steps []policyStep
	var failures []policyFailure
	for _, p := range policies {
		invs, cerrs, err := r.invocations(ctx, &p.policy, pc)
		if err != nil {
			return nil, nil, err
		}
		failures = append(failures, p.configFailures(cerrs)...)
		for _, inv := range invs {
			steps = append(steps, policyStep{p, inv})
		}
	}
	return steps, failures, nil
}

type policyStep struct {
	p   *MutatingPolicy
	inv invocation
}
