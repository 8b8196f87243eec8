package registry

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var pods = &Def[*corev1.Pod]{
	Info: Info{GroupVersion: coreV1, Resource: "pods", Singular: "pod", Kind: "Pod", ShortNames: []string{"po"},
		Categories: []string{"all"}, Namespaced: true, Status: true, Binding: true},
	NewList:  func() runtime.Object { return &corev1.PodList{} },
	Defaults: defaultPod,
	Create:   admitPod,
	Admit: func(ctx context.Context, objs Objects, p, old *corev1.Pod) error {
		if old == nil {
			addDefaultTolerations(p)
		}
		if err := admitPodPriority(ctx, objs, p, old); err != nil {
			return err
		}
		return admitPodLimitRanges(ctx, objs, p, old)
	},
	Validate:       func(p *corev1.Pod) field.ErrorList { return validatePodSpec(&p.Spec, field.NewPath("spec")) },
	ValidateUpdate: validatePodUpdate,
	Fields:         podFields,
	Columns: columns(
		Column("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
		Column("Status", "string", 0, "The aggregate status of the containers in this pod."),
		Column("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
		AgeColumn,
		Column("IP", "string", 1, "IP address allocated to the pod."),
		Column("Node", "string", 1, "Name of the node the pod is bound to."),
		Column("Nominated Node", "string", 1, "Name of the node the scheduler nominated for preemption."),
		Column("Readiness Gates", "string", 1, "Pod conditions evaluated for pod readiness."),
	),
	Row: podRow,
}

// defaultPod applies the pod-only defaults on top of the PodSpec ones.
func defaultPod(p *corev1.Pod) {
	defaultPodSpec(&p.Spec)
	// As Kubernetes' API server does, the singular and plural IP fields agree whichever one a
	// client wrote, so old clients (podIP only) and readers of podIPs see the same pod.
	st := &p.Status
	if st.PodIP != "" && len(st.PodIPs) == 0 {
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	} else if st.PodIP == "" && len(st.PodIPs) > 0 {
		st.PodIP = st.PodIPs[0].IP
	}
	if st.HostIP != "" && len(st.HostIPs) == 0 {
		st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	} else if st.HostIP == "" && len(st.HostIPs) > 0 {
		st.HostIP = st.HostIPs[0].IP
	}
	if p.Spec.EnableServiceLinks == nil {
		p.Spec.EnableServiceLinks = new(corev1.DefaultEnableServiceLinks)
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			// A limit without a request is also the request.
			for name, limit := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[name]; !ok {
					if c.Resources.Requests == nil {
						c.Resources.Requests = corev1.ResourceList{}
					}
					c.Resources.Requests[name] = limit.DeepCopy()
				}
			}
			if p.Spec.HostNetwork {
				for j := range c.Ports {
					c.Ports[j].HostPort = or(c.Ports[j].HostPort, c.Ports[j].ContainerPort)
				}
			}
		}
	}
}

// admitPod prepares a new pod: its initial status, and the default service account (the
// ServiceAccount admission plugin, which reads the account, runs before, in package
// serviceaccount; the default here only serves objects made without it). The other admission
// plugins are the pods' Admit: DefaultTolerationSeconds, Priority, LimitRanger.
func admitPod(p *corev1.Pod) {
	if p.Spec.ServiceAccountName == "" {
		p.Spec.ServiceAccountName, p.Spec.DeprecatedServiceAccount = "default", "default"
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: qosClass(&p.Spec)}
}

// addDefaultTolerations is Kubernetes' DefaultTolerationSeconds admission: pods ride out a
// short node outage (five minutes not ready or unreachable) before they are evicted.
func addDefaultTolerations(p *corev1.Pod) {
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		tolerated := slices.ContainsFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool {
			return (t.Key == key || t.Key == "" && t.Operator == corev1.TolerationOpExists) &&
				(t.Effect == corev1.TaintEffectNoExecute || t.Effect == "")
		})
		if !tolerated {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))})
		}
	}
}

// qosClass classifies a pod by its cpu and memory requests and limits (requests already default to limits).
func qosClass(s *corev1.PodSpec) corev1.PodQOSClass {
	some, guaranteed := false, true
	for _, cs := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for _, c := range cs {
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, limit := c.Resources.Requests[r], c.Resources.Limits[r]
				some = some || !req.IsZero() || !limit.IsZero()
				guaranteed = guaranteed && !limit.IsZero() && req.Cmp(limit) == 0
			}
		}
	}
	switch {
	case !some:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// validatePodUpdate allows only the spec changes a running pod can take. It rebuilds the old spec
// with those changes from the new one; anything still different is a forbidden change.
func validatePodUpdate(p, old *corev1.Pod) field.ErrorList {
	allowed := old.Spec.DeepCopy()
	copyImages := func(dst, src []corev1.Container) {
		if len(dst) == len(src) {
			for i := range dst {
				dst[i].Image = src[i].Image
			}
		}
	}
	copyImages(allowed.Containers, p.Spec.Containers)
	copyImages(allowed.InitContainers, p.Spec.InitContainers)
	if d, od := p.Spec.ActiveDeadlineSeconds, old.Spec.ActiveDeadlineSeconds; d != nil && (od == nil || *d <= *od) {
		allowed.ActiveDeadlineSeconds = d
	}
	if containsAll(p.Spec.Tolerations, old.Spec.Tolerations) {
		allowed.Tolerations = p.Spec.Tolerations
	}
	if containsAll(old.Spec.SchedulingGates, p.Spec.SchedulingGates) {
		allowed.SchedulingGates = p.Spec.SchedulingGates // gates may only be removed
	}
	if apiequality.Semantic.DeepEqual(allowed, &p.Spec) {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec"), "pod updates may not change fields other than "+
		"`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"+
		"`spec.tolerations` (only additions to existing tolerations),`spec.schedulingGates` (only removals)")}
}

// containsAll reports whether every element of sub is in all.
func containsAll[T any](all, sub []T) bool {
	for _, s := range sub {
		if !slices.ContainsFunc(all, func(a T) bool { return apiequality.Semantic.DeepEqual(a, s) }) {
			return false
		}
	}
	return true
}

func podFields(p *corev1.Pod) fields.Set {
	return fields.Set{
		"spec.nodeName":            p.Spec.NodeName,
		"spec.restartPolicy":       string(p.Spec.RestartPolicy),
		"spec.schedulerName":       p.Spec.SchedulerName,
		"spec.serviceAccountName":  p.Spec.ServiceAccountName,
		"spec.hostNetwork":         strconv.FormatBool(p.Spec.HostNetwork),
		"status.phase":             string(p.Status.Phase),
		"status.podIP":             podIP(p),
		"status.nominatedNodeName": p.Status.NominatedNodeName,
	}
}

func podIP(p *corev1.Pod) string {
	if len(p.Status.PodIPs) > 0 {
		return p.Status.PodIPs[0].IP
	}
	return p.Status.PodIP
}

// podRow renders a pod as kubectl get pods does: the STATUS column shows the most telling
// container state (an init step, a waiting or terminated reason) rather than just the phase.
func podRow(p *corev1.Pod) []any {
	total := len(p.Spec.Containers)
	sidecars := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
			total++
		}
	}
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}

	ready, restarts, sidecarRestarts := 0, 0, 0
	var last, sidecarLast metav1.Time
	later := func(t *metav1.Time, cs corev1.ContainerStatus) {
		if term := cs.LastTerminationState.Terminated; term != nil && t.Before(&term.FinishedAt) {
			*t = term.FinishedAt
		}
	}
	initializing := false
	for i, cs := range p.Status.InitContainerStatuses {
		restarts += int(cs.RestartCount)
		later(&last, cs)
		if sidecars[cs.Name] {
			sidecarRestarts += int(cs.RestartCount)
			later(&sidecarLast, cs)
		}
		switch term, wait := cs.State.Terminated, cs.State.Waiting; {
		case term != nil && term.ExitCode == 0:
			continue
		case sidecars[cs.Name] && cs.Started != nil && *cs.Started:
			if cs.Ready {
				ready++
			}
			continue
		case term != nil:
			reason = "Init:" + terminatedReason(term)
		case wait != nil && wait.Reason != "" && wait.Reason != "PodInitializing":
			reason = "Init:" + wait.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
		initializing = true
		break
	}

	if !initializing || podCondition(p, corev1.PodInitialized) {
		restarts, last = sidecarRestarts, sidecarLast
		running, errorReason := false, ""
		for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
			cs := p.Status.ContainerStatuses[i]
			restarts += int(cs.RestartCount)
			later(&last, cs)
			switch {
			case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
				reason = cs.State.Waiting.Reason
			case cs.State.Terminated != nil:
				reason = terminatedReason(cs.State.Terminated)
				if cs.State.Terminated.ExitCode != 0 {
					errorReason = reason
				}
			case cs.Ready && cs.State.Running != nil:
				running = true
				ready++
			}
		}
		// A completed container next to running ones does not make the pod Completed.
		if reason == "Completed" {
			switch {
			case running && podCondition(p, corev1.PodReady):
				reason = "Running"
			case errorReason != "":
				reason = errorReason
			case running:
				reason = "NotReady"
			}
		}
	}

	if p.DeletionTimestamp != nil {
		if p.Status.Reason == "NodeLost" {
			reason = "Unknown"
		} else if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			reason = "Terminating"
		}
	}

	restartCell := strconv.Itoa(restarts)
	if restarts != 0 && !last.IsZero() {
		restartCell = fmt.Sprintf("%d (%s ago)", restarts, Age(last))
	}
	gates := "<none>"
	if n := len(p.Spec.ReadinessGates); n > 0 {
		ok := 0
		for _, g := range p.Spec.ReadinessGates {
			if podCondition(p, g.ConditionType) {
				ok++
			}
		}
		gates = fmt.Sprintf("%d/%d", ok, n)
	}
	return []any{fmt.Sprintf("%d/%d", ready, total), reason, restartCell, Age(p.CreationTimestamp),
		none(podIP(p)), none(p.Spec.NodeName), none(p.Status.NominatedNodeName), gates}
}

func terminatedReason(t *corev1.ContainerStateTerminated) string {
	switch {
	case t.Reason != "":
		return t.Reason
	case t.Signal != 0:
		return fmt.Sprintf("Signal:%d", t.Signal)
	}
	return fmt.Sprintf("ExitCode:%d", t.ExitCode)
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// none is kubectl's placeholder for an empty cell.
func none(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// joinOrNone joins a list of cells, "<none>" when empty.
func joinOrNone(s []string) string { return none(strings.Join(s, ",")) }
