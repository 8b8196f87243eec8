package apiserver

import (
	"fmt"
	"reflect"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/scheme"
	"github.com/kplane/kplane/storage"
	"k8s.io/apimachinery/pkg/runtime"
)

// A resource served at a second version of its group (autoscaling/v1 HorizontalPodAutoscalers
// beside autoscaling/v2) gets a store of its own over the same etcd keys as the stored
// version's, whose codec converts at the storage boundary: what is written is always the
// stored version's object, and each store's watch cache holds its own version's. Everything
// above the store (defaults, validation, patches, watches, tables, dry runs) then works on the
// served version's objects as on any other resource's.

// storageCodecFor is the codec of a resource's store.
func storageCodecFor(st registry.Strategy) storage.Codec {
	if cv := st.StoredVersion(); cv != nil {
		return convertingCodec{cv}
	}
	return StorageCodec{}
}

// convertingCodec stores objects of a served version as their stored version.
type convertingCodec struct{ cv registry.Conversion }

// Encode implements storage.Codec.
func (c convertingCodec) Encode(obj runtime.Object) ([]byte, error) {
	o, ok := obj.(registry.Object)
	if !ok {
		return nil, fmt.Errorf("storing %T: not an API object", obj)
	}
	stored, err := c.cv.ToStored(o)
	if err != nil {
		return nil, err
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(stored)
	if err != nil {
		return nil, err
	}
	stored.GetObjectKind().SetGroupVersionKind(gvks[0])
	return StorageCodec{}.Encode(stored)
}

// Decode implements storage.Codec.
func (c convertingCodec) Decode(data []byte, into runtime.Object) error {
	stored := c.cv.NewStored()
	if err := (StorageCodec{}).Decode(data, stored); err != nil {
		return err
	}
	served, err := c.cv.FromStored(stored)
	if err != nil {
		return err
	}
	dst, src := reflect.ValueOf(into), reflect.ValueOf(served)
	if dst.Type() != src.Type() {
		return fmt.Errorf("decoding into %T: the stored object converts to %T", into, served)
	}
	dst.Elem().Set(src.Elem())
	return nil
}
