package apiserver

import (
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/kplane/kplane/apiserver/fieldmanager"
	"github.com/kplane/kplane/scheme"
	"github.com/kplane/kplane/storage"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Field ownership (metadata.managedFields) is recorded on every create, update and patch of
// every resource, by the fieldmanager package: each write is an Update by its manager,
// recorded after the resource's strategy has prepared (defaulted) the object; an apply patch
// is merged by the field manager itself, which records it as an Apply. Each endpoint (the
// object, its status, its scale) has its own manager, as in Kubernetes.

// writer is who a write is recorded as.
type writer struct {
	// manager is the fieldManager the client named, else its User-Agent's product name.
	manager string
	// applied marks writes the field manager has already merged and recorded (apply patches).
	applied bool
}

// managerOf names the manager of a client's write.
func managerOf(r *http.Request) string {
	return fieldmanager.ManagerName(r.URL.Query().Get("fieldManager"), r.UserAgent())
}

// internalManager records the writes the server makes on its own behalf (evictions' status
// writes, bootstrap objects), as Kubernetes' loopback client is recorded.
const internalManager = "kube-apiserver"

// builtinTypes is the field-manager type information of every kind in the scheme, built once.
var builtinTypes = sync.OnceValues(func() (*fieldmanager.Types, error) {
	kinds := map[schema.GroupVersionKind]reflect.Type{}
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		if pkg := t.PkgPath(); strings.HasPrefix(pkg, "k8s.io/api/") || pkg == "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1" ||
			pkg == "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1" {
			kinds[gvk] = t
		}
	}
	return fieldmanager.ForGoTypes(kinds)
})

// fieldManagers builds a resource's field managers, one per endpoint that writes it. A resource
// whose kind has no type information gets none, and its objects keep no managedFields.
func fieldManagers(res *resource) map[string]*fieldmanager.Manager {
	types, err := builtinTypes()
	if err != nil {
		slog.Error("field manager types", "err", err)
		return nil
	}
	return fieldManagersOf(res, types)
}

// customFieldManagers builds a custom resource's field managers from its CRD's schema.
func customFieldManagers(res *resource) map[string]*fieldmanager.Manager {
	types, err := fieldmanager.ForJSONSchema(res.info.GVK(), res.custom.OpenAPISchema())
	if err != nil {
		slog.Error("field manager types", "resource", res.info.GroupResource(), "err", err)
		return nil
	}
	return fieldManagersOf(res, types)
}

func fieldManagersOf(res *resource, types managedfields.TypeConverter) map[string]*fieldmanager.Manager {
	info := res.info
	endpoints := map[string][]string{"": nil}
	if info.Status {
		endpoints[""] = []string{"status"}
		endpoints["status"] = []string{"spec"}
	}
	if info.Resource == "namespaces" && info.GroupVersion.Group == "" {
		endpoints["finalize"] = nil
	}
	out := map[string]*fieldmanager.Manager{}
	for sub, reset := range endpoints {
		m, err := fieldmanager.New(types, fieldmanager.Options{
			Kind: info.GVK(), New: func() runtime.Object { return res.strategy.NewObject() }, Subresource: sub, Reset: reset})
		if err != nil {
			slog.Error("field manager", "resource", info.GroupResource(), "subresource", sub, "err", err)
			return nil
		}
		out[sub] = m
	}
	if info.Scale {
		m, err := scaleFieldManager()
		if err != nil {
			slog.Error("field manager", "resource", info.GroupResource(), "subresource", "scale", "err", err)
			return nil
		}
		out["scale"] = m
	}
	return out
}

// scaleFieldManager is the field manager of scale subresources: writes there are of
// autoscaling/v1 Scales, whose managedFields serveScale translates from and to the parent's,
// as Kubernetes does.
func scaleFieldManager() (*fieldmanager.Manager, error) {
	types, err := builtinTypes()
	if err != nil {
		return nil, err
	}
	return fieldmanager.New(types, fieldmanager.Options{
		Kind: scaleGVK, New: func() runtime.Object { return &autoscalingv1.Scale{} }, Subresource: "scale"})
}

// recordUpdate records a non-apply write of obj (cur is the stored object, nil on create).
func recordUpdate(req request, cur, obj storage.Object) storage.Object {
	m := req.res.fields[req.subresource]
	if m == nil || req.writer.applied {
		return obj
	}
	out, ok := m.Update(cur, obj, or(req.writer.manager, internalManager)).(storage.Object)
	if !ok {
		return obj
	}
	return out
}

// isApply reports whether a PATCH is a server-side apply.
func isApply(r *http.Request) bool {
	pt := types.PatchType(mediaType(r))
	return pt == types.ApplyYAMLPatchType || pt == types.ApplyCBORPatchType
}

// checkWriteOptions checks the options of a write as Kubernetes validates CreateOptions,
// UpdateOptions and PatchOptions: a printable fieldManager of at most 128 bytes, required for
// apply; force only for apply.
func checkWriteOptions(r *http.Request) error {
	q := r.URL.Query()
	errs := metav1validation.ValidateFieldManager(q.Get("fieldManager"), field.NewPath("fieldManager"))
	kind := map[string]string{http.MethodPost: "CreateOptions", http.MethodPut: "UpdateOptions", http.MethodPatch: "PatchOptions"}[r.Method]
	if r.Method == http.MethodPatch {
		if isApply(r) {
			if q.Get("fieldManager") == "" {
				errs = append(errs, field.Required(field.NewPath("fieldManager"), "is required for apply patch"))
			}
		} else if q.Has("force") {
			errs = append(errs, field.Forbidden(field.NewPath("force"), "may not be specified for non-apply patch"))
		}
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
	}
	return nil
}
