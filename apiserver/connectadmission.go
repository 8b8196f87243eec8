package apiserver

import (
	"context"
	"encoding/json"

	"github.com/kplane/kplane/apiserver/admission"
	"github.com/kplane/kplane/apiserver/authentication"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// admitConnect admits a request to open a stream to a pod (exec, attach, portforward) as
// kube-apiserver does: operation CONNECT on the pod's subresource, the options the client
// asked for as the object, no old object and no options. The mutating policies and webhooks
// run first and what they change is what the stream gets (Kubernetes converts their result
// back into the options it connects with); then the validating policies and webhooks judge
// it. A refusal reaches the client before any stream opens.
func (s *Server) admitConnect(ctx context.Context, req request, opts streamOptions) (streamOptions, error) {
	mutating, validating, policies := s.mutators(), s.validatingHooks(), s.validatingPolicies()
	if mutating.empty() && len(validating) == 0 && len(policies) == 0 {
		return opts, nil
	}
	obj := opts.object(req.subresource)
	user, _ := authentication.UserFrom(ctx)
	ar := &admission.Request{Attributes: &admission.Attributes{
		Operation: admissionv1.Connect, Kind: obj.GetObjectKind().GroupVersionKind(),
		Resource: corev1.SchemeGroupVersion.WithResource("pods"), Subresource: req.subresource,
		Name: req.name, Namespace: req.namespace, Namespaced: true, User: user, Object: obj,
	}, NamespaceLabels: s.namespaceLabels}
	changed, err := ar.Mutate(ctx, mutating.policies, s.policyContext(), mutating.hooks)
	if err == nil {
		if err = ar.ValidatePolicies(ctx, policies, s.policyContext()); err == nil {
			err = ar.Validate(ctx, validating)
		}
	}
	addWarnings(ctx, ar.Warnings)
	if err != nil || !changed {
		return opts, err
	}
	var out streamOptions
	data, err := json.Marshal(ar.Object)
	if err == nil {
		err = json.Unmarshal(data, &out)
	}
	if err != nil {
		return opts, apierrors.NewInternalError(err)
	}
	return out, nil
}
