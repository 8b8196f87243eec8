package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/scheme"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

const (
	mimeJSON     = scheme.MediaTypeJSON
	mimeYAML     = "application/yaml"
	mimeProtobuf = scheme.MediaTypeProtobuf
	// maxBodyBytes is Kubernetes' request size limit.
	maxBodyBytes = 3 << 20
)

var (
	jsonSerializer       = scheme.JSON
	strictJSONSerializer = json.NewSerializerWithOptions(json.DefaultMetaFactory, registry.Scheme, registry.Scheme, json.SerializerOptions{Strict: true})
	yamlSerializer       = json.NewSerializerWithOptions(json.DefaultMetaFactory, registry.Scheme, registry.Scheme, json.SerializerOptions{Yaml: true})
	strictYAMLSerializer = json.NewSerializerWithOptions(json.DefaultMetaFactory, registry.Scheme, registry.Scheme, json.SerializerOptions{Yaml: true, Strict: true})
	protobufSerializer   = scheme.Protobuf
)

func init() {
	// A JSON patch's copy operations may not grow a document past the request size limit (each
	// copy doubling it would otherwise exhaust memory from a tiny request).
	jsonpatch.AccumulatedCopySizeLimit = maxBodyBytes
}

// StorageCodec stores objects in etcd as Kubernetes protobuf, as kube-apiserver does.
type StorageCodec struct{}

// Encode implements storage.Codec.
func (StorageCodec) Encode(obj runtime.Object) ([]byte, error) {
	var buf bytes.Buffer
	err := protobufSerializer.Encode(obj, &buf)
	return buf.Bytes(), err
}

// Decode implements storage.Codec.
func (StorageCodec) Decode(data []byte, into runtime.Object) error {
	_, _, err := protobufSerializer.Decode(data, nil, into)
	return err
}

// fieldValidation is the request's fieldValidation directive.
type fieldValidation string

const (
	validationStrict fieldValidation = "Strict"
	validationWarn   fieldValidation = "Warn"
	validationIgnore fieldValidation = "Ignore"
)

func parseFieldValidation(r *http.Request) (fieldValidation, error) {
	switch v := r.URL.Query().Get("fieldValidation"); v {
	case "":
		return validationWarn, nil
	case "Strict", "Warn", "Ignore":
		return fieldValidation(v), nil
	default:
		return "", apierrors.NewBadRequest(fmt.Sprintf("fieldValidation must be one of Ignore, Warn or Strict, got %q", v))
	}
}

// writeRequest holds what every write request carries besides its path: dryRun, fieldValidation
// and the body.
type writeRequest struct {
	dry  bool
	fv   fieldValidation
	body []byte
}

func parseWrite(r *http.Request) (writeRequest, error) {
	var wr writeRequest
	var err error
	if wr.dry, err = dryRun(r); err != nil {
		return wr, err
	}
	if wr.fv, err = parseFieldValidation(r); err != nil {
		return wr, err
	}
	if err = checkWriteOptions(r); err != nil {
		return wr, err
	}
	wr.body, err = readBody(r)
	return wr, err
}

// readBody reads a request body up to Kubernetes' 3 MiB limit.
func readBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading request body: %v", err))
	}
	if len(data) > maxBodyBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxBodyBytes))
	}
	return data, nil
}

func mediaType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return mimeJSON
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct
	}
	return mt
}

// decodeObject decodes a request body of any supported media type into into, whose kind is
// the endpoint's. Unknown and duplicate fields are errors under Strict and warnings under Warn.
func decodeObject(w http.ResponseWriter, data []byte, contentType string, fv fieldValidation, gvk schema.GroupVersionKind, into runtime.Object) error {
	var dec runtime.Decoder
	switch contentType {
	case mimeJSON:
		dec = jsonSerializer
		if fv != validationIgnore {
			dec = strictJSONSerializer
		}
	case mimeYAML:
		dec = yamlSerializer
		if fv != validationIgnore {
			dec = strictYAMLSerializer
		}
	case mimeProtobuf:
		dec = protobufSerializer
	default:
		return unsupportedMediaType(mimeJSON, mimeYAML, mimeProtobuf)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return apierrors.NewBadRequest("the request body is empty")
	}
	obj, actual, err := dec.Decode(data, &gvk, into)
	if err != nil {
		if strictErr, ok := runtime.AsStrictDecodingError(err); ok && obj != nil {
			if fv == validationStrict {
				return apierrors.NewBadRequest(strictErr.Error())
			}
			for _, e := range strictErr.Errors() {
				addWarning(w, e.Error())
			}
		} else {
			return apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded as %s: %v", gvk.Kind, err))
		}
	}
	if actual == nil || *actual != gvk || obj != into {
		got := "<unknown>"
		if actual != nil {
			got = actual.GroupVersion().String() + ", Kind=" + actual.Kind
		}
		return apierrors.NewBadRequest(fmt.Sprintf("the object in the body (%s) does not match the resource of the request (%s, Kind=%s)", got, gvk.GroupVersion(), gvk.Kind))
	}
	return nil
}

// decodeBody decodes a request body into a new object of res. Custom resources come only as
// JSON or YAML, and lose the fields their schema does not specify: unknown fields, which
// fail a Strict request and warn under Warn, as for built-in kinds.
func decodeBody(w http.ResponseWriter, res *resource, data []byte, contentType string, fv fieldValidation, into runtime.Object) error {
	if res.custom == nil {
		return decodeObject(w, data, contentType, fv, res.info.GVK(), into)
	}
	if contentType == mimeProtobuf {
		return unsupportedMediaType(mimeJSON, mimeYAML)
	}
	if err := decodeObject(w, data, contentType, fv, res.info.GVK(), into); err != nil {
		return err
	}
	pruned := res.custom.Prune(into.(*unstructured.Unstructured))
	if len(pruned) == 0 || fv == validationIgnore {
		return nil
	}
	var msgs []string
	for _, p := range pruned {
		msgs = append(msgs, fmt.Sprintf("unknown field %q", p))
	}
	if fv == validationStrict {
		kind := res.info.Kind
		return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: strict decoding error: %s", kind, res.info.GroupVersion.Version, kind, strings.Join(msgs, ", ")))
	}
	for _, m := range msgs {
		addWarning(w, m)
	}
	return nil
}

// unsupportedMediaType is kube-apiserver's 415 for a body in a media type the endpoint does
// not decode (CBOR among them: v1.36 takes it only behind its CBOR feature gates).
func unsupportedMediaType(accepted ...string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure,
		Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: "the body of the request was in an unknown format - accepted media types include: " + strings.Join(accepted, ", ")}}
}

func addWarning(w http.ResponseWriter, msg string) {
	addWarningTo(w.Header(), msg)
}

// addWarningTo adds msg to a response's headers once: a write retried on a conflict finds
// the same warnings again.
func addWarningTo(h http.Header, msg string) {
	v := fmt.Sprintf("299 - %q", msg)
	if !slices.Contains(h.Values("Warning"), v) {
		h.Add("Warning", v)
	}
}

// warningsKey holds, in a request's context, the headers of its response, so that what
// validates a write deep in storage's update loop can add warnings to it.
type warningsKey struct{}

func withWarnings(r *http.Request, w http.ResponseWriter) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), warningsKey{}, w.Header()))
}

// warnContext adds msg to the warnings of the response of ctx's request, if it has one.
func warnContext(ctx context.Context, msg string) {
	if h, ok := ctx.Value(warningsKey{}).(http.Header); ok {
		addWarningTo(h, msg)
	}
}

// output is the response form a client asked for in its Accept header.
type output int

const (
	outputJSON output = iota
	outputYAML
	outputTable
	outputPartialMetadata
	outputProtobuf
)

// negotiate picks the first acceptable form from the Accept header: JSON, YAML or Kubernetes
// protobuf (what client-go prefers); Table and PartialObjectMetadata are served for reads.
func negotiate(r *http.Request) (output, error) { return negotiateMedia(r, true) }

// negotiateFor negotiates the form of res's objects: custom resources have no protobuf form.
func negotiateFor(r *http.Request, res *resource) (output, error) {
	return negotiateMedia(r, res.custom == nil)
}

func negotiateMedia(r *http.Request, protobufOK bool) (output, error) {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return outputJSON, nil
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case mimeJSON, "*/*", "application/*":
			switch params["as"] {
			case "":
				return outputJSON, nil
			case "Table":
				if params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
					return outputTable, nil
				}
			case "PartialObjectMetadata", "PartialObjectMetadataList":
				if params["g"] == "meta.k8s.io" && params["v"] == "v1" {
					return outputPartialMetadata, nil
				}
			}
		case mimeYAML:
			if params["as"] == "" {
				return outputYAML, nil
			}
		case mimeProtobuf:
			if params["as"] == "" && protobufOK {
				return outputProtobuf, nil
			}
		}
	}
	return 0, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "",
		"only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io", 0, false)
}

// writeObject writes obj with the given status code.
func writeObject(w http.ResponseWriter, code int, out output, obj runtime.Object) {
	var buf bytes.Buffer
	ct := mimeJSON
	var err error
	switch out {
	case outputYAML:
		ct = mimeYAML
		err = yamlSerializer.Encode(obj, &buf)
	case outputProtobuf:
		ct = mimeProtobuf
		if err = protobufSerializer.Encode(obj, &buf); protobuf.IsNotMarshalable(err) {
			buf.Reset()
			ct, err = mimeJSON, jsonSerializer.Encode(obj, &buf)
		}
	default:
		err = jsonSerializer.Encode(obj, &buf)
	}
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// writeResult answers a write (create, update, delete) with obj in the client's preferred
// encoding; Table and metadata-only forms apply to reads only.
func writeResult(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object) {
	out, err := negotiate(r)
	if err != nil || out == outputTable || out == outputPartialMetadata {
		out = outputJSON
	}
	writeObject(w, code, out, obj)
}

// writeError writes err as a metav1.Status.
func writeError(w http.ResponseWriter, err error) {
	status := errorStatus(err)
	writeObject(w, int(status.Code), outputJSON, status)
}

// errorStatus is the Status an error is answered with: its own when it is an API error, an
// internal error's otherwise.
func errorStatus(err error) *metav1.Status {
	var status metav1.Status
	if s, ok := err.(apierrors.APIStatus); ok {
		status = s.Status()
	} else {
		status = apierrors.NewInternalError(err).ErrStatus
	}
	status.Kind, status.APIVersion = "Status", "v1"
	if status.Status == "" {
		status.Status = metav1.StatusFailure
	}
	if status.Code == 0 {
		status.Code = http.StatusInternalServerError
	}
	return &status
}
