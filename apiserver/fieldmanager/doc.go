// Package fieldmanager is kplane's field ownership: the metadata.managedFields every write
// records, and server-side apply (PATCH with application/apply-patch+yaml) with its conflicts,
// force and ownership transfer.
//
// The merging and bookkeeping are Kubernetes' own: apimachinery's managedfields.FieldManager
// over sigs.k8s.io/structured-merge-diff, used as kube-apiserver uses it (the same chain of
// managers: version check, the migration from client-side apply's last-applied annotation,
// the cap of ten Update entries merged into "ancient-changes", the manager info and the
// stripping of server-set metadata), so managedFields, conflict messages and causes read as
// Kubernetes writes them. What kplane supplies is what kube-apiserver builds from its OpenAPI
// documents:
//
//   - Types: the structured-merge-diff schema of each kind. ForGoTypes derives it from the
//     k8s.io/api Go types by reflection; lists take their semantics from the patchStrategy and
//     patchMergeKey tags, corrected by a table (listtypes.go) where Kubernetes' +listType,
//     +listMapKey, +mapType and +structType markers (comments, invisible to reflection) differ,
//     checked by a test against kube-apiserver v1.36's /openapi/v3. ForJSONSchema builds a
//     custom resource's from its structural schema through kube-openapi's schemaconv, the
//     converter kube-apiserver uses.
//   - the conversion between an endpoint's Go objects and the unstructured values the merge
//     works on (each kplane endpoint serves one version, so no cross-version conversion), and
//     no defaulting: kplane's strategies default after the merge.
//
// A Manager serves one endpoint of one kind (the object, or its status or scale subresource);
// the apiserver calls Update for every create, update and non-apply patch, after the
// resource's strategy has prepared the object, and Apply for apply patches. The scale
// subresource's Manager is of autoscaling/v1 Scales, as in Kubernetes: ScaleFields gives a
// write the Scale's managedFields (the owners of the parent's replicas, at spec.replicas)
// and puts the result back into the parent's, with apimachinery's ScaleHandler.
//
// Differences from kube-apiserver: writes are recorded after the whole strategy preparation,
// so fields the server sets on create (a Service's ipFamilyPolicy, a Pod's service-account
// volume) are owned by the creator, where Kubernetes records only the decoded and defaulted
// request; managedFields entries of another served version of the same resource
// (autoscaling/v1 beside v2) cannot be converted, and a write through one version drops the
// other version's entries, as Kubernetes does for a version it cannot convert.
package fieldmanager
