package quota

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The resource names Kubernetes v1.36 knows, as its validation and quota system classify them
// (pkg/apis/core/helper). ResourceQuota and LimitRange validation and the evaluators share them.

// Standard quota scopes: what spec.scopes and scopeSelector may name.
var standardScopes = []corev1.ResourceQuotaScope{
	corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating,
	corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort,
	corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeVolumeAttributesClass,
	corev1.ResourceQuotaScopeCrossNamespacePodAffinity,
}

// IsStandardScope reports whether scope is one Kubernetes knows.
func IsStandardScope(scope corev1.ResourceQuotaScope) bool {
	for _, s := range standardScopes {
		if s == scope {
			return true
		}
	}
	return false
}

var (
	podCountResources   = []corev1.ResourceName{corev1.ResourcePods}
	podComputeResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceLimitsCPU,
		corev1.ResourceLimitsMemory, corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory}
	claimScopedResources = []corev1.ResourceName{corev1.ResourcePersistentVolumeClaims, corev1.ResourceRequestsStorage}
)

// ScopeAppliesTo reports whether a quota with scope may limit resource: the pod scopes limit
// pods and their compute resources (BestEffort pods have none, so only their count), the
// VolumeAttributesClass scope claims and their storage; any other name is not restricted.
func ScopeAppliesTo(scope corev1.ResourceQuotaScope, resource corev1.ResourceName) bool {
	has := func(list []corev1.ResourceName) bool {
		for _, r := range list {
			if r == resource {
				return true
			}
		}
		return false
	}
	switch scope {
	case corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeNotBestEffort,
		corev1.ResourceQuotaScopePriorityClass, corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return has(podCountResources) || has(podComputeResources)
	case corev1.ResourceQuotaScopeBestEffort:
		return has(podCountResources)
	case corev1.ResourceQuotaScopeVolumeAttributesClass:
		return has(claimScopedResources)
	}
	return true
}

// standardQuotaResources are the unqualified names a quota may limit (hugepages aside).
var standardQuotaResources = map[corev1.ResourceName]bool{
	corev1.ResourceCPU: true, corev1.ResourceMemory: true, corev1.ResourceEphemeralStorage: true,
	corev1.ResourceRequestsCPU: true, corev1.ResourceRequestsMemory: true, corev1.ResourceRequestsStorage: true,
	corev1.ResourceRequestsEphemeralStorage: true, corev1.ResourceLimitsCPU: true, corev1.ResourceLimitsMemory: true,
	corev1.ResourceLimitsEphemeralStorage: true, corev1.ResourcePods: true, corev1.ResourceQuotas: true,
	corev1.ResourceServices: true, corev1.ResourceReplicationControllers: true, corev1.ResourceSecrets: true,
	corev1.ResourcePersistentVolumeClaims: true, corev1.ResourceConfigMaps: true,
	corev1.ResourceServicesNodePorts: true, corev1.ResourceServicesLoadBalancers: true,
}

// IsStandardQuotaResource reports whether an unqualified name is one a quota tracks.
func IsStandardQuotaResource(name corev1.ResourceName) bool {
	return standardQuotaResources[name] || isQuotaHugePages(name)
}

// IsStandardResource reports whether an unqualified name is a known resource (the quota
// names and plain storage).
func IsStandardResource(name corev1.ResourceName) bool {
	return standardQuotaResources[name] || name == corev1.ResourceStorage || isQuotaHugePages(name)
}

// IsStandardContainerResource reports whether a container may request name unqualified.
func IsStandardContainerResource(name corev1.ResourceName) bool {
	return name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage || IsHugePages(name)
}

// IsHugePages reports whether name is a hugepages-<size> resource.
func IsHugePages(name corev1.ResourceName) bool {
	return strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix)
}

func isQuotaHugePages(name corev1.ResourceName) bool {
	return IsHugePages(name) || strings.HasPrefix(string(name), corev1.ResourceRequestsHugePagesPrefix)
}

// IsNative reports whether name is in the kubernetes.io domain (unqualified names are).
func IsNative(name corev1.ResourceName) bool {
	return !strings.Contains(string(name), "/") || strings.Contains(string(name), corev1.ResourceDefaultNamespacePrefix)
}

// IsExtended reports whether name is an extended resource: outside kubernetes.io, not a
// "requests." quota name, and still a qualified name with "requests." in front.
func IsExtended(name corev1.ResourceName) bool {
	if IsNative(name) || strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+string(name))) == 0
}

// IsOvercommitAllowed reports whether a limit may exceed the request of name: only native
// resources other than hugepages.
func IsOvercommitAllowed(name corev1.ResourceName) bool {
	return IsNative(name) && !IsHugePages(name)
}

var integerResources = map[corev1.ResourceName]bool{
	corev1.ResourcePods: true, corev1.ResourceQuotas: true, corev1.ResourceServices: true,
	corev1.ResourceReplicationControllers: true, corev1.ResourceSecrets: true, corev1.ResourceConfigMaps: true,
	corev1.ResourcePersistentVolumeClaims: true, corev1.ResourceServicesNodePorts: true, corev1.ResourceServicesLoadBalancers: true,
}

// IsInteger reports whether name is counted in whole units (object counts, extended resources).
func IsInteger(name corev1.ResourceName) bool {
	return integerResources[name] || IsExtended(name)
}
