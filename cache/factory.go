package cache

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"github.com/kplane/kplane/client"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Factory shares one informer per resource among every user in a process (every controller of
// a controller manager), so each resource is listed and watched once.
type Factory struct {
	c         *client.Client
	namespace string

	mu        sync.Mutex
	informers map[string]any // resource/type → *Informer[T]
	// resources are the same informers by group version and resource, for ForResource.
	resources map[schema.GroupVersionResource]AnyInformer
	pending   []func(context.Context)
	synced    []func() bool
	wg        sync.WaitGroup
}

// NewFactory makes a factory whose informers read through c, across all namespaces or only ns.
func NewFactory(c *client.Client, ns string) *Factory {
	return &Factory{c: c, namespace: ns, informers: map[string]any{}, resources: map[schema.GroupVersionResource]AnyInformer{}}
}

// For returns the factory's informer for resource (plural name, "pods") of objects T, making it
// on first use; opts apply only then.
func For[T Object](f *Factory, resource string, opts ...InformerOption[T]) *Informer[T] {
	var zero T
	key := resource + "/" + reflect.TypeOf(zero).String()
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.informers[key]; ok {
		return inf.(*Informer[T]) // the key includes T, so the type always matches
	}
	lw := client.Resource[T](f.c, resource).Namespace(f.namespace)
	inf := NewInformer(fmt.Sprint(resource), lw, opts...)
	f.addLocked(key, lw.GroupVersionKind().GroupVersion().WithResource(resource), inf)
	return inf
}

// addLocked adds a new informer under key (and under gvr, unless one is there already), to be
// run by the next Start.
func (f *Factory) addLocked(key string, gvr schema.GroupVersionResource, inf interface {
	AnyInformer
	Run(context.Context)
}) {
	f.informers[key] = inf
	if _, ok := f.resources[gvr]; !ok {
		f.resources[gvr] = inf
	}
	f.pending = append(f.pending, inf.Run)
	f.synced = append(f.synced, inf.HasSynced)
}

// Start runs every informer not running yet, until ctx is cancelled.
func (f *Factory) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, run := range f.pending {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			run(ctx)
		}()
	}
	f.pending = nil
}

// WaitForCacheSync waits until every informer made so far has synced, or ctx ends.
func (f *Factory) WaitForCacheSync(ctx context.Context) bool {
	f.mu.Lock()
	synced := append([]func() bool(nil), f.synced...)
	f.mu.Unlock()
	return WaitForCacheSync(ctx, synced...)
}

// Shutdown waits for every informer started by Start to end (after its context is cancelled).
func (f *Factory) Shutdown() { f.wg.Wait() }
