// Package cache is kplane's client-side object cache: the pieces an informer is built from.
//
// Objects flow reflector → DeltaFIFO → process loop → Indexer. Everything here is generic over
// the object type (a k8s.io/api pointer such as *corev1.Pod), so callers never type-assert.
// Controllers that handle every resource the server serves, known only from discovery, get an
// AnyInformer per resource from Factory.ForResource: the typed informer when one exists, else
// one of the objects' metadata (PartialObjectMetadata).
//
// The behaviour of DeltaFIFO and Indexer matches client-go's tools/cache (DeltaFIFO with
// EmitDeltaTypeReplaced and an indexer as known objects; NewIndexer with MetaNamespaceKeyFunc);
// differential tests in this package run both on the same operation sequences.
//
// Objects an informer hands out (to handlers, from its Lister and Indexer) must not be modified,
// as with client-go, and here more strictly: objects alike share parts (two pods of one
// ReplicaSet may hold the same Labels map and Spec.Containers slice, see client.SharedParts), so
// a change to one object's slice, map or pointee changes the others and the objects decoded
// after it. DeepCopy before changing anything; a transform (WithTransform) may replace fields but
// not change what they hold.
package cache
