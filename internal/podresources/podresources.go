// Package podresources sums a pod's resource requests and limits the way Kubernetes does
// (k8s.io/component-helpers/resource), for the scheduler's fit and the node's pod cgroups:
// app containers and sidecars (init containers with restartPolicy Always) add up, each other
// init container counts with the sidecars started before it, and the pod needs the larger of
// the two; pod-level resources (spec.resources) replace the containers' sum for cpu, memory
// and hugepages; spec.overhead is added.
package podresources

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Requests is what pod asks for in all: the amount the scheduler reserves on a node.
func Requests(pod *corev1.Pod) corev1.ResourceList {
	reqs := aggregate(pod, func(c *corev1.Container) corev1.ResourceList { return c.Resources.Requests })
	if r := pod.Spec.Resources; r != nil {
		for name, q := range r.Requests {
			if podLevel(name) {
				reqs[name] = q.DeepCopy()
			}
		}
	}
	add(reqs, pod.Spec.Overhead)
	return reqs
}

// Limits is the most pod may use in all, and for cpu and memory whether every container
// (or the pod itself) sets a limit: only then does the pod as a whole have one, since a
// container without a limit may use anything.
func Limits(pod *corev1.Pod) (limits corev1.ResourceList, cpuLimited, memoryLimited bool) {
	cpuLimited, memoryLimited = true, true
	limits = aggregate(pod, func(c *corev1.Container) corev1.ResourceList {
		if c.Resources.Limits.Cpu().IsZero() {
			cpuLimited = false
		}
		if c.Resources.Limits.Memory().IsZero() {
			memoryLimited = false
		}
		return c.Resources.Limits
	})
	if r := pod.Spec.Resources; r != nil {
		for name, q := range r.Limits {
			if podLevel(name) {
				limits[name] = q.DeepCopy()
			}
		}
		cpuLimited = cpuLimited || !r.Limits.Cpu().IsZero()
		memoryLimited = memoryLimited || !r.Limits.Memory().IsZero()
	}
	// Overhead raises only limits that are set: no limit stays no limit.
	for name, q := range pod.Spec.Overhead {
		if v, ok := limits[name]; ok && !v.IsZero() {
			v.Add(q)
			limits[name] = v
		}
	}
	return limits, cpuLimited, memoryLimited
}

// aggregate combines one list per container (of) over the pod's containers.
func aggregate(pod *corev1.Pod, of func(*corev1.Container) corev1.ResourceList) corev1.ResourceList {
	total := corev1.ResourceList{}
	for i := range pod.Spec.Containers {
		add(total, of(&pod.Spec.Containers[i]))
	}
	sidecars := corev1.ResourceList{} // the sidecars started so far
	initPeak := corev1.ResourceList{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		own := of(c)
		var during corev1.ResourceList // what the pod uses while c starts or runs
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(total, own)
			add(sidecars, own)
			during = sidecars
		} else {
			during = corev1.ResourceList{}
			add(during, own)
			add(during, sidecars)
		}
		raise(initPeak, during)
	}
	raise(total, initPeak)
	return total
}

func podLevel(name corev1.ResourceName) bool {
	return name == corev1.ResourceCPU || name == corev1.ResourceMemory || strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix)
}

// add adds b into a.
func add(a, b corev1.ResourceList) {
	for name, q := range b {
		if v, ok := a[name]; ok {
			v.Add(q)
			a[name] = v
		} else {
			a[name] = q.DeepCopy()
		}
	}
}

// raise sets each of a's amounts to b's where b's is larger.
func raise(a, b corev1.ResourceList) {
	for name, q := range b {
		if v, ok := a[name]; !ok || q.Cmp(v) > 0 {
			a[name] = q.DeepCopy()
		}
	}
}
