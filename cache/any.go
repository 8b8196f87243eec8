package cache

import (
	"time"

	"github.com/kplane/kplane/client"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// AnyInformer is an informer of some resource seen through what every object has, its
// metadata: what controllers that handle every resource the server serves (the garbage
// collector, quota) work with, whether the informer underneath is typed (and shared with the
// controllers of that resource) or reads the objects' metadata only.
type AnyInformer interface {
	// AddObjectHandler registers h as AddHandler does.
	AddObjectHandler(h Handler[Object], resync time.Duration) Registration
	// HasSynced reports whether the initial list has been stored.
	HasSynced() bool
	// Objects returns the stored objects of namespace ns ("" = all); they are shared, never
	// modify them.
	Objects(ns string) []Object
}

// AddObjectHandler implements AnyInformer.
func (i *Informer[T]) AddObjectHandler(h Handler[Object], resync time.Duration) Registration {
	var th Handler[T]
	if h.OnAdd != nil {
		th.OnAdd = func(obj T, initial bool) { h.OnAdd(obj, initial) }
	}
	if h.OnUpdate != nil {
		th.OnUpdate = func(old, obj T) { h.OnUpdate(old, obj) }
	}
	if h.OnDelete != nil {
		th.OnDelete = func(obj T, unknown bool) { h.OnDelete(obj, unknown) }
	}
	return i.AddHandler(th, resync)
}

// Objects implements AnyInformer.
func (i *Informer[T]) Objects(ns string) []Object {
	items := i.Lister().Namespace(ns).List(labels.Everything())
	out := make([]Object, len(items))
	for k, o := range items {
		out[k] = o
	}
	return out
}

// ForResource returns the factory's informer for gvr: the typed one if For made one, else one
// that reads the objects' metadata only (client.Metadata), made on first use. A typed
// informer made later by For is another informer: callers that want to share typed informers
// call ForResource after the controllers that make them were built.
func (f *Factory) ForResource(gvr schema.GroupVersionResource) AnyInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.resources[gvr]; ok {
		return inf
	}
	inf := NewInformer(gvr.String(), client.Metadata(f.c, gvr).Namespace(f.namespace))
	f.addLocked(gvr.String()+"/metadata", gvr, inf)
	return inf
}
