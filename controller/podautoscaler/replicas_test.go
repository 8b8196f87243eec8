package podautoscaler

import (
	"errors"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// now is the fixed clock of the pure tests.
var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// settled is how the pure tests see pods: the controller's default periods at now.
var settled = readiness{now: now, cpuInitialization: 5 * time.Minute, readinessDelay: 30 * time.Second}

// testPod is a running pod requesting request of CPU and memory, started and ready ten
// minutes ago, changed by edits.
func testPod(name, request string, edits ...func(*corev1.Pod)) *corev1.Pod {
	long := metav1.NewTime(now.Add(-10 * time.Minute))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(request), corev1.ResourceMemory: resource.MustParse(request)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &long,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: long}}},
	}
	for _, e := range edits {
		e(p)
	}
	return p
}

func pending(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }
func failed(p *corev1.Pod)  { p.Status.Phase = corev1.PodFailed }
func deleting(p *corev1.Pod) {
	t := metav1.NewTime(now)
	p.DeletionTimestamp = &t
}

// startedAgo starts the pod d ago; it became ready (or not: status) readyAgo ago.
func startedAgo(d, readyAgo time.Duration, status corev1.ConditionStatus) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		start := metav1.NewTime(now.Add(-d))
		p.Status.StartTime = &start
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-readyAgo))}}
	}
}

// usage is a set of measurements taken now over the last 15 s, in milli-units.
func usage(values map[string]int64) podMetrics {
	out := podMetrics{}
	for name, v := range values {
		out[name] = podMetric{value: v, timestamp: now, window: 15 * time.Second}
	}
	return out
}

var defaultTolerance = tolerances{down: 0.1, up: 0.1}

func TestUtilizationReplicas(t *testing.T) {
	three := func(edits ...func(*corev1.Pod)) []*corev1.Pod {
		return []*corev1.Pod{testPod("a", "100m"), testPod("b", "100m"), testPod("c", "100m", edits...)}
	}
	for _, tc := range []struct {
		name        string
		current     int32
		target      int32
		pods        []*corev1.Pod
		usage       map[string]int64
		resource    corev1.ResourceName
		tol         tolerances
		want        int32
		utilization int32
		average     int64
		err         error
	}{
		{name: "on target", current: 3, target: 50, pods: three(), usage: map[string]int64{"a": 50, "b": 50, "c": 50}, want: 3, utilization: 50, average: 50},
		{name: "within tolerance", current: 3, target: 50, pods: three(), usage: map[string]int64{"a": 55, "b": 55, "c": 55}, want: 3, utilization: 55, average: 55},
		{name: "tolerance of the behavior", current: 3, target: 50, pods: three(), usage: map[string]int64{"a": 55, "b": 55, "c": 55},
			tol: tolerances{down: 0.1, up: 0.05}, want: 4, utilization: 55, average: 55},
		{name: "up", current: 3, target: 50, pods: three(), usage: map[string]int64{"a": 100, "b": 100, "c": 100}, want: 6, utilization: 100, average: 100},
		{name: "down", current: 3, target: 50, pods: three(), usage: map[string]int64{"a": 10, "b": 10, "c": 10}, want: 1, utilization: 10, average: 10},
		{name: "just below tolerance", current: 3, target: 50, pods: three(), usage: map[string]int64{"a": 44, "b": 44, "c": 44}, want: 3, utilization: 44, average: 44},
		{name: "target above 100%", current: 3, target: 200, pods: three(), usage: map[string]int64{"a": 400, "b": 400, "c": 400}, want: 6, utilization: 400, average: 400},
		// Up with a pod missing: the missing pod counts as idle, which damps the rise
		// (2 pods at 100% would ask for 4 alone; with an idle third, 66% over 3 pods).
		{name: "missing on the way up", current: 3, target: 50, pods: three(), usage: map[string]int64{"a": 100, "b": 100}, want: 4, utilization: 100, average: 100},
		// Down with a pod missing: it counts as using its whole request.
		{name: "missing on the way down", current: 4, target: 50,
			pods: append(three(), testPod("d", "100m")), usage: map[string]int64{"a": 10, "b": 10, "c": 10}, want: 3, utilization: 10, average: 10},
		{name: "missing, beyond the target above 100%", current: 4, target: 150,
			pods: append(three(), testPod("d", "100m")), usage: map[string]int64{"a": 10, "b": 10, "c": 10}, want: 2, utilization: 10, average: 10},
		// The missing pods' assumed idleness turns the rise into a fall: stay.
		{name: "missing turns the direction", current: 4, target: 50,
			pods: append(three(), testPod("d", "100m")), usage: map[string]int64{"a": 60}, want: 4, utilization: 60, average: 60},
		{name: "unready on the way up", current: 3, target: 50, pods: three(pending), usage: map[string]int64{"a": 100, "b": 100, "c": 900}, want: 4, utilization: 100, average: 100},
		{name: "unready left out on the way down", current: 3, target: 50, pods: three(pending), usage: map[string]int64{"a": 10, "b": 10, "c": 900}, want: 1, utilization: 10, average: 10},
		{name: "deleted and failed pods left out", current: 3, target: 50,
			pods: append(three(deleting), testPod("d", "100m", failed)), usage: map[string]int64{"a": 100, "b": 100, "c": 900, "d": 900}, want: 4, utilization: 100, average: 100},
		// CPU of a pod that became ready within the window of its sample: start-up work.
		{name: "sampled before ready", current: 3, target: 50, pods: three(startedAgo(time.Minute, 10*time.Second, corev1.ConditionTrue)),
			usage: map[string]int64{"a": 50, "b": 50, "c": 900}, want: 3, utilization: 50, average: 50},
		{name: "young and ready long enough", current: 3, target: 50, pods: three(startedAgo(time.Minute, 50*time.Second, corev1.ConditionTrue)),
			usage: map[string]int64{"a": 50, "b": 50, "c": 200}, want: 6, utilization: 100, average: 100},
		{name: "young and not ready", current: 3, target: 50, pods: three(startedAgo(time.Minute, 50*time.Second, corev1.ConditionFalse)),
			usage: map[string]int64{"a": 50, "b": 50, "c": 900}, want: 3, utilization: 50, average: 50},
		// Past its CPU initialization: not ready and never ready since its start is unready;
		// not ready after having been ready counts.
		{name: "never ready", current: 3, target: 50, pods: three(startedAgo(10*time.Minute, 10*time.Minute-10*time.Second, corev1.ConditionFalse)),
			usage: map[string]int64{"a": 50, "b": 50, "c": 900}, want: 3, utilization: 50, average: 50},
		{name: "no longer ready", current: 3, target: 50, pods: three(startedAgo(10*time.Minute, time.Minute, corev1.ConditionFalse)),
			usage: map[string]int64{"a": 50, "b": 50, "c": 200}, want: 6, utilization: 100, average: 100},
		// Memory samples are not held to the CPU start-up rules.
		{name: "memory of a young pod", current: 3, target: 50, resource: corev1.ResourceMemory, pods: three(startedAgo(time.Minute, 10*time.Second, corev1.ConditionTrue)),
			usage: map[string]int64{"a": 50, "b": 50, "c": 200}, want: 6, utilization: 100, average: 100},
		{name: "no pods", current: 3, target: 50, usage: map[string]int64{"a": 1}, err: errNoPods},
		{name: "no ready pod measured", current: 3, target: 50, pods: three(pending)[2:], usage: map[string]int64{"c": 50}, err: errNoMetrics},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.resource
			if res == "" {
				res = corev1.ResourceCPU
			}
			tol := tc.tol
			if tol == (tolerances{}) {
				tol = defaultTolerance
			}
			got, util, avg, err := utilizationReplicas(tc.current, tc.target, tc.pods, usage(tc.usage), res, "", tol, settled)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if got != tc.want || util != tc.utilization || avg != tc.average {
				t.Errorf("replicas %d, utilization %d%%, average %dm; want %d, %d%%, %dm", got, util, avg, tc.want, tc.utilization, tc.average)
			}
		})
	}

	noRequest := testPod("x", "100m", func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side"}) })
	if _, _, _, err := utilizationReplicas(1, 50, []*corev1.Pod{noRequest}, usage(map[string]int64{"x": 1}), corev1.ResourceCPU, "", defaultTolerance, settled); err == nil ||
		err.Error() != "missing request for cpu in container side of Pod x" {
		t.Errorf("a container without a request: %v", err)
	}
}

func TestAverageValueReplicas(t *testing.T) {
	pods := []*corev1.Pod{testPod("a", "1"), testPod("b", "1"), testPod("c", "1")}
	for _, tc := range []struct {
		name    string
		current int32
		usage   map[string]int64
		want    int32
		average int64
	}{
		{"on target", 3, map[string]int64{"a": 100, "b": 100, "c": 100}, 3, 100},
		{"up", 3, map[string]int64{"a": 300, "b": 300, "c": 300}, 9, 300},
		{"down", 3, map[string]int64{"a": 20, "b": 20, "c": 20}, 1, 20},
		// A pod missing on the way down counts as using exactly the target.
		{"missing on the way down", 3, map[string]int64{"a": 20, "b": 20}, 2, 20},
		{"missing on the way up", 3, map[string]int64{"a": 300, "b": 300}, 6, 300},
	} {
		got, avg, err := averageValueReplicas(tc.current, 100, pods, usage(tc.usage), corev1.ResourceMemory, defaultTolerance, settled)
		if err != nil || got != tc.want || avg != tc.average {
			t.Errorf("%s: %d, average %d, %v; want %d, %d", tc.name, got, avg, err, tc.want, tc.average)
		}
	}
}

func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	withSidecar := testPod("s", "100m", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{
			{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}},
			{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}},
		}
	})
	podLevel := testPod("p", "100m", func(p *corev1.Pod) {
		p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300m")}}
	})
	got, err := podRequests([]*corev1.Pod{withSidecar, podLevel}, "", corev1.ResourceCPU)
	if want := map[string]int64{"s": 150, "p": 300}; err != nil || !maps.Equal(got, want) {
		t.Errorf("requests %v, %v; want %v", got, err, want)
	}
	// A pod-level request covers what it names; memory still comes from the containers.
	if got, err := podRequests([]*corev1.Pod{podLevel}, "", corev1.ResourceMemory); err != nil || got["p"] != 100 {
		t.Errorf("memory of a pod with only a pod-level cpu request: %v, %v", got, err)
	}
	// A named container's own request, even when the pod has a pod-level one.
	if got, err := podRequests([]*corev1.Pod{podLevel, withSidecar}, "app", corev1.ResourceCPU); err != nil || got["p"] != 100 || got["s"] != 100 {
		t.Errorf("container app: %v, %v", got, err)
	}
	if _, err := podRequests([]*corev1.Pod{podLevel}, "nope", corev1.ResourceCPU); err == nil || err.Error() != "container nope not found in Pod p" {
		t.Errorf("unknown container: %v", err)
	}
}

func TestResourceUsage(t *testing.T) {
	q := resource.MustParse
	items := []metricsv1beta1.PodMetrics{
		{ObjectMeta: metav1.ObjectMeta{Name: "two"}, Timestamp: metav1.NewTime(now), Window: metav1.Duration{Duration: 15 * time.Second},
			Containers: []metricsv1beta1.ContainerMetrics{
				{Name: "app", Usage: corev1.ResourceList{corev1.ResourceCPU: q("120m"), corev1.ResourceMemory: q("10Mi")}},
				{Name: "side", Usage: corev1.ResourceList{corev1.ResourceCPU: q("30m")}},
			}},
		{ObjectMeta: metav1.ObjectMeta{Name: "none"}},
	}
	cpu := resourceUsage(items, corev1.ResourceCPU, "")
	if len(cpu) != 1 || cpu["two"].value != 150 || !cpu["two"].timestamp.Equal(now) || cpu["two"].window != 15*time.Second {
		t.Errorf("cpu %+v", cpu)
	}
	// A container without memory figures: the pod has none (it is missing).
	if mem := resourceUsage(items, corev1.ResourceMemory, ""); len(mem) != 0 {
		t.Errorf("memory %+v", mem)
	}
	if mem := resourceUsage(items, corev1.ResourceMemory, "app"); mem["two"].value != 10*1024*1024*1000 {
		t.Errorf("memory of container app %+v", mem)
	}
	if side := resourceUsage(items, corev1.ResourceCPU, "nope"); len(side) != 0 {
		t.Errorf("unknown container %+v", side)
	}
}
