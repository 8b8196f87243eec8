package apiserver

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/kplane/kplane/storage"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxJSONPatchOperations is Kubernetes' limit on the operations of one JSON patch.
const maxJSONPatchOperations = 10000

// patchApplier applies one kind of patch to the JSON form of an object; dataStruct is a typed
// object of the resource's kind, which strategic merge patch needs for its list semantics.
type patchApplier func(original []byte, dataStruct any) ([]byte, error)

func patchFor(r *http.Request, patch []byte) (patchApplier, error) {
	switch types.PatchType(mediaType(r)) {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid JSON patch: %v", err))
		}
		if len(p) > maxJSONPatchOperations {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOperations, len(p)))
		}
		return func(original []byte, _ any) ([]byte, error) {
			out, err := p.Apply(original)
			if err != nil {
				return nil, apierrors.NewInvalid(schema.GroupKind{}, "", field.ErrorList{field.Invalid(field.NewPath("patch"), string(patch), err.Error())})
			}
			return out, nil
		}, nil
	case types.MergePatchType:
		if !bytes.HasPrefix(bytes.TrimSpace(patch), []byte("{")) {
			return nil, apierrors.NewBadRequest("a JSON merge patch must be a JSON object")
		}
		return func(original []byte, _ any) ([]byte, error) {
			out, err := jsonpatch.MergePatch(original, patch)
			if err != nil {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid merge patch: %v", err))
			}
			return out, nil
		}, nil
	case types.StrategicMergePatchType:
		return func(original []byte, dataStruct any) ([]byte, error) {
			out, err := strategicpatch.StrategicMergePatch(original, patch, dataStruct)
			if err != nil {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid strategic merge patch: %v", err))
			}
			return out, nil
		}, nil
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "",
			"server-side apply is not supported by kplane; use client-side apply (kubectl apply without --server-side)", 0, false)
	default:
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "",
			fmt.Sprintf("unsupported patch type %q: use application/json-patch+json, application/merge-patch+json or application/strategic-merge-patch+json", mediaType(r)), 0, false)
	}
}

// patch applies a patch to the stored object. Races with other writers are retried with the
// patch applied to the newer state; only a resourceVersion inside the patch makes them conflicts.
func (s *Server) patch(w http.ResponseWriter, r *http.Request, req request) {
	res := req.res
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if res.custom != nil && types.PatchType(mediaType(r)) == types.StrategicMergePatchType {
		writeError(w, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "",
			"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json", 0, false))
		return
	}
	apply, err := patchFor(r, wr.body)
	if err != nil {
		writeError(w, err)
		return
	}
	tryUpdate := s.updateFunc(r.Context(), req, func(cur storage.Object) (storage.Object, error) {
		return patchObject(w, res, cur, apply, wr.fv)
	})
	s.writeUpdate(w, r, req, tryUpdate, wr.dry)
}

// patchObject encodes cur, applies the patch and decodes the result with the request's field
// validation.
func patchObject(w http.ResponseWriter, res *resource, cur storage.Object, apply patchApplier, fv fieldValidation) (storage.Object, error) {
	var buf bytes.Buffer
	if err := jsonSerializer.Encode(cur, &buf); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	patched, err := apply(buf.Bytes(), res.strategy.NewObject())
	if err != nil {
		return nil, err
	}
	obj := res.strategy.NewObject()
	if err := decodeBody(w, res, patched, mimeJSON, fv, obj); err != nil {
		return nil, err
	}
	return obj, nil
}
