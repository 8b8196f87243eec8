package apiserver

import (
	"context"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/storage"
	"k8s.io/apimachinery/pkg/runtime"
)

// objectStore is what the handlers read and write a resource through: a storage.Store, or a
// storage.Converted for a resource served at a version other than the one its objects are
// stored as (autoscaling/v1 HorizontalPodAutoscalers, events.k8s.io Events, the versions of a
// custom resource). Either way there is one etcd key, one watch cache and one resourceVersion
// history per object, whichever version a client uses.
type objectStore interface {
	Run(ctx context.Context)
	WaitReady(ctx context.Context) error
	Get(ctx context.Context, ns, name string) (storage.Object, error)
	GetCached(ns, name string) (storage.Object, error)
	Create(ctx context.Context, obj storage.Object, claims []string, dryRun bool) (storage.Object, error)
	Taken(ctx context.Context, claim string) (bool, error)
	Update(ctx context.Context, ns, name string, tryUpdate storage.UpdateFunc, claimsOf storage.ClaimsFunc, dryRun bool) (storage.Object, error)
	Delete(ctx context.Context, ns, name string, precondition func(storage.Object) error, claimsOf storage.ClaimsFunc, dryRun bool) (storage.Object, error)
	List(ctx context.Context, ns string, opts storage.ListOptions) (runtime.Object, error)
	Watch(ctx context.Context, ns string, opts storage.WatchOptions) (*storage.Watch, error)
	WrittenRevision() string
}

// registryConverter converts a built-in resource's second version with its registry.Conversion,
// in process.
type registryConverter struct{ cv registry.Conversion }

// Served implements storage.Converter.
func (c registryConverter) Served(_ context.Context, stored []storage.Object) ([]storage.Object, error) {
	out := make([]storage.Object, len(stored))
	for i, o := range stored {
		served, err := c.cv.FromStored(o)
		if err != nil {
			return nil, err
		}
		out[i] = served
	}
	return out, nil
}

// Stored implements storage.Converter.
func (c registryConverter) Stored(_ context.Context, obj storage.Object) (storage.Object, error) {
	return c.cv.ToStored(obj)
}

var _ storage.Converter = registryConverter{}
