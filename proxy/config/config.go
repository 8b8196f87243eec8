// Package config is the proxy's config layer (seed 001): it follows Services, EndpointSlices and
// this proxy's Node through shared informers and fans every change out to the handlers
// registered with it.
//
// Each config narrows its informer as kube-proxy does and filters again in its own handler, so
// it stays right on an informer someone else made without those selectors:
//
//   - Services without the service.kubernetes.io/service-proxy-name label (that label hands a
//     Service to another proxy) and with a ClusterIP other than None (headless Services have
//     nothing to proxy).
//   - EndpointSlices without the service.kubernetes.io/headless label.
//   - Only the Node named after this proxy's node.
//
// An object that starts or stops passing the filter is told as an add or a delete (the delete
// with the last state the handlers were told of). Handlers are called synchronously, one call at a time per config, in registration
// order; the Synced call comes once, after the handlers were told the whole initial list.
package config

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// LabelServiceProxyName names the proxy that handles a Service; Services carrying it are left
// to that proxy.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// ServiceHandler is told about every Service the proxy handles.
type ServiceHandler interface {
	OnServiceAdd(service *corev1.Service)
	OnServiceUpdate(oldService, service *corev1.Service)
	OnServiceDelete(service *corev1.Service)
	// OnServiceSynced: every Service of the initial list has been told.
	OnServiceSynced()
}

// EndpointSliceHandler is told about every EndpointSlice the proxy handles.
type EndpointSliceHandler interface {
	OnEndpointSliceAdd(slice *discoveryv1.EndpointSlice)
	OnEndpointSliceUpdate(oldSlice, slice *discoveryv1.EndpointSlice)
	OnEndpointSliceDelete(slice *discoveryv1.EndpointSlice)
	// OnEndpointSliceSynced: every EndpointSlice of the initial list has been told.
	OnEndpointSliceSynced()
}

// NodeHandler is told about the proxy's own Node.
type NodeHandler interface {
	OnNodeAdd(node *corev1.Node)
	OnNodeUpdate(oldNode, node *corev1.Node)
	OnNodeDelete(node *corev1.Node)
	// OnNodeSynced: the initial list (the Node, if it existed) has been told.
	OnNodeSynced()
}

// handlerFuncs is one registered handler, whatever its type.
type handlerFuncs[T cache.Object] struct {
	add    func(T)
	update func(old, obj T)
	del    func(T)
	synced func()
}

// fanout is what the three configs share: a filtered handler on an informer that calls the
// registered handlers in order, one call at a time.
type fanout[T cache.Object] struct {
	name string
	keep func(T) bool
	reg  cache.Registration

	mu       sync.Mutex // held during every dispatch, so handlers see one call at a time
	handlers []handlerFuncs[T]
	// told holds, per key, the last state the handlers were told of: a deletion is told only
	// for objects they know, with that state (an object leaving the informer's selection is
	// deleted with its new state, which the handlers never saw).
	told map[string]T
}

func newFanout[T cache.Object](name string, inf *cache.Informer[T], keep func(T) bool, resync time.Duration) *fanout[T] {
	f := &fanout[T]{name: name, keep: keep, told: map[string]T{}}
	f.reg = inf.AddHandler(cache.Handler[T]{
		OnAdd:    func(obj T, _ bool) { f.changed(obj) },
		OnUpdate: func(_, obj T) { f.changed(obj) },
		OnDelete: func(obj T, _ bool) { f.deleted(obj) },
	}, resync)
	return f
}

// changed tells an add, an update or a delete, from what the handlers know of obj and whether
// they should know it now.
func (f *fanout[T]) changed(obj T) {
	key := cache.MetaNamespaceKey(obj)
	f.mu.Lock()
	defer f.mu.Unlock()
	old, known := f.told[key]
	switch kept := f.keep(obj); {
	case known && kept:
		f.told[key] = obj
		for _, h := range f.handlers {
			h.update(old, obj)
		}
	case known:
		delete(f.told, key)
		for _, h := range f.handlers {
			h.del(old)
		}
	case kept:
		f.told[key] = obj
		for _, h := range f.handlers {
			h.add(obj)
		}
	}
}

func (f *fanout[T]) deleted(obj T) {
	key := cache.MetaNamespaceKey(obj)
	f.mu.Lock()
	defer f.mu.Unlock()
	old, known := f.told[key]
	if !known {
		return
	}
	delete(f.told, key)
	for _, h := range f.handlers {
		h.del(old)
	}
}

func (f *fanout[T]) register(h handlerFuncs[T]) {
	f.mu.Lock()
	f.handlers = append(f.handlers, h)
	f.mu.Unlock()
}

// run waits until the handlers have been told the initial list, then calls their synced once.
func (f *fanout[T]) run(ctx context.Context) {
	slog.Debug("proxy config: waiting for the initial list", "config", f.name)
	if !cache.WaitForCacheSync(ctx, f.reg.HasSynced) {
		return
	}
	f.mu.Lock()
	for _, h := range f.handlers {
		h.synced()
	}
	f.mu.Unlock()
	slog.Debug("proxy config: synced", "config", f.name)
}

// ServiceConfig fans Service changes out to ServiceHandlers.
type ServiceConfig struct{ f *fanout[*corev1.Service] }

// NewServiceConfig follows the Services of factory's services informer (made here, with
// kube-proxy's selectors, unless the factory has one already); resync > 0 also tells every
// Service as an update that often. Make it before the factory starts.
func NewServiceConfig(factory *cache.Factory, resync time.Duration) *ServiceConfig {
	inf := cache.For(factory, "services", cache.WithSelectors[*corev1.Service](
		"!"+LabelServiceProxyName, fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()))
	return &ServiceConfig{f: newFanout("services", inf, KeepService, resync)}
}

// KeepService reports whether the proxy handles s: it names no other proxy and is not headless.
func KeepService(s *corev1.Service) bool {
	_, other := s.Labels[LabelServiceProxyName]
	return !other && s.Spec.ClusterIP != corev1.ClusterIPNone
}

// RegisterEventHandler adds h; call it before Run.
func (c *ServiceConfig) RegisterEventHandler(h ServiceHandler) {
	c.f.register(handlerFuncs[*corev1.Service]{add: h.OnServiceAdd, update: h.OnServiceUpdate, del: h.OnServiceDelete, synced: h.OnServiceSynced})
}

// Run waits until the handlers have been told every Service of the initial list, tells them
// OnServiceSynced and returns; it returns early when ctx is cancelled. The informer's own
// goroutines (started by the factory) deliver the events.
func (c *ServiceConfig) Run(ctx context.Context) { c.f.run(ctx) }

// HasSynced reports whether the handlers have been told the initial list.
func (c *ServiceConfig) HasSynced() bool { return c.f.reg.HasSynced() }

// EndpointSliceConfig fans EndpointSlice changes out to EndpointSliceHandlers.
type EndpointSliceConfig struct {
	f *fanout[*discoveryv1.EndpointSlice]
}

// NewEndpointSliceConfig follows the EndpointSlices of factory's endpointslices informer (made
// here without headless slices unless the factory has one already); resync as for Services.
func NewEndpointSliceConfig(factory *cache.Factory, resync time.Duration) *EndpointSliceConfig {
	inf := cache.For(factory, "endpointslices", cache.WithSelectors[*discoveryv1.EndpointSlice]("!"+corev1.IsHeadlessService, ""))
	return &EndpointSliceConfig{f: newFanout("endpointslices", inf, KeepEndpointSlice, resync)}
}

// KeepEndpointSlice reports whether the proxy handles s: it does not belong to a headless Service.
func KeepEndpointSlice(s *discoveryv1.EndpointSlice) bool {
	_, headless := s.Labels[corev1.IsHeadlessService]
	return !headless
}

// RegisterEventHandler adds h; call it before Run.
func (c *EndpointSliceConfig) RegisterEventHandler(h EndpointSliceHandler) {
	c.f.register(handlerFuncs[*discoveryv1.EndpointSlice]{add: h.OnEndpointSliceAdd, update: h.OnEndpointSliceUpdate,
		del: h.OnEndpointSliceDelete, synced: h.OnEndpointSliceSynced})
}

// Run is as ServiceConfig.Run, for EndpointSlices.
func (c *EndpointSliceConfig) Run(ctx context.Context) { c.f.run(ctx) }

// HasSynced reports whether the handlers have been told the initial list.
func (c *EndpointSliceConfig) HasSynced() bool { return c.f.reg.HasSynced() }

// NodeConfig fans changes of one Node out to NodeHandlers.
type NodeConfig struct{ f *fanout[*corev1.Node] }

// NewNodeConfig follows the Node named nodeName through factory's nodes informer (made here with
// a field selector on the name unless the factory has one already).
func NewNodeConfig(factory *cache.Factory, nodeName string, resync time.Duration) *NodeConfig {
	inf := cache.For(factory, "nodes", cache.WithSelectors[*corev1.Node]("", fields.OneTermEqualSelector("metadata.name", nodeName).String()))
	keep := func(n *corev1.Node) bool { return n.Name == nodeName }
	return &NodeConfig{f: newFanout("nodes", inf, keep, resync)}
}

// RegisterEventHandler adds h; call it before Run.
func (c *NodeConfig) RegisterEventHandler(h NodeHandler) {
	c.f.register(handlerFuncs[*corev1.Node]{add: h.OnNodeAdd, update: h.OnNodeUpdate, del: h.OnNodeDelete, synced: h.OnNodeSynced})
}

// Run is as ServiceConfig.Run, for the Node.
func (c *NodeConfig) Run(ctx context.Context) { c.f.run(ctx) }

// HasSynced reports whether the handlers have been told the initial list.
func (c *NodeConfig) HasSynced() bool { return c.f.reg.HasSynced() }
