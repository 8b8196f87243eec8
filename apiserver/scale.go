package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/kplane/kplane/storage"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
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

// serveScale serves the scale subresource: reads render the parent as a Scale; writes change
// only the parent's spec.replicas.
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
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var apply patchApplier
	if r.Method == http.MethodPatch {
		if apply, err = patchFor(r, wr.body); err != nil {
			writeError(w, err)
			return
		}
	}
	tryUpdate := s.updateFunc(r.Context(), req, func(cur storage.Object) (storage.Object, error) {
		cs, err := scaleOfResource(res, cur)
		if err != nil {
			return nil, err
		}
		want := &autoscalingv1.Scale{}
		if apply != nil {
			var buf []byte
			if buf, err = runtime.Encode(jsonSerializer, cs); err == nil {
				if buf, err = apply(buf, &autoscalingv1.Scale{}); err == nil {
					err = decodeObject(w, buf, mimeJSON, wr.fv, scaleGVK, want)
				}
			}
		} else {
			err = decodeObject(w, wr.body, mediaType(r), wr.fv, scaleGVK, want)
		}
		if err != nil {
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
