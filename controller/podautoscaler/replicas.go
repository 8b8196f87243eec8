package podautoscaler

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The replica count one metric asks for. Each pod's usage is weighed against a target: its
// share of the pods' summed requests (a Utilization target) or a quantity per pod (an
// AverageValue target); the usage-to-target ratio times the pods measured is the proposal.
// Pods are told apart first: deleted and failed pods do not count; pending pods, and for CPU
// pods not yet ready or measured over a window from before they became ready, are "unready";
// pods the metrics do not mention are "missing". When any are unready or missing, their usage
// is assumed so that it never pushes the decision further: on a scale up, unready and missing
// pods count as using nothing; on a scale down, missing pods count as using all of their
// request (or exactly the target, for an AverageValue target); a ratio that then turns to
// the other side of 1, or falls within the tolerance, keeps the current count.

// podMetric is one pod's usage of a resource (milli-units), measured at timestamp over window.
type podMetric struct {
	value     int64
	timestamp time.Time
	window    time.Duration
}

// podMetrics are the measured pods' usage, by pod name.
type podMetrics map[string]podMetric

// tolerances bound the usage ratios treated as "on target": 1-down to 1+up.
type tolerances struct{ down, up float64 }

func (t tolerances) within(ratio float64) bool { return 1-t.down <= ratio && ratio <= 1+t.up }

// readiness is what tells a pod's CPU samples apart: the time now, how long after a pod's start
// its CPU use may still be its start-up's (--horizontal-pod-autoscaler-cpu-initialization-period),
// and how long after its start a readiness change counts as its first
// (--horizontal-pod-autoscaler-initial-readiness-delay).
type readiness struct {
	now               time.Time
	cpuInitialization time.Duration
	readinessDelay    time.Duration
}

var (
	errNoPods    = errors.New("no pods returned by selector while calculating replica count")
	errNoMetrics = errors.New("did not receive metrics for targeted pods (pods might be unready)")
)

// podGroups sorts pods for one resource's metrics.
type podGroups struct {
	ready                     int
	unready, missing, ignored map[string]bool
}

func groupPods(pods []*corev1.Pod, metrics podMetrics, resource corev1.ResourceName, r readiness) podGroups {
	g := podGroups{unready: map[string]bool{}, missing: map[string]bool{}, ignored: map[string]bool{}}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed {
			g.ignored[p.Name] = true
			continue
		}
		if p.Status.Phase == corev1.PodPending {
			g.unready[p.Name] = true
			continue
		}
		m, ok := metrics[p.Name]
		if !ok {
			g.missing[p.Name] = true
			continue
		}
		if resource == corev1.ResourceCPU && cpuUnready(p, m, r) {
			g.unready[p.Name] = true
			continue
		}
		g.ready++
	}
	return g
}

// cpuUnready reports whether a pod's CPU sample should be left out: the pod is not ready (or
// has not started); or it is still within its CPU initialization period and either not ready
// or measured over a window that began before it became ready (start-up work would count as
// load); or, past that period, it has never been ready since its start (its readiness
// changed within the initial readiness delay and it is not ready now).
func cpuUnready(p *corev1.Pod, m podMetric, r readiness) bool {
	cond := podReadyCondition(p)
	if cond == nil || p.Status.StartTime == nil {
		return true
	}
	start := p.Status.StartTime.Time
	if start.Add(r.cpuInitialization).After(r.now) {
		return cond.Status == corev1.ConditionFalse || m.timestamp.Before(cond.LastTransitionTime.Add(m.window))
	}
	return cond.Status == corev1.ConditionFalse && start.Add(r.readinessDelay).After(cond.LastTransitionTime.Time)
}

func podReadyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// measured returns the metrics of the ready pods only.
func measured(metrics podMetrics, g podGroups) podMetrics {
	out := make(podMetrics, len(metrics))
	for name, m := range metrics {
		if !g.ignored[name] && !g.unready[name] {
			out[name] = m
		}
	}
	return out
}

// utilizationReplicas is the proposal of a Utilization target (a percentage of the pods'
// requests): the count, the pods' utilization in percent and their average usage.
func utilizationReplicas(current, target int32, pods []*corev1.Pod, all podMetrics, resource corev1.ResourceName, container string,
	tol tolerances, r readiness) (replicas, utilization int32, average int64, err error) {
	if len(pods) == 0 {
		return 0, 0, 0, errNoPods
	}
	g := groupPods(pods, all, resource, r)
	metrics := measured(all, g)
	if len(metrics) == 0 {
		return 0, 0, 0, errNoMetrics
	}
	requests, err := podRequests(pods, container, resource)
	if err != nil {
		return 0, 0, 0, err
	}
	ratio, utilization, average, err := utilizationRatio(metrics, requests, target)
	if err != nil {
		return 0, 0, 0, err
	}
	// A missing pod on a scale down uses all it asked for, or the target when that is more.
	full := func(pod string) int64 { return requests[pod] * int64(max(100, target)) / 100 }
	again := func(m podMetrics) (float64, error) {
		r, _, _, err := utilizationRatio(m, requests, target)
		return r, err
	}
	replicas, err = proposal(current, ratio, g, metrics, full, again, tol)
	return replicas, utilization, average, err
}

// averageValueReplicas is the proposal of an AverageValue target (milli-units per pod): the
// count and the pods' average usage.
func averageValueReplicas(current int32, target int64, pods []*corev1.Pod, all podMetrics, resource corev1.ResourceName,
	tol tolerances, r readiness) (replicas int32, average int64, err error) {
	if len(pods) == 0 {
		return 0, 0, errNoPods
	}
	g := groupPods(pods, all, resource, r)
	metrics := measured(all, g)
	if len(metrics) == 0 {
		return 0, 0, errNoMetrics
	}
	ratio, average := usageRatio(metrics, target)
	atTarget := func(string) int64 { return target }
	again := func(m podMetrics) (float64, error) {
		r, _ := usageRatio(m, target)
		return r, nil
	}
	replicas, err = proposal(current, ratio, g, metrics, atTarget, again, tol)
	return replicas, average, err
}

// proposal turns the ratio of the ready pods into a count, accounting for the unready and
// missing pods as the package comment says. fallback is a missing pod's assumed usage on a
// scale down; ratioOf recomputes the ratio with the assumed usages added to metrics.
func proposal(current int32, ratio float64, g podGroups, metrics podMetrics, fallback func(pod string) int64,
	ratioOf func(podMetrics) (float64, error), tol tolerances) (int32, error) {
	upWithUnready := len(g.unready) > 0 && ratio > 1
	if !upWithUnready && len(g.missing) == 0 {
		if tol.within(ratio) {
			return current, nil
		}
		return ceil32(ratio * float64(g.ready)), nil
	}
	for pod := range g.missing {
		switch {
		case ratio < 1:
			metrics[pod] = podMetric{value: fallback(pod)}
		case ratio > 1:
			metrics[pod] = podMetric{}
		}
	}
	if upWithUnready {
		for pod := range g.unready {
			metrics[pod] = podMetric{}
		}
	}
	next, err := ratioOf(metrics)
	if err != nil {
		return 0, err
	}
	// Too small a change, or one the assumptions turned around: stay.
	if tol.within(next) || (ratio < 1 && next > 1) || (ratio > 1 && next < 1) {
		return current, nil
	}
	n := ceil32(next * float64(len(metrics)))
	if (next < 1 && n > current) || (next > 1 && n < current) {
		return current, nil
	}
	return n, nil
}

func ceil32(f float64) int32 {
	if f >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(math.Ceil(f))
}

// utilizationRatio is the measured pods' summed usage over their summed requests, in percent
// (truncated, as Kubernetes reports it), against target percent; with the pods' average usage.
// Metrics of pods without a request (not in requests) are left out.
func utilizationRatio(metrics podMetrics, requests map[string]int64, target int32) (ratio float64, utilization int32, average int64, err error) {
	var used, requested int64
	n := 0
	for pod, m := range metrics {
		req, ok := requests[pod]
		if !ok {
			continue
		}
		used += m.value
		requested += req
		n++
	}
	if requested == 0 {
		return 0, 0, 0, errors.New("no metrics returned matched known pods")
	}
	utilization = int32(used * 100 / requested)
	return float64(utilization) / float64(target), utilization, used / int64(n), nil
}

// usageRatio is the measured pods' average usage against target (milli-units), with that
// average.
func usageRatio(metrics podMetrics, target int64) (ratio float64, average int64) {
	var sum int64
	for _, m := range metrics {
		sum += m.value
	}
	average = sum / int64(len(metrics))
	return float64(average) / float64(target), average
}

// podRequests is each pod's request of resource in milli-units: that of container when one is
// named; else the pod-level request of it, when the pod has pod-level requests; else the sum
// over its containers and its sidecars (restartable init containers). A container without a
// request of it is an error: utilization cannot be computed.
func podRequests(pods []*corev1.Pod, container string, resource corev1.ResourceName) (map[string]int64, error) {
	out := make(map[string]int64, len(pods))
	for _, p := range pods {
		if container == "" && podLevelRequests(p) {
			if q, ok := p.Spec.Resources.Requests[resource]; ok {
				out[p.Name] = q.MilliValue()
				continue
			}
		}
		containers := p.Spec.Containers
		for _, c := range p.Spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				containers = append(containers[:len(containers):len(containers)], c)
			}
		}
		var sum int64
		found := false
		for _, c := range containers {
			if container != "" && c.Name != container {
				continue
			}
			q, ok := c.Resources.Requests[resource]
			if !ok {
				return nil, fmt.Errorf("missing request for %s in container %s of Pod %s", resource, c.Name, p.Name)
			}
			sum += q.MilliValue()
			found = true
		}
		if container != "" && !found {
			return nil, fmt.Errorf("container %s not found in Pod %s", container, p.Name)
		}
		out[p.Name] = sum
	}
	return out, nil
}

// podLevelRequests reports whether the pod requests for itself as a whole a resource pods may
// request so (PodLevelResources, on by default in v1.36: cpu, memory, huge pages).
func podLevelRequests(p *corev1.Pod) bool {
	if p.Spec.Resources == nil {
		return false
	}
	for name := range p.Spec.Resources.Requests {
		if name == corev1.ResourceCPU || name == corev1.ResourceMemory || strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			return true
		}
	}
	return false
}
