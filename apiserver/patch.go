package apiserver

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kplane/kplane/storage"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	case types.ApplyYAMLPatchType:
		// Apply patches are merged by the field manager (applyPatch), except where an
		// endpoint has none.
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "",
			"server-side apply is not supported at this endpoint", 0, false)
	default:
		// checkPatchType has refused the other types.
		return nil, errUnsupportedPatch
	}
}

// errUnsupportedPatch is kube-apiserver's answer to a PATCH of a built-in resource in a
// media type that is not one of its patch types: its router refuses it with a bare 415, as
// it does CBOR apply patches while the CBOR feature gates are off.
var errUnsupportedPatch = &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure,
	Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
	Message: "415: Unsupported Media Type", Details: &metav1.StatusDetails{}}}

// checkPatchType refuses a PATCH of res whose media type is not a patch type res takes:
// custom resources take no strategic merge patch, and no resource takes CBOR.
func checkPatchType(res *resource, r *http.Request) error {
	switch types.PatchType(mediaType(r)) {
	case types.JSONPatchType, types.MergePatchType, types.ApplyYAMLPatchType:
		return nil
	case types.StrategicMergePatchType:
		if res.custom == nil {
			return nil
		}
	}
	if res.custom != nil {
		return unsupportedMediaType(string(types.JSONPatchType), string(types.MergePatchType), string(types.ApplyYAMLPatchType))
	}
	return errUnsupportedPatch
}

// patch applies a patch to the stored object. Races with other writers are retried with the
// patch applied to the newer state; only a resourceVersion inside the patch makes them conflicts.
func (s *Server) patch(w http.ResponseWriter, r *http.Request, req request) {
	res := req.res
	if err := checkPatchType(res, r); err != nil {
		writeError(w, err)
		return
	}
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if isApply(r) && res.fields[req.subresource] != nil {
		s.applyPatch(w, r, req, wr)
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

// applyPatch serves a server-side apply: the field manager merges the patch into the stored
// object (or an empty one, creating it) for the request's manager, and records the result.
func (s *Server) applyPatch(w http.ResponseWriter, r *http.Request, req request, wr writeRequest) {
	ctx := r.Context()
	m := req.res.fields[req.subresource]
	force, err := applyForce(r)
	if err != nil {
		writeError(w, err)
		return
	}
	req.writer.applied = true
	merge := func(live storage.Object) (storage.Object, error) {
		out, err := m.Apply(live, wr.body, req.writer.manager, force)
		if err != nil {
			return nil, err
		}
		obj, ok := out.(storage.Object)
		if !ok {
			return nil, apierrors.NewInternalError(fmt.Errorf("apply produced %T", out))
		}
		return obj, nil
	}
	for attempt := 0; ; attempt++ {
		updated, err := s.runUpdate(ctx, req, s.updateFunc(ctx, req, merge), wr.dry)
		if !apierrors.IsNotFound(err) || req.subresource != "" || attempt > 0 {
			if err != nil {
				writeError(w, err)
				return
			}
			writeResult(w, r, http.StatusOK, updated)
			return
		}
		// Nothing to apply to: the patch is the whole object.
		obj, err := merge(nil)
		if err == nil && obj.GetName() != req.name {
			err = apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), req.name))
		}
		if err != nil {
			writeError(w, err)
			return
		}
		created, err := s.createChecked(ctx, req, obj, wr.dry)
		if apierrors.IsAlreadyExists(err) {
			continue // created meanwhile: apply to it
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeResult(w, r, http.StatusCreated, created)
		return
	}
}

// applyForce reads an apply request's force parameter.
func applyForce(r *http.Request) (bool, error) {
	f := r.URL.Query().Get("force")
	if f == "" {
		return false, nil
	}
	force, err := strconv.ParseBool(f)
	if err != nil {
		return false, apierrors.NewBadRequest(fmt.Sprintf("invalid force %q: %v", f, err))
	}
	return force, nil
}
