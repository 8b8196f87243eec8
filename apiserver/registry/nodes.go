package registry

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// nodes keep the status they are registered with: the node agent creates its Node with
// addresses, capacity and conditions already filled in.
var nodes = &Def[*corev1.Node]{
	Info:               Info{GroupVersion: coreV1, Resource: "nodes", Singular: "node", Kind: "Node", ShortNames: []string{"no"}, Status: true},
	NewList:            func() runtime.Object { return &corev1.NodeList{} },
	KeepStatusOnCreate: true,
	Defaults: func(n *corev1.Node) {
		if n.Status.Allocatable == nil && n.Status.Capacity != nil {
			n.Status.Allocatable = n.Status.Capacity.DeepCopy()
		}
	},
	Validate:       validateNode,
	ValidateUpdate: validateNodeUpdate,
	Fields: func(n *corev1.Node) fields.Set {
		return fields.Set{"spec.unschedulable": strconv.FormatBool(n.Spec.Unschedulable)}
	},
	Columns: columns(
		Column("Status", "string", 0, "The status of the node"),
		Column("Roles", "string", 0, "The roles of the node"),
		AgeColumn,
		Column("Version", "string", 0, "Kubelet version reported by the node."),
		Column("Internal-IP", "string", 1, "The node's internal address."),
		Column("External-IP", "string", 1, "The node's external address."),
		Column("OS-Image", "string", 1, "OS image reported by the node."),
		Column("Kernel-Version", "string", 1, "Kernel version reported by the node."),
		Column("Container-Runtime", "string", 1, "Container runtime version reported by the node."),
	),
	Row: nodeRow,
}

func validateNode(n *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	seen := map[string]bool{}
	for i, t := range n.Spec.Taints {
		tp := p.Child("taints").Index(i)
		errs = append(errs, metav1validation.ValidateLabelName(t.Key, tp.Child("key"))...)
		errs = append(errs, msgs(tp.Child("value"), t.Value, validation.IsValidLabelValue(t.Value))...)
		errs = append(errs, oneOf(t.Effect, tp.Child("effect"), corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute)...)
		if seen[t.Key+":"+string(t.Effect)] {
			errs = append(errs, field.Duplicate(tp, fmt.Sprintf("taints must be unique by key and effect pair, %s:%s", t.Key, t.Effect)))
		}
		seen[t.Key+":"+string(t.Effect)] = true
	}
	for i, c := range n.Spec.PodCIDRs {
		errs = append(errs, validation.IsValidCIDR(p.Child("podCIDRs").Index(i), c)...)
	}
	if n.Spec.PodCIDR != "" && len(n.Spec.PodCIDRs) > 0 && n.Spec.PodCIDR != n.Spec.PodCIDRs[0] {
		errs = append(errs, field.Invalid(p.Child("podCIDR"), n.Spec.PodCIDR, "must match the first element of podCIDRs"))
	}
	return errs
}

// validateNodeUpdate keeps the node's pod range and provider ID once set: routes and the cloud
// provider were set up for them.
func validateNodeUpdate(n, old *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if len(old.Spec.PodCIDRs) > 0 && strings.Join(n.Spec.PodCIDRs, ",") != strings.Join(old.Spec.PodCIDRs, ",") {
		errs = append(errs, field.Forbidden(p.Child("podCIDRs"), "node updates may not change podCIDR except from \"\" to valid"))
	}
	if old.Spec.ProviderID != "" && n.Spec.ProviderID != old.Spec.ProviderID {
		errs = append(errs, field.Forbidden(p.Child("providerID"), "node updates may not change providerID except from \"\" to valid"))
	}
	return errs
}

func nodeRow(n *corev1.Node) []any {
	status := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			status = "NotReady"
			if c.Status == corev1.ConditionTrue {
				status = "Ready"
			}
		}
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	var roles []string
	for k, v := range n.Labels {
		if role, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && role != "" {
			roles = append(roles, role)
		} else if k == "kubernetes.io/role" && v != "" {
			roles = append(roles, v)
		}
	}
	slices.Sort(roles)
	info := n.Status.NodeInfo
	kernel := or(info.KernelVersion, "<unknown>")
	if info.Architecture != "" {
		kernel += " (" + info.Architecture + ")"
	}
	return []any{status, joinOrNone(roles), Age(n.CreationTimestamp), info.KubeletVersion,
		nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
		or(info.OSImage, "<unknown>"), kernel, or(info.ContainerRuntimeVersion, "<unknown>")}
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}
