package apiserver

import (
	"context"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// storedObjects is the registry's view of the stores for admission (registry.Objects): reads
// of other resources while one is written.
type storedObjects struct{ s *Server }

func (s *Server) objects() registry.Objects { return storedObjects{s} }

func (o storedObjects) store(gr schema.GroupResource) (objectStore, error) {
	for _, r := range o.s.ordered {
		if r.info.GroupResource() == gr {
			return r.store, nil
		}
	}
	return nil, apierrors.NewNotFound(gr, "")
}

// List implements registry.Objects: a consistent list, served by the watch cache once it has
// caught up with etcd, so an object created a moment ago is seen.
func (o storedObjects) List(ctx context.Context, gr schema.GroupResource) ([]registry.Object, error) {
	st, err := o.store(gr)
	if err != nil {
		return nil, err
	}
	list, err := st.List(ctx, "", storage.ListOptions{})
	if err != nil {
		return nil, err
	}
	items := listItems(list)
	out := make([]registry.Object, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out, nil
}

// Get implements registry.Objects with a consistent read.
func (o storedObjects) Get(ctx context.Context, gr schema.GroupResource, namespace, name string) (registry.Object, error) {
	st, err := o.store(gr)
	if err != nil {
		return nil, err
	}
	return st.Get(ctx, namespace, name)
}
