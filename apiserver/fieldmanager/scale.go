package fieldmanager

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// ReplicasPaths says, for each apiVersion of a scalable kind ("apps/v1"), where its objects
// keep their spec replicas ({"spec", "replicas"}); a version without a scale subresource maps
// to nil. Entries of versions missing from it are dropped by a scale write, as Kubernetes drops
// them.
type ReplicasPaths map[string][]string

// ScaleFields translates field ownership between a scalable object and its autoscaling/v1
// Scale, as Kubernetes' scale subresources do (apimachinery's managedfields.ScaleHandler):
// the Scale of an object is owned, at spec.replicas, by the managers owning the object's
// replicas; a write to the Scale gives its managers the object's replicas back.
type ScaleFields struct {
	handler *managedfields.ScaleHandler
}

// NewScaleFields translates the managedFields of parent, served at parentVersion.
func NewScaleFields(parent []metav1.ManagedFieldsEntry, parentVersion schema.GroupVersion, paths ReplicasPaths) *ScaleFields {
	mappings := managedfields.ResourcePathMappings{}
	for version, path := range paths {
		if path == nil {
			mappings[version] = nil
			continue
		}
		var p fieldpath.Path
		for _, name := range path {
			p = append(p, fieldpath.PathElement{FieldName: &name})
		}
		mappings[version] = p
	}
	return &ScaleFields{handler: managedfields.NewScaleHandler(parent, parentVersion, mappings)}
}

// ForScale returns the managedFields of the parent's Scale.
func (s *ScaleFields) ForScale() ([]metav1.ManagedFieldsEntry, error) {
	return s.handler.ToSubresource()
}

// ForParent returns the parent's managedFields after a write of its Scale left scale ones.
func (s *ScaleFields) ForParent(scale []metav1.ManagedFieldsEntry) ([]metav1.ManagedFieldsEntry, error) {
	return s.handler.ToParent(scale)
}
