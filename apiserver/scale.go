package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/kplane/kplane/apiserver/fieldmanager"
	"github.com/kplane/kplane/storage"
	admissionv1 "k8s.io/api/admission/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var scaleGVK = autoscalingv1.SchemeGroupVersion.WithKind("Scale")

// scaleOf describes a workload as an autoscaling/v1 Scale. Every scalable kind keeps replicas
// in spec.replicas and status.replicas; the selector is a LabelSelector (apps: ReplicaSets,
// Deployments, StatefulSets) or a map (RCs). For a StatefulSet status.replicas counts the pods
// it has, not those ready, as Kubernetes' scale of StatefulSets does.
func scaleOf(obj storage.Object) (*autoscalingv1.Scale, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	spec, _, _ := unstructured.NestedInt64(u, "spec", "replicas")
	status, _, _ := unstructured.NestedInt64(u, "status", "replicas")
	var selector string
	if m, ok, _ := unstructured.NestedStringMap(u, "spec", "selector"); ok && len(m) > 0 && !hasKey(u, "spec", "selector", "matchLabels") && !hasKey(u, "spec", "selector", "matchExpressions") {
		selector = labels.SelectorFromSet(m).String()
	} else if raw, ok, _ := unstructured.NestedMap(u, "spec", "selector"); ok {
		var ls metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err == nil {
			if sel, err := metav1.LabelSelectorAsSelector(&ls); err == nil {
				selector = sel.String()
			}
		}
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: scaleGVK.GroupVersion().String(), Kind: scaleGVK.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID(),
			ResourceVersion: obj.GetResourceVersion(), CreationTimestamp: obj.GetCreationTimestamp(),
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: int32(spec)},
		Status: autoscalingv1.ScaleStatus{Replicas: int32(status), Selector: selector},
	}, nil
}

// scaleOfResource describes obj of res as a Scale: a custom resource by its CRD's scale paths.
func scaleOfResource(res *resource, obj storage.Object) (*autoscalingv1.Scale, error) {
	if res.custom == nil {
		return scaleOf(obj)
	}
	paths := res.custom.ScaleSpec()
	u := obj.(*unstructured.Unstructured)
	sc := &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: scaleGVK.GroupVersion().String(), Kind: scaleGVK.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID(),
			ResourceVersion: obj.GetResourceVersion(), CreationTimestamp: obj.GetCreationTimestamp(),
		},
	}
	if v, ok := paths.SpecReplicas.First(u.Object); ok {
		n, _ := v.(int64)
		sc.Spec.Replicas = int32(n)
	}
	if v, ok := paths.StatusReplicas.First(u.Object); ok {
		n, _ := v.(int64)
		sc.Status.Replicas = int32(n)
	}
	if paths.LabelSelector != nil {
		if v, ok := paths.LabelSelector.First(u.Object); ok {
			sc.Status.Selector, _ = v.(string)
		}
	}
	return sc, nil
}

// setReplicasOf returns a copy of obj of res with its spec replicas set.
func setReplicasOf(res *resource, obj storage.Object, replicas int32) (storage.Object, error) {
	if res.custom == nil {
		return setReplicas(obj, replicas)
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	path := strings.Split(strings.TrimPrefix(res.custom.ScaleSpec().SpecReplicasPath, "."), ".")
	if err := unstructured.SetNestedField(u.Object, int64(replicas), path...); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return u, nil
}

func hasKey(u map[string]any, path ...string) bool {
	_, ok, _ := unstructured.NestedFieldNoCopy(u, path...)
	return ok
}

func setReplicas(obj storage.Object, replicas int32) (storage.Object, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if err := unstructured.SetNestedField(u, int64(replicas), "spec", "replicas"); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := obj.DeepCopyObject().(storage.Object)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, out); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// replicasPaths says where each version of res's kind keeps its spec replicas, for the
// managedFields of scale writes: every built-in scalable kind at spec.replicas of its one
// served version, a custom resource at each of its CRD's versions' specReplicasPath.
func replicasPaths(res *resource) fieldmanager.ReplicasPaths {
	if res.custom != nil {
		return res.custom.ScaleSpec().ReplicasPaths
	}
	return fieldmanager.ReplicasPaths{res.info.GroupVersion.String(): {"spec", "replicas"}}
}

// serveScale serves the scale subresource: reads render the parent as a Scale; writes (PUT,
// patches, server-side apply) change only the parent's spec replicas. As in Kubernetes, a
// write works on a Scale whose managedFields are the parent's owners of spec replicas, and
// its result's managedFields go back to the parent, recorded under subresource "scale".
func (s *Server) serveScale(w http.ResponseWriter, r *http.Request, req request) {
	res := req.res
	if r.Method == http.MethodGet {
		obj, err := res.store.Get(r.Context(), req.namespace, req.name)
		if err == nil {
			var sc *autoscalingv1.Scale
			if sc, err = scaleOfResource(res, obj); err == nil {
				writeResult(w, r, http.StatusOK, sc)
				return
			}
		}
		writeError(w, err)
		return
	}
	if r.Method != http.MethodPut && r.Method != http.MethodPatch {
		writeError(w, apierrors.NewMethodNotSupported(res.info.GroupResource(), r.Method))
		return
	}
	if r.Method == http.MethodPatch {
		if err := checkPatchType(res, r); err != nil {
			writeError(w, err)
			return
		}
	}
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	fields := res.fields["scale"]
	applying := r.Method == http.MethodPatch && isApply(r)
	var patch patchApplier
	var force bool
	switch {
	case applying && fields == nil:
		writeError(w, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "",
			"server-side apply is not supported at this endpoint", 0, false))
		return
	case applying:
		force, err = applyForce(r)
	case r.Method == http.MethodPatch:
		patch, err = patchFor(r, wr.body)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if fields != nil {
		// The Scale's field manager records the write; the parent's must not again.
		req.writer.applied = true
	}
	tryUpdate := s.updateFunc(r.Context(), req, func(cur storage.Object) (storage.Object, error) {
		cs, err := scaleOfResource(res, cur)
		if err != nil {
			return nil, err
		}
		var owners *fieldmanager.ScaleFields
		if fields != nil {
			owners = fieldmanager.NewScaleFields(cur.GetManagedFields(), res.info.GroupVersion, replicasPaths(res))
			if cs.ManagedFields, err = owners.ForScale(); err != nil {
				return nil, apierrors.NewInternalError(err)
			}
		}
		want, err := scaleWrite(w, r, req, wr, cs, patch, force)
		if err != nil {
			return nil, err
		}
		if want, err = s.mutateScale(r.Context(), req, want, cs); err != nil {
			return nil, err
		}
		if want.Name != "" && want.Name != req.name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", want.Name, req.name))
		}
		if want.ResourceVersion != "" && want.ResourceVersion != cur.GetResourceVersion() {
			return nil, apierrors.NewConflict(res.info.GroupResource(), req.name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		if want.Spec.Replicas < 0 {
			return nil, apierrors.NewInvalid(scaleGVK.GroupKind(), req.name, field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), want.Spec.Replicas, "must be greater than or equal to 0")})
		}
		next, err := setReplicasOf(res, cur, want.Spec.Replicas)
		if err != nil {
			return nil, err
		}
		if owners != nil {
			entries, err := owners.ForParent(want.ManagedFields)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			next.SetManagedFields(entries)
		}
		return next, nil
	})
	updated, err := res.store.Update(r.Context(), req.namespace, req.name, tryUpdate, res.claims, wr.dry)
	if err != nil {
		writeError(w, err)
		return
	}
	sc, err := scaleOfResource(res, updated)
	if err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, r, http.StatusOK, sc)
}

// mutateScale runs the mutating policies and webhooks on the Scale a write asks for, after the
// client's change and its managedFields, as kube-apiserver's scale storage hands them the
// Scale and not the parent. What they change is checked below like the client's own change.
func (s *Server) mutateScale(ctx context.Context, req request, want, cur *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	if !webhooksApply(req) {
		return want, nil
	}
	out, changed, err := s.mutateAdmission(ctx, req, s.mutators(), admissionv1.Update, want, cur, dryRunOf(ctx))
	if err != nil || !changed {
		return want, err
	}
	sc, ok := out.(*autoscalingv1.Scale)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("mutating admission made a Scale a %T", out))
	}
	return sc, nil
}

// scaleWrite is the Scale a write asks for, given the current one cs: the body of a PUT, cs
// patched, or the apply patch merged into cs by the scale field manager. Non-apply writes are
// recorded as Updates of the request's manager.
func scaleWrite(w http.ResponseWriter, r *http.Request, req request, wr writeRequest, cs *autoscalingv1.Scale, patch patchApplier, force bool) (*autoscalingv1.Scale, error) {
	fields := req.res.fields["scale"]
	if fields != nil && r.Method == http.MethodPatch && isApply(r) {
		out, err := fields.Apply(cs, wr.body, req.writer.manager, force)
		if err != nil {
			return nil, err
		}
		want, ok := out.(*autoscalingv1.Scale)
		if !ok {
			return nil, apierrors.NewInternalError(fmt.Errorf("apply produced %T", out))
		}
		return want, nil
	}
	want := &autoscalingv1.Scale{}
	var err error
	if patch != nil {
		var buf []byte
		if buf, err = runtime.Encode(jsonSerializer, cs); err == nil {
			if buf, err = patch(buf, &autoscalingv1.Scale{}); err == nil {
				err = decodeObject(w, buf, mimeJSON, wr.fv, scaleGVK, want)
			}
		}
	} else {
		err = decodeObject(w, wr.body, mediaType(r), wr.fv, scaleGVK, want)
	}
	if err != nil {
		return nil, err
	}
	if fields != nil {
		if out, ok := fields.Update(cs, want, or(req.writer.manager, internalManager)).(*autoscalingv1.Scale); ok {
			want = out
		}
	}
	return want, nil
}
