package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/kplane/kplane/apiserver/admission"
	"github.com/kplane/kplane/apiserver/customresource"
	"github.com/kplane/kplane/storage"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The server fills each ValidatingAdmissionPolicy's status.typeChecking and
// status.observedGeneration when its generation changes, as kube-controller-manager's
// validatingadmissionpolicy-status controller does, under that controller's field manager.
// kplane does it here rather than in its controller manager because the checker needs what
// only the apiserver holds: every served kind's schema (built-in ones from the Go types, a
// CRD's from its schema) and the admission CEL environment, which controllers would otherwise
// have to fetch over /openapi/v3 and import from the apiserver's packages.

// policyStatusManager is the field manager of the status writes, Kubernetes' controller's name.
const policyStatusManager = "validatingadmissionpolicy-status"

// runPolicyStatus type-checks policies as they change, until ctx ends.
func (s *Server) runPolicyStatus(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(s.syncLoop(ctx, s.resources[validatingPoliciesGVR], "policy type checking", s.syncPolicyStatus))
}

// syncPolicyStatus writes the type checking of one policy, unless its generation was checked.
func (s *Server) syncPolicyStatus(ctx context.Context, name string) error {
	res := s.resources[validatingPoliciesGVR]
	obj, err := res.store.Get(ctx, "", name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	p := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	if p.Generation <= p.Status.ObservedGeneration {
		return nil
	}
	warnings, err := admission.TypeCheck(p, admission.KindSchemas{KindFor: s.kindFor, Schema: s.kindSchema})
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"apiVersion": admissionregistrationv1.SchemeGroupVersion.String(), "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": name},
		"status": admissionregistrationv1.ValidatingAdmissionPolicyStatus{ObservedGeneration: p.Generation,
			TypeChecking: &admissionregistrationv1.TypeChecking{ExpressionWarnings: warnings}},
	})
	if err != nil {
		return err
	}
	fields := res.fields["status"]
	if fields == nil {
		return fmt.Errorf("no field manager for %s status", validatingPoliciesGVR.Resource)
	}
	_, err = res.store.Update(ctx, "", name, func(cur storage.Object) (storage.Object, error) {
		c := cur.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		if c.UID != p.UID || c.Generation != p.Generation {
			return nil, apierrors.NewConflict(validatingPoliciesGVR.GroupResource(), name, errors.New("changed meanwhile"))
		}
		out, err := fields.Apply(c, patch, policyStatusManager, true)
		if err != nil {
			return nil, err
		}
		applied, ok := out.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		if !ok {
			return nil, fmt.Errorf("status apply gave a %T", out)
		}
		next := c.DeepCopy()
		next.Status, next.ManagedFields = applied.Status, applied.ManagedFields
		return next, nil
	}, res.claims, false)
	return err
}

// kindFor is the kind served at gvr, built-in or custom.
func (s *Server) kindFor(gvr schema.GroupVersionResource) (schema.GroupVersionKind, bool) {
	res, ok := s.lookupResource(gvr)
	if !ok {
		return schema.GroupVersionKind{}, false
	}
	return res.info.GVK(), true
}

// kindSchema is the schema of a served kind as /openapi/v3 describes it, compiled.
func (s *Server) kindSchema(gvk schema.GroupVersionKind) (*customresource.Schema, bool) {
	res, ok := s.resourceOfKind(gvk)
	if !ok {
		return nil, false
	}
	sch, err := openAPISchema(res)
	if err != nil {
		slog.Warn("policy type checking: schema", "kind", gvk, "err", err)
		return nil, false
	}
	return sch, true
}

// openAPISchema compiles the OpenAPI v3 schema of a resource's kind.
func openAPISchema(res *resource) (*customresource.Schema, error) {
	g := &schemaGen{schemas: map[string]any{}}
	ref, _ := g.kindRef(res)["$ref"].(string)
	data, err := json.Marshal(g.schemas)
	if err != nil {
		return nil, err
	}
	var components map[string]*apiextv1.JSONSchemaProps
	if err := json.Unmarshal(data, &components); err != nil {
		return nil, err
	}
	return customresource.CompileOpenAPI(components, strings.TrimPrefix(ref, "#/components/schemas/"))
}
