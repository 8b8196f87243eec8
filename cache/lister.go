package cache

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Lister reads an informer's store without copying: the objects are shared, never modify them.
type Lister[T Object] struct {
	indexer *Indexer[T]
}

// List returns the objects matching sel (labels.Everything() for all).
func (l Lister[T]) List(sel labels.Selector) []T {
	return filter(l.indexer.List(), sel)
}

// Namespace narrows the lister to one namespace ("" = all of them).
func (l Lister[T]) Namespace(ns string) NamespaceLister[T] {
	return NamespaceLister[T]{indexer: l.indexer, ns: ns}
}

// NamespaceLister reads one namespace of an informer's store.
type NamespaceLister[T Object] struct {
	indexer *Indexer[T]
	ns      string
}

// List returns the namespace's objects matching sel.
func (l NamespaceLister[T]) List(sel labels.Selector) []T {
	if l.ns == "" { // metav1.NamespaceAll
		return filter(l.indexer.List(), sel)
	}
	objs, err := l.indexer.ByIndex(NamespaceIndex, l.ns)
	if err != nil {
		return nil
	}
	return filter(objs, sel)
}

// Get returns the named object, or a NotFound error.
func (l NamespaceLister[T]) Get(name string) (T, error) {
	key := name
	if l.ns != "" {
		key = l.ns + "/" + name
	}
	if obj, ok := l.indexer.Get(key); ok {
		return obj, nil
	}
	var zero T
	return zero, apierrors.NewNotFound(schema.GroupResource{}, name)
}

func filter[T Object](objs []T, sel labels.Selector) []T {
	if sel == nil || sel.Empty() {
		return objs
	}
	out := objs[:0]
	for _, o := range objs {
		if sel.Matches(labels.Set(o.GetLabels())) {
			out = append(out, o)
		}
	}
	return out
}

// WaitForCacheSync waits until every synced func reports true or ctx ends; it reports whether
// all synced.
func WaitForCacheSync(ctx context.Context, synced ...func() bool) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		all := true
		for _, s := range synced {
			all = all && s()
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}
