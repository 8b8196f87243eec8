package admission

import (
	"fmt"
	"sort"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/kplane/kplane/apiserver/customresource"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A ValidatingAdmissionPolicy's expressions run with untyped objects, so a misspelt field is
// only an error when an expression reads it. Its status.typeChecking says so sooner, as
// Kubernetes' validatingadmissionpolicy-status controller does: each validation's expression
// and messageExpression is compiled again with object and oldObject typed by the schema of
// each kind the policy's matchConstraints name, params by the paramKind's, and request and
// namespaceObject by their fixed types; what does not compile is a warning, per kind.

// maxTypeCheckedKinds bounds the kinds one resource rule adds to a policy's type checking.
const maxTypeCheckedKinds = 10

// KindSchemas is what type checking knows of the served kinds.
type KindSchemas struct {
	// KindFor is the kind served at a group, version and resource; false when none is.
	KindFor func(schema.GroupVersionResource) (schema.GroupVersionKind, bool)
	// Schema is the schema of a served kind; false when it has none.
	Schema func(schema.GroupVersionKind) (*customresource.Schema, bool)
}

// TypeCheck type-checks the validations of p against the kinds its matchConstraints name
// (explicitly: a rule with a wildcard group or version adds none, and wildcard resources and
// subresources are skipped). The warnings are the status.typeChecking.expressionWarnings of
// p, nil when every expression checks.
func TypeCheck(p *admissionregistrationv1.ValidatingAdmissionPolicy, kinds KindSchemas) ([]admissionregistrationv1.ExpressionWarning, error) {
	envs, err := typeCheckEnvs(p, kinds)
	if err != nil {
		return nil, err
	}
	var warnings []admissionregistrationv1.ExpressionWarning
	check := func(expr string, path *field.Path) {
		var msgs []string
		for _, e := range envs {
			if _, iss := e.env.Compile(expr); iss.Err() != nil {
				msgs = append(msgs, fmt.Sprintf("%v: %s\n", e.kind, iss.String()))
			}
		}
		if len(msgs) > 0 {
			warnings = append(warnings, admissionregistrationv1.ExpressionWarning{FieldRef: path.String(), Warning: strings.Join(msgs, "\n")})
		}
	}
	validations := field.NewPath("spec", "validations")
	for i, v := range p.Spec.Validations {
		check(v.Expression, validations.Index(i).Child("expression"))
		if v.MessageExpression != "" {
			check(v.MessageExpression, validations.Index(i).Child("messageExpression"))
		}
	}
	return warnings, nil
}

// kindEnv is the environment expressions are checked in for one kind.
type kindEnv struct {
	kind schema.GroupVersionKind
	env  *cel.Env
}

// typeCheckEnvs builds the environment of each kind p is checked against: the variables
// compiled in order, each typed by what its expression gives (dyn if it does not compile).
func typeCheckEnvs(p *admissionregistrationv1.ValidatingAdmissionPolicy, kinds KindSchemas) ([]kindEnv, error) {
	gvks := typeCheckedKinds(p.Spec.MatchConstraints, kinds.KindFor)
	if len(gvks) == 0 {
		return nil, nil
	}
	decls, err := customresource.NewTypeDeclarations()
	if err != nil {
		return nil, err
	}
	request, namespace := declareRequestTypes(decls)
	var params []cel.EnvOption
	if pk := p.Spec.ParamKind; pk != nil {
		t := cel.DynType
		if gv, err := schema.ParseGroupVersion(pk.APIVersion); err == nil {
			if s, ok := kinds.Schema(gv.WithKind(pk.Kind)); ok {
				t = decls.Resource(s, "params."+typeName(gv.WithKind(pk.Kind)))
			}
		}
		params = append(params, cel.Variable(varParams, t))
	}
	base, err := customresource.CELEnv()
	if err != nil {
		return nil, err
	}
	var envs []kindEnv
	for _, gvk := range gvks {
		s, ok := kinds.Schema(gvk)
		if !ok {
			continue
		}
		object := decls.Resource(s, "object."+typeName(gvk))
		opts := append([]cel.EnvOption{decls.EnvOption(),
			cel.Variable(varObject, object), cel.Variable(varOldObject, object),
			cel.Variable(varRequest, request), cel.Variable(varNamespaceObject, namespace),
		}, append(authzLibrary(), params...)...)
		env, err := base.Extend(opts...)
		if err != nil {
			return nil, err
		}
		vars := map[string]*cel.Type{}
		withVars := func(n int) (*cel.Env, error) {
			t := decls.Object(fmt.Sprintf("variables.%s.%d", typeName(gvk), n), vars)
			return env.Extend(cel.Variable(varVariables, t))
		}
		for i, v := range p.Spec.Variables {
			e, err := withVars(i)
			if err != nil {
				return nil, err
			}
			vars[v.Name] = cel.DynType
			if ast, iss := e.Compile(v.Expression); iss.Err() == nil {
				vars[v.Name] = ast.OutputType()
			}
		}
		e, err := withVars(len(p.Spec.Variables))
		if err != nil {
			return nil, err
		}
		envs = append(envs, kindEnv{gvk, e})
	}
	return envs, nil
}

// typeName names the CEL type of a kind's schema: apps.v1.Deployment, v1.ConfigMap.
func typeName(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + "." + gvk.Kind
	}
	return gvk.Group + "." + gvk.Version + "." + gvk.Kind
}

// typeCheckedKinds are the kinds a policy's resource rules name explicitly, sorted by group,
// version and kind. Kubernetes stops at maxTypeCheckedKinds from one rule.
func typeCheckedKinds(m *admissionregistrationv1.MatchResources, kindFor func(schema.GroupVersionResource) (schema.GroupVersionKind, bool)) []schema.GroupVersionKind {
	if m == nil {
		return nil
	}
	found := map[schema.GroupVersionKind]bool{}
	for _, r := range m.ResourceRules {
		if hasWildcard(r.APIGroups) || hasWildcard(r.APIVersions) {
			continue
		}
		var resources []string
		for _, res := range r.Resources {
			if !strings.ContainsAny(res, "*/") {
				resources = append(resources, res)
			}
		}
		groups, versions := sorted(r.APIGroups), sorted(r.APIVersions)
		sort.Strings(resources)
		n := 0
		for _, g := range groups {
			for _, v := range versions {
				for _, res := range resources {
					gvk, ok := kindFor(schema.GroupVersionResource{Group: g, Version: v, Resource: res})
					if !ok {
						continue
					}
					found[gvk] = true
					if n++; n == maxTypeCheckedKinds {
						return sortedKinds(found)
					}
				}
			}
		}
	}
	return sortedKinds(found)
}

func hasWildcard(list []string) bool {
	for _, s := range list {
		if strings.Contains(s, "*") {
			return true
		}
	}
	return false
}

func sorted(list []string) []string {
	out := append([]string(nil), list...)
	sort.Strings(out)
	return out
}

func sortedKinds(set map[schema.GroupVersionKind]bool) []schema.GroupVersionKind {
	out := make([]schema.GroupVersionKind, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Kind < b.Kind
	})
	return out
}

// declareRequestTypes declares the types Kubernetes gives request and namespaceObject in type
// checking: the admission request's fields (without uid and the objects) and what a policy may
// read of a Namespace.
func declareRequestTypes(d *customresource.TypeDeclarations) (request, namespace *cel.Type) {
	str, strs := cel.StringType, cel.ListType(cel.StringType)
	gvk := d.Object("kubernetes.GroupVersionKind", map[string]*cel.Type{"group": str, "version": str, "kind": str})
	gvr := d.Object("kubernetes.GroupVersionResource", map[string]*cel.Type{"group": str, "version": str, "resource": str})
	user := d.Object("kubernetes.UserInfo", map[string]*cel.Type{"username": str, "uid": str, "groups": strs,
		"extra": cel.MapType(str, strs)})
	request = d.Object("kubernetes.AdmissionRequest", map[string]*cel.Type{
		"kind": gvk, "resource": gvr, "subResource": str, "requestKind": gvk, "requestResource": gvr,
		"requestSubResource": str, "name": str, "namespace": str, "operation": str, "userInfo": user,
		"dryRun": cel.BoolType, "options": cel.DynType,
	})
	condition := d.Object("kubernetes.NamespaceCondition", map[string]*cel.Type{"status": str, "type": str,
		"lastTransitionTime": cel.TimestampType, "message": str, "reason": str})
	labels := cel.MapType(str, str)
	metadata := d.Object("kubernetes.NamespaceMetadata", map[string]*cel.Type{
		"name": str, "generateName": str, "namespace": str, "labels": labels, "annotations": labels, "UID": str,
		"creationTimestamp": cel.TimestampType, "deletionGracePeriodSeconds": cel.IntType,
		"deletionTimestamp": cel.TimestampType, "generation": cel.IntType, "resourceVersion": str, "finalizers": strs,
	})
	namespace = d.Object("kubernetes.Namespace", map[string]*cel.Type{
		"metadata": metadata,
		"spec":     d.Object("kubernetes.NamespaceSpec", map[string]*cel.Type{"finalizers": strs}),
		"status":   d.Object("kubernetes.NamespaceStatus", map[string]*cel.Type{"conditions": cel.ListType(condition), "phase": str}),
	})
	return request, namespace
}
