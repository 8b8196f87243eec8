package client

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strings"

	"github.com/kplane/kplane/scheme"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Object is a k8s.io/api object pointer: *corev1.Pod, *appsv1.Deployment, ...
type Object interface {
	runtime.Object
	metav1.Object
}

// Typed is a handle on one resource, for one namespace (or all, or a cluster-scoped resource).
// It is a small value: Namespace returns a copy.
type Typed[T Object] struct {
	c         *Client
	gvk       schema.GroupVersionKind
	gv        schema.GroupVersion // of the resource's path; gvk's but for a Metadata handle
	resource  string
	namespace string
	// metadata: a handle of Metadata, asking for objects as PartialObjectMetadata.
	metadata bool
}

// Resource returns the handle for resource (the plural name, "pods") whose objects are T. T's
// group and version come from the scheme; it panics if T is not registered there, which is a
// programming error found at start-up.
func Resource[T Object](c *Client, resource string) *Typed[T] {
	var zero T
	kinds, _, err := scheme.Scheme.ObjectKinds(reflect.New(reflect.TypeOf(zero).Elem()).Interface().(runtime.Object))
	if err != nil || len(kinds) == 0 {
		panic(fmt.Sprintf("client: %T is not in the scheme: %v", zero, err))
	}
	return &Typed[T]{c: c, gvk: kinds[0], gv: kinds[0].GroupVersion(), resource: resource}
}

// metadataGVK is the kind of a Metadata handle's objects.
var metadataGVK = metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata")

// Metadata returns a handle for any resource, whose Go type the program need not know: its
// objects are read as their metadata only (PartialObjectMetadata), which is all that
// controllers handling every resource (the garbage collector, quota, namespace deletion)
// need. Get, List, Watch, Patch and Delete work; Create and Update, which need the whole
// object, do not.
func Metadata(c *Client, gvr schema.GroupVersionResource) *Typed[*metav1.PartialObjectMetadata] {
	return &Typed[*metav1.PartialObjectMetadata]{c: c, gvk: metadataGVK, gv: gvr.GroupVersion(), resource: gvr.Resource, metadata: true}
}

// accept is the Accept header of a read: empty (protobuf, then JSON) for a typed handle; the
// metadata-only form for a Metadata handle, then plain JSON, which decode reduces to the
// metadata should a server ignore the first.
func (r *Typed[T]) accept(list bool) string {
	if !r.metadata {
		return ""
	}
	as := "PartialObjectMetadata"
	if list {
		as += "List"
	}
	return mimeJSON + ";as=" + as + ";g=meta.k8s.io;v=v1," + mimeJSON
}

// Namespace returns a handle limited to namespace ns ("" = all namespaces).
func (r *Typed[T]) Namespace(ns string) *Typed[T] {
	cp := *r
	cp.namespace = ns
	return &cp
}

// GroupVersionKind is the kind of T.
func (r *Typed[T]) GroupVersionKind() schema.GroupVersionKind { return r.gvk }

func (r *Typed[T]) path(name string, subresource ...string) string {
	var b strings.Builder
	if r.gv.Group == "" {
		b.WriteString("/api/" + r.gv.Version)
	} else {
		b.WriteString("/apis/" + r.gv.Group + "/" + r.gv.Version)
	}
	if r.namespace != "" {
		b.WriteString("/namespaces/" + r.namespace)
	}
	b.WriteString("/" + r.resource)
	if name != "" {
		b.WriteString("/" + name)
	}
	for _, s := range subresource {
		b.WriteString("/" + s)
	}
	return b.String()
}

func (r *Typed[T]) newObject() T {
	var zero T
	return reflect.New(reflect.TypeOf(zero).Elem()).Interface().(T)
}

// Get reads one object.
func (r *Typed[T]) Get(ctx context.Context, name string, opts ...metav1.GetOptions) (T, error) {
	q, err := queryOf(first(opts))
	if err != nil {
		return *new(T), err
	}
	obj := r.newObject()
	if err := r.c.call(ctx, &request{method: http.MethodGet, path: r.path(name), query: q, accept: r.accept(false)}, obj); err != nil {
		return *new(T), err
	}
	return obj, nil
}

// List is one page of a list.
type List[T Object] struct {
	Items           []T
	ResourceVersion string
	Continue        string
}

// List reads one page of objects (all of them when opts.Limit is 0).
func (r *Typed[T]) List(ctx context.Context, opts metav1.ListOptions) (*List[T], error) {
	q, err := queryOf(&opts)
	if err != nil {
		return nil, err
	}
	listKind := r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List")
	raw, err := scheme.Scheme.New(listKind)
	if err != nil {
		return nil, fmt.Errorf("client: no list type for %s: %w", r.gvk.Kind, err)
	}
	contentType, data, err := r.c.callRaw(ctx, &request{method: http.MethodGet, path: r.path(""), query: q, accept: r.accept(true)})
	if err != nil {
		return nil, err
	}
	var zero T
	if mt, _, _ := mime.ParseMediaType(contentType); mt == mimeProtobuf {
		contentType = mt
	}
	if share := sharedPartsFrom(ctx).sharerFor(reflect.TypeOf(zero).Elem()); share != nil && contentType == mimeProtobuf {
		if list, done, err := decodeSharedList[T](data, raw, share); done {
			return list, err
		}
	}
	if err := decode(contentType, data, raw); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(raw)
	if err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(raw)
	if err != nil {
		return nil, err
	}
	out := &List[T]{Items: make([]T, len(items)), ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue()}
	for i, it := range items {
		obj, ok := it.(T)
		if !ok {
			return nil, fmt.Errorf("client: list item is %T, not %T", it, obj)
		}
		out.Items[i] = obj
	}
	return out, nil
}

// ListAll follows continue tokens until the list is complete; pageSize 0 means 500.
func (r *Typed[T]) ListAll(ctx context.Context, opts metav1.ListOptions, pageSize int64) (*List[T], error) {
	if pageSize <= 0 {
		pageSize = 500
	}
	opts.Limit = pageSize
	all := &List[T]{}
	for {
		page, err := r.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		all.Items = append(all.Items, page.Items...)
		all.ResourceVersion = page.ResourceVersion
		if page.Continue == "" {
			return all, nil
		}
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = page.Continue, "", ""
	}
}

// Create creates obj in the handle's namespace (or obj's, if the handle has none).
func (r *Typed[T]) Create(ctx context.Context, obj T, opts ...metav1.CreateOptions) (T, error) {
	return r.write(ctx, http.MethodPost, r.forObject(obj).path(""), obj, first(opts))
}

// Update replaces obj; a non-empty resourceVersion makes it conditional.
func (r *Typed[T]) Update(ctx context.Context, obj T, opts ...metav1.UpdateOptions) (T, error) {
	return r.write(ctx, http.MethodPut, r.forObject(obj).path(obj.GetName()), obj, first(opts))
}

// UpdateStatus replaces obj's status.
func (r *Typed[T]) UpdateStatus(ctx context.Context, obj T, opts ...metav1.UpdateOptions) (T, error) {
	return r.write(ctx, http.MethodPut, r.forObject(obj).path(obj.GetName(), "status"), obj, first(opts))
}

// first returns the optional options argument, or nil.
func first[O any, P interface {
	*O
	runtime.Object
}](opts []O) runtime.Object {
	if len(opts) == 0 {
		return nil
	}
	return P(&opts[0])
}

// forObject is the handle for obj's own namespace when the handle names none.
func (r *Typed[T]) forObject(obj T) *Typed[T] {
	if r.namespace == "" && obj.GetNamespace() != "" {
		return r.Namespace(obj.GetNamespace())
	}
	return r
}

func (r *Typed[T]) write(ctx context.Context, method, path string, obj T, opts runtime.Object) (T, error) {
	q, err := queryOf(opts)
	if err != nil {
		return *new(T), err
	}
	obj.GetObjectKind().SetGroupVersionKind(r.gvk)
	body, err := encodeBody(obj)
	if err != nil {
		return *new(T), err
	}
	out := r.newObject()
	if err := r.c.call(ctx, &request{method: method, path: path, query: q, body: body, contentType: mimeProtobuf}, out); err != nil {
		return *new(T), err
	}
	return out, nil
}

// Patch applies a strategic merge, JSON merge or JSON patch to the named object (or to one of
// its subresources, such as "status").
func (r *Typed[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresource ...string) (T, error) {
	q, err := queryOf(&opts)
	if err != nil {
		return *new(T), err
	}
	out := r.newObject()
	req := &request{method: http.MethodPatch, path: r.path(name, subresource...), query: q, body: data, contentType: string(pt), accept: r.accept(false)}
	if err := r.c.call(ctx, req, out); err != nil {
		return *new(T), err
	}
	return out, nil
}

// Delete deletes the named object.
func (r *Typed[T]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	opts.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}
	body, err := encodeBody(&opts)
	if err != nil {
		return err
	}
	return r.c.call(ctx, &request{method: http.MethodDelete, path: r.path(name), query: url.Values{}, body: body, contentType: mimeProtobuf}, nil)
}

// CreateSubresource POSTs obj to a subresource of the named object, such as a Binding to
// pods/<name>/binding. obj's kind is its own (not T's); its apiVersion and kind are filled in
// from the scheme when empty. The server's answer (often a Status) is decoded into out
// unless out is nil.
func (r *Typed[T]) CreateSubresource(ctx context.Context, name, subresource string, obj, out runtime.Object, opts ...metav1.CreateOptions) error {
	q, err := queryOf(first(opts))
	if err != nil {
		return err
	}
	if obj.GetObjectKind().GroupVersionKind().Empty() {
		kinds, _, err := scheme.Scheme.ObjectKinds(obj)
		if err != nil || len(kinds) == 0 {
			return fmt.Errorf("client: %T is not in the scheme: %v", obj, err)
		}
		obj.GetObjectKind().SetGroupVersionKind(kinds[0])
	}
	h := r
	if m, err := meta.Accessor(obj); err == nil && r.namespace == "" && m.GetNamespace() != "" {
		h = r.Namespace(m.GetNamespace())
	}
	body, err := encodeBody(obj)
	if err != nil {
		return err
	}
	return r.c.call(ctx, &request{method: http.MethodPost, path: h.path(name, subresource), query: q, body: body, contentType: mimeProtobuf}, out)
}
