package registry

import (
	"net"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	coreV1         = schema.GroupVersion{Version: "v1"}
	appsV1         = appsv1.SchemeGroupVersion
	coordinationV1 = coordinationv1.SchemeGroupVersion
)

// All returns the definition of every served resource, in discovery order.
func All(svc *ServiceAllocation) []Strategy {
	all := []Strategy{
		namespaces, pods, services(svc), endpoints, nodes, events, configMaps, secrets, serviceAccounts,
		replicationControllers, endpointSlices, leases, replicaSets, deployments, daemonSets, statefulSets, controllerRevisions,
		persistentVolumes, persistentVolumeClaims, storageClasses, jobs, cronJobs, podDisruptionBudgets,
		resourceQuotas, limitRanges,
		// v2 first: a group's first version in this list is its preferred one.
		horizontalPodAutoscalers, horizontalPodAutoscalersV1,
	}
	// Each group file adds its resources with one line, so files added side by side merge.
	all = append(all, coreExtraResources()...)
	all = append(all, eventsResources()...)
	all = append(all, networkingResources()...)
	all = append(all, nodeResources()...)
	all = append(all, schedulingResources()...)
	all = append(all, storageExtraResources()...)
	all = append(all, resourceResources()...)
	all = append(all, rbacResources()...)
	all = append(all, certificateSigningRequests, apiServices)
	all = append(all, flowcontrolResources()...)
	all = append(all, admissionregistrationResources()...)
	return all
}

var configMaps = &Def[*corev1.ConfigMap]{
	Info:    Info{GroupVersion: coreV1, Resource: "configmaps", Singular: "configmap", Kind: "ConfigMap", ShortNames: []string{"cm"}, Namespaced: true},
	NewList: func() runtime.Object { return &corev1.ConfigMapList{} },
	Columns: columns(Column("Data", "string", 0, "Number of data entries."), AgeColumn),
	Row: func(c *corev1.ConfigMap) []any {
		return []any{int64(len(c.Data) + len(c.BinaryData)), Age(c.CreationTimestamp)}
	},
}

func columns(c ...metav1.TableColumnDefinition) []metav1.TableColumnDefinition { return c }

// ServiceAllocation holds the ranges services draw ClusterIPs and NodePorts from.
type ServiceAllocation struct {
	ClusterIPRange *net.IPNet
	NodePortBase   int // first port of the NodePort range
	NodePortSize   int // number of ports in the range
}
