package fieldmanager

// overrides corrects what the Go types' tags say about merge semantics, where Kubernetes'
// +listType, +listMapKey, +mapType and +structType markers (comments in k8s.io/api, so not
// visible by reflection) decide otherwise. Keys are "TypeName.field" for a field and
// "TypeName" for a struct kept whole; values are "atomic", "set", "map:key1,key2" for lists and
// "atomic"/"granular" for maps and structs. TestListTypesMatchReference checks the result
// against testdata/reference-list-types.json, taken from kube-apiserver v1.36's /openapi/v3.
var overrides = map[string]string{
	"io.k8s.api.autoscaling.v1.CrossVersionObjectReference":                    "atomic",
	"io.k8s.api.batch.v1.JobStatus.conditions":                                 "atomic",
	"io.k8s.api.batch.v1.PodFailurePolicyOnExitCodesRequirement.values":        "set",
	"io.k8s.api.batch.v1.UncountedTerminatedPods.failed":                       "set",
	"io.k8s.api.batch.v1.UncountedTerminatedPods.succeeded":                    "set",
	"io.k8s.api.core.v1.ConfigMapKeySelector":                                  "atomic",
	"io.k8s.api.core.v1.Container.ports":                                       "map:containerPort,protocol",
	"io.k8s.api.core.v1.ContainerRestartRuleOnExitCodes.values":                "set",
	"io.k8s.api.core.v1.EndpointAddress":                                       "atomic",
	"io.k8s.api.core.v1.EndpointPort":                                          "atomic",
	"io.k8s.api.core.v1.EphemeralContainer.ports":                              "map:containerPort,protocol",
	"io.k8s.api.core.v1.FileKeySelector":                                       "atomic",
	"io.k8s.api.core.v1.LocalObjectReference":                                  "atomic",
	"io.k8s.api.core.v1.NodeAllocatableResourceClaimStatus.containers":         "set",
	"io.k8s.api.core.v1.NodeSelector":                                          "atomic",
	"io.k8s.api.core.v1.NodeSelectorTerm":                                      "atomic",
	"io.k8s.api.core.v1.ObjectFieldSelector":                                   "atomic",
	"io.k8s.api.core.v1.ObjectReference":                                       "atomic",
	"io.k8s.api.core.v1.PersistentVolumeClaimStatus.allocatedResourceStatuses": "granular",
	"io.k8s.api.core.v1.PersistentVolumeSpec.claimRef":                         "granular",
	"io.k8s.api.core.v1.PodSpec.nodeSelector":                                  "atomic",
	"io.k8s.api.core.v1.PodSpec.topologySpreadConstraints":                     "map:topologyKey,whenUnsatisfiable",
	"io.k8s.api.core.v1.PodStatus.hostIPs":                                     "atomic",
	"io.k8s.api.core.v1.ReplicationControllerSpec.selector":                    "atomic",
	"io.k8s.api.core.v1.ResourceFieldSelector":                                 "atomic",
	"io.k8s.api.core.v1.ResourceRequirements.claims":                           "map:name",
	"io.k8s.api.core.v1.ResourceStatus.resources":                              "map:resourceID",
	"io.k8s.api.core.v1.ScopeSelector":                                         "atomic",
	"io.k8s.api.core.v1.SecretKeySelector":                                     "atomic",
	"io.k8s.api.core.v1.SecretReference":                                       "atomic",
	"io.k8s.api.core.v1.ServiceSpec.ports":                                     "map:port,protocol",
	"io.k8s.api.core.v1.ServiceSpec.selector":                                  "atomic",
	"io.k8s.api.core.v1.TopologySelectorTerm":                                  "atomic",
	"io.k8s.api.core.v1.TypedLocalObjectReference":                             "atomic",
	"io.k8s.api.discovery.v1.Endpoint.addresses":                               "set",
	"io.k8s.api.discovery.v1.EndpointPort":                                     "atomic",
	"io.k8s.api.storage.v1.CSIDriverSpec.volumeLifecycleModes":                 "set",
	"io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector":                       "atomic",
	"io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference":                      "atomic",
}
