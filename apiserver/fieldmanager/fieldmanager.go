package fieldmanager

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/yaml"
)

// Manager keeps the managedFields of one kind's objects as written through one endpoint: the
// object itself ("") or a subresource ("status", "scale"). It is Kubernetes' own field manager
// (apimachinery's managedfields.FieldManager, with its version check, client-side-apply
// migration, cap of ten update managers and conflict errors) given kplane's type information.
type Manager struct {
	fm    *managedfields.FieldManager
	conv  converter
	types managedfields.TypeConverter
}

// Options describe the endpoint a Manager serves.
type Options struct {
	// Kind is the kind (and version) objects are written as at this endpoint.
	Kind schema.GroupVersionKind
	// New returns an empty object of Kind: a typed k8s.io/api struct, or an
	// *unstructured.Unstructured for kinds without a Go type (custom resources).
	New func() runtime.Object
	// Subresource is "" for the object itself, else the subresource written ("status", "scale").
	Subresource string
	// Reset are the top-level fields (and "metadata.x" fields) this endpoint never changes, so
	// nobody writing through it comes to own them: "status" for the object of a kind with a
	// status subresource, "spec" for its status subresource (Kubernetes' reset fields).
	Reset []string
}

// New returns the Manager of one endpoint; types must know opts.Kind.
func New(types managedfields.TypeConverter, opts Options) (*Manager, error) {
	conv := converter{kind: opts.Kind, new: opts.New}
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	if len(opts.Reset) > 0 {
		set := fieldpath.NewSet()
		for _, p := range opts.Reset {
			path := make([]any, 0, 2)
			for _, part := range strings.Split(p, ".") {
				path = append(path, part)
			}
			fp, err := fieldpath.MakePath(path...)
			if err != nil {
				return nil, err
			}
			set.Insert(fp)
		}
		reset = map[fieldpath.APIVersion]fieldpath.Filter{
			fieldpath.APIVersion(opts.Kind.GroupVersion().String()): fieldpath.NewExcludeSetFilter(set),
		}
	}
	fm, err := managedfields.NewDefaultFieldManager(types, conv, noDefaults{}, conv, opts.Kind, opts.Kind.GroupVersion(), opts.Subresource, reset)
	if err != nil {
		return nil, err
	}
	return &Manager{fm: fm, conv: conv, types: types}, nil
}

// Update records that manager wrote obj over live (nil on create). It never fails: managed
// fields that cannot be worked out are dropped, as Kubernetes drops them, rather than the write.
// Client-sent managedFields are kept when they decode, an empty list resets them, and anything
// else is replaced by live's. obj is changed in place and returned.
func (m *Manager) Update(live, obj runtime.Object, manager string) runtime.Object {
	if live == nil {
		live = m.empty()
	}
	return m.fm.UpdateNoErrors(live, obj, manager)
}

// Apply merges an apply patch (the YAML or JSON body of an apply request) into live (nil when
// the object does not exist yet) for manager. The result is an object of the endpoint's kind with
// its managedFields set. Errors are API errors as Kubernetes gives them: 400 for a body that is
// not YAML or names another kind, 500 for one whose fields do not fit the kind, 409 Conflict
// naming each field another manager owns unless force is set.
func (m *Manager) Apply(live runtime.Object, patch []byte, manager string, force bool) (runtime.Object, error) {
	applied := &unstructured.Unstructured{Object: map[string]any{}}
	if err := yaml.Unmarshal(patch, &applied.Object); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	if applied.Object == nil {
		applied.Object = map[string]any{}
	}
	if live == nil {
		live = m.empty()
	}
	out, err := m.fm.Apply(live, applied, manager, force)
	if err != nil {
		if _, ok := err.(apierrors.APIStatus); ok {
			return nil, err
		}
		// The patch is well-formed YAML but not an object of this kind (a string where a
		// map belongs, a field the kind does not have): Kubernetes answers these with a bare
		// 500 carrying the field manager's message, and so does kplane.
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Message: err.Error()}}
	}
	return out, nil
}

func (m *Manager) empty() runtime.Object {
	obj, _ := m.conv.New(m.conv.kind)
	return obj
}

// ManagerName is the manager a write is recorded under: the fieldManager the client named, else
// the User-Agent up to its first "/", printable characters only, at most 128 bytes, as
// Kubernetes derives it.
func ManagerName(fieldManager, userAgent string) string {
	if fieldManager != "" {
		return fieldManager
	}
	prefix, _, _ := strings.Cut(userAgent, "/")
	var buf bytes.Buffer
	for _, r := range prefix {
		if !unicode.IsPrint(r) {
			continue
		}
		if buf.Len()+utf8.RuneLen(r) > 128 {
			break
		}
		buf.WriteRune(r)
	}
	return buf.String()
}

// noDefaults is the defaulter of applied objects: kplane's resources default in their
// strategies (PrepareCreate, PrepareUpdate), which run on every write after the merge.
type noDefaults struct{}

func (noDefaults) Default(runtime.Object) {}

// converter is the field manager's view of object versions. Each kplane endpoint works on
// objects of one version, so converting means filling in the kind, or turning the merge result
// (unstructured) back into the endpoint's Go type; other versions are reported as unknown, and
// the field manager then leaves their managers' entries out of the comparison.
type converter struct {
	kind schema.GroupVersionKind
	new  func() runtime.Object
}

func (c converter) newObject() runtime.Object {
	if c.new != nil {
		return c.new()
	}
	return &unstructured.Unstructured{Object: map[string]any{}}
}

// New implements runtime.ObjectCreater.
func (c converter) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	if gvk != c.kind {
		return nil, runtime.NewNotRegisteredErrForKind("kplane", gvk)
	}
	obj := c.newObject()
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

// ConvertToVersion implements runtime.ObjectConvertor. Typed objects are not copied deeply:
// the field manager only reads what it is given, so a shallow copy that carries the kind is
// enough and leaves the caller's object (perhaps shared with a cache) untouched.
func (c converter) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	gvk, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{c.kind})
	if !ok || gvk != c.kind {
		return nil, runtime.NewNotRegisteredErrForKind("kplane", c.kind)
	}
	if u, ok := in.(*unstructured.Unstructured); ok {
		if got := u.GroupVersionKind(); !got.Empty() && got != c.kind {
			return nil, runtime.NewNotRegisteredErrForKind("kplane", got)
		}
		out := c.newObject()
		if ou, ok := out.(*unstructured.Unstructured); ok {
			ou.Object = u.Object
		} else if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
			return nil, err
		}
		out.GetObjectKind().SetGroupVersionKind(c.kind)
		return out, nil
	}
	if got := in.GetObjectKind().GroupVersionKind(); !got.Empty() && got != c.kind {
		return nil, runtime.NewNotRegisteredErrForKind("kplane", got)
	}
	v := reflect.ValueOf(in)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("converting %T: not a pointer to a struct", in)
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	out := cp.Interface().(runtime.Object)
	out.GetObjectKind().SetGroupVersionKind(c.kind)
	return out, nil
}

// Convert implements runtime.ObjectConvertor; the field manager does not use it.
func (c converter) Convert(in, out, context any) error {
	return fmt.Errorf("converting %T to %T is not supported", in, out)
}

// ConvertFieldLabel implements runtime.ObjectConvertor; the field manager does not use it.
func (c converter) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return "", "", fmt.Errorf("field label %q of %v is not supported", label, gvk)
}
