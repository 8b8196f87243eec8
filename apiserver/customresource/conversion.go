package customresource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kplane/kplane/apiserver/webhook"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Converter converts a CRD's objects between its versions: by changing their apiVersion
// (strategy None), or through the CRD's conversion webhook, all of a list's objects in one
// ConversionReview.
type Converter struct {
	hook    *webhook.Client // nil for None
	reviews string          // the ConversionReview version the webhook takes: v1 or v1beta1
}

// NewConverter builds crd's converter; resolve finds the Service a webhook names.
func NewConverter(crd *apiextv1.CustomResourceDefinition, resolve webhook.ResolveService) (*Converter, error) {
	c := &Converter{}
	conv := crd.Spec.Conversion
	if conv == nil || conv.Strategy != apiextv1.WebhookConverter {
		return c, nil
	}
	if conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		return nil, errors.New("spec.conversion.webhook.clientConfig is required for Webhook conversion")
	}
	for _, v := range conv.Webhook.ConversionReviewVersions {
		if v == "v1" || v == "v1beta1" {
			c.reviews = v
			break
		}
	}
	if c.reviews == "" {
		return nil, errors.New("no supported conversion review versions")
	}
	cc := conv.Webhook.ClientConfig
	cfg := webhook.Config{CABundle: cc.CABundle}
	if cc.URL != nil {
		cfg.URL = *cc.URL
	}
	if s := cc.Service; s != nil {
		cfg.Service = webhook.ServiceOf(s.Namespace, s.Name, s.Path, s.Port)
	}
	var err error
	c.hook, err = webhook.New(cfg, resolve, webhook.DefaultTimeout)
	return c, err
}

// Close releases the webhook client's connections.
func (c *Converter) Close() {
	if c.hook != nil {
		c.hook.Close()
	}
}

// Convert returns objs in version to. Objects already in it are returned as they are; the
// others are new objects.
func (c *Converter) Convert(ctx context.Context, objs []*unstructured.Unstructured, to schema.GroupVersion) ([]*unstructured.Unstructured, error) {
	out := slices.Clone(objs)
	var todo []int
	for i, o := range objs {
		if o.GetAPIVersion() != to.String() {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return out, nil
	}
	if c.hook == nil {
		for _, i := range todo {
			u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(objs[i].Object)}
			u.SetAPIVersion(to.String())
			out[i] = u
		}
		return out, nil
	}
	in := make([]*unstructured.Unstructured, len(todo))
	for j, i := range todo {
		in[j] = objs[i]
	}
	converted, err := c.review(ctx, in, to)
	if err != nil {
		return nil, fmt.Errorf("conversion webhook for %s failed: %v", in[0].GroupVersionKind(), err)
	}
	for j, i := range todo {
		out[i] = converted[j]
	}
	return out, nil
}

// conversionReview is a ConversionReview of either version: v1 and v1beta1 have the same
// fields.
type conversionReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *apiextv1.ConversionRequest  `json:"request,omitempty"`
	Response        *apiextv1.ConversionResponse `json:"response,omitempty"`
}

// review asks the webhook to convert in and checks what it answers: as many objects as were
// sent, each of the version asked for, with the same kind, name, namespace and UID. Only the
// labels and annotations of the metadata it answers are kept; the rest is the original's.
func (c *Converter) review(ctx context.Context, in []*unstructured.Unstructured, to schema.GroupVersion) ([]*unstructured.Unstructured, error) {
	uid := uuid.NewUUID()
	req := conversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/" + c.reviews, Kind: "ConversionReview"},
		Request:  &apiextv1.ConversionRequest{UID: uid, DesiredAPIVersion: to.String()},
	}
	for _, o := range in {
		raw, err := o.MarshalJSON()
		if err != nil {
			return nil, err
		}
		req.Request.Objects = append(req.Request.Objects, runtime.RawExtension{Raw: raw})
	}
	var resp conversionReview
	if err := c.hook.Call(ctx, &req, &resp); err != nil {
		return nil, err
	}
	if err := checkResponse(resp, req.APIVersion, uid); err != nil {
		return nil, err
	}
	got := resp.Response.ConvertedObjects
	if len(got) != len(in) {
		return nil, fmt.Errorf("returned %d objects, expected %d", len(got), len(in))
	}
	out := make([]*unstructured.Unstructured, len(in))
	for i, raw := range got {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			return nil, fmt.Errorf("invalid converted object at index %d: %v", i, err)
		}
		if err := checkConverted(in[i], u, to); err != nil {
			return nil, fmt.Errorf("invalid converted object at index %d: %v", i, err)
		}
		if err := keepMetadata(in[i], u); err != nil {
			return nil, fmt.Errorf("invalid metadata in object at index %d: %v", i, err)
		}
		out[i] = u
	}
	return out, nil
}

func checkResponse(resp conversionReview, apiVersion string, uid types.UID) error {
	if resp.APIVersion != apiVersion || resp.Kind != "ConversionReview" {
		return fmt.Errorf("expected webhook response of %s, Kind=ConversionReview, got %s, Kind=%s", apiVersion, resp.APIVersion, resp.Kind)
	}
	r := resp.Response
	if r == nil {
		return errors.New("no response provided")
	}
	if r.UID != uid {
		return fmt.Errorf("expected response.uid=%q, got %q", uid, r.UID)
	}
	if r.Result.Status != metav1.StatusSuccess {
		if r.Result.Message != "" {
			return errors.New(r.Result.Message)
		}
		return fmt.Errorf("response.result.status was '%s', not 'Success'", r.Result.Status)
	}
	return nil
}

func checkConverted(in, out *unstructured.Unstructured, to schema.GroupVersion) error {
	switch {
	case out.GetAPIVersion() != to.String():
		return fmt.Errorf("invalid groupVersion (expected %s, received %s)", to, out.GetAPIVersion())
	case out.GetKind() != in.GetKind():
		return fmt.Errorf("invalid kind (expected %s, received %s)", in.GetKind(), out.GetKind())
	case out.GetName() != in.GetName():
		return fmt.Errorf("must have the same name: %s != %s", in.GetName(), out.GetName())
	case out.GetNamespace() != in.GetNamespace():
		return fmt.Errorf("must have the same namespace: %s != %s", in.GetNamespace(), out.GetNamespace())
	case out.GetUID() != in.GetUID():
		return fmt.Errorf("must have the same UID: %s != %s", in.GetUID(), out.GetUID())
	}
	return nil
}

// keepMetadata gives out the metadata of in, except the labels and annotations the webhook
// answered, which a conversion may change.
func keepMetadata(in, out *unstructured.Unstructured) error {
	answered, ok := out.Object["metadata"].(map[string]any)
	if !ok {
		return errors.New("missing metadata in converted object")
	}
	meta := map[string]any{}
	if m, ok := in.Object["metadata"].(map[string]any); ok {
		meta = runtime.DeepCopyJSONValue(m).(map[string]any)
	}
	for _, f := range []string{"labels", "annotations"} {
		v, ok := answered[f]
		if !ok || v == nil {
			delete(meta, f)
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("invalid metadata.%s of type %T in converted object", f, v)
		}
		for k, val := range m {
			if _, ok := val.(string); !ok {
				return fmt.Errorf("invalid metadata.%s[%s] of type %T in converted object", f, k, val)
			}
		}
		meta[f] = maps.Clone(m)
	}
	out.Object["metadata"] = meta
	return nil
}
