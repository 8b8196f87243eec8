package controller

import (
	"context"

	"github.com/kplane/kplane/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Discovered keeps one value per served resource (an informer handler and what goes with it)
// in step with what discovery reports, for controllers that act on every resource of some
// shape: the garbage collector watches everything deletable, the quota controller counts
// everything creatable. It is not safe for concurrent use: its owner locks.
type Discovered[V any] struct {
	items map[schema.GroupVersionResource]V
}

// Sync makes the set the given resources: add builds the value of each resource not in it
// yet (false leaves the resource out, to be offered again next time), remove releases the
// value of each one no longer served.
func (d *Discovered[V]) Sync(resources []client.APIResource, add func(client.APIResource) (V, bool), remove func(schema.GroupVersionResource, V)) {
	if d.items == nil {
		d.items = map[schema.GroupVersionResource]V{}
	}
	current := make(map[schema.GroupVersionResource]bool, len(resources))
	for _, r := range resources {
		current[r.GroupVersionResource] = true
	}
	// Removals first: when a resource's preferred version changes, the old version's value
	// goes before the new one's is made, so that what they share (keyed by group and
	// resource) ends up the new one's.
	for gvr, v := range d.items {
		if !current[gvr] {
			delete(d.items, gvr)
			remove(gvr, v)
		}
	}
	for _, r := range resources {
		if _, ok := d.items[r.GroupVersionResource]; ok {
			continue
		}
		if v, ok := add(r); ok {
			d.items[r.GroupVersionResource] = v
		}
	}
}

// Clear releases every value: the controller has stopped.
func (d *Discovered[V]) Clear(remove func(schema.GroupVersionResource, V)) {
	d.Sync(nil, nil, remove)
}

// Resources lists the resources in the set, unordered.
func (d *Discovered[V]) Resources() []schema.GroupVersionResource {
	out := make([]schema.GroupVersionResource, 0, len(d.items))
	for gvr := range d.items {
		out = append(out, gvr)
	}
	return out
}

// ServedResources asks discovery for the served resources (the preferred version of each
// group) that support verbs and that keep accepts.
func ServedResources(ctx context.Context, discover func(context.Context) ([]*metav1.APIResourceList, error), keep func(client.APIResource) bool, verbs ...string) ([]client.APIResource, error) {
	lists, err := discover(ctx)
	if err != nil {
		return nil, err
	}
	var out []client.APIResource
	for _, r := range client.FilterResources(lists, verbs...) {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out, nil
}
