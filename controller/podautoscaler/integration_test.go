package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// These tests run the controller against the real apiserver. Neither node agents nor the
// Deployment controller run: each test makes the pods a Deployment would have, plays the node
// (their Running, Ready status) and stands in for the metrics API (fakeMetrics), which
// measures what node agents measure.

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

// fakeMetrics answers as metrics.k8s.io would: the pods' CPU usage the test sets, for those of
// the selected pods it has a figure for; err makes every read fail.
type fakeMetrics struct {
	mu    sync.Mutex
	cpu   map[string]int64 // pod name → milli-cores
	err   error
	reads int
}

func (f *fakeMetrics) set(cpu map[string]int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cpu, f.err = cpu, err
}

func (f *fakeMetrics) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeMetrics) PodMetrics(ctx context.Context, ns string, sel labels.Selector) ([]metricsv1beta1.PodMetrics, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.err != nil {
		return nil, f.err
	}
	pods, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []metricsv1beta1.PodMetrics
	for _, p := range pods.Items {
		if v, ok := f.cpu[p.Name]; ok {
			out = append(out, metricsv1beta1.PodMetrics{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns, Labels: p.Labels},
				Timestamp: metav1.NewTime(time.Now()), Window: metav1.Duration{Duration: 15 * time.Second},
				Containers: []metricsv1beta1.ContainerMetrics{{Name: "app", Usage: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(v, resource.DecimalSI)}}}})
		}
	}
	return out, nil
}

// fakeClock is the controller's clock: stabilization windows pass when the test says.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (k *fakeClock) Now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now
}

func (k *fakeClock) Add(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.now = k.now.Add(d)
}

// start runs a controller watching only ns, syncing every 50 ms, on a fake clock and metrics.
func start(t *testing.T, ns string) (*fakeMetrics, *fakeClock) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx.Informers = cache.NewFactory(c, ns)
	o := DefaultOptions()
	o.SyncPeriod = 50 * time.Millisecond
	built, err := Entry.New(cctx, o) // built as the manager builds it
	if err != nil {
		t.Fatal(err)
	}
	ctrl := built.(*Controller)
	m, clk := &fakeMetrics{}, &fakeClock{now: time.Now()}
	ctrl.metrics, ctrl.now = m, clk.Now
	testserver.RunControllers(t, cctx, ctrl)
	return m, clk
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, what, 30*time.Second, cond)
}

// deployment makes Deployment name with replicas and the pods it would have (ready, running
// for ten minutes, requesting 100m of CPU each), named name-0, name-1, ...
func deployment(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec()},
	}}
	if _, err := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns).Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	for i := range replicas {
		runningPod(t, ns, fmt.Sprintf("%s-%d", name, i), labels)
	}
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "sh", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}
}

// runningPod makes a pod and writes the status its node would: running and ready for ten minutes.
func runningPod(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	p, err := pods.Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: podSpec()})
	if err != nil {
		t.Fatal(err)
	}
	since := metav1.NewTime(time.Now().Add(-10 * time.Minute))
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &since,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: since}}}
	if _, err := pods.UpdateStatus(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func cpuHPA(ns, name, target string, maxReplicas int32, edit func(*autoscalingv2.HorizontalPodAutoscaler)) *autoscalingv2.HorizontalPodAutoscaler {
	h := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
		MaxReplicas:    maxReplicas,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
			Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(int32(50))}}}},
	}}
	if edit != nil {
		edit(h)
	}
	return h
}

func hpas(ns string) *client.Typed[*autoscalingv2.HorizontalPodAutoscaler] {
	return client.Resource[*autoscalingv2.HorizontalPodAutoscaler](c, "horizontalpodautoscalers").Namespace(ns)
}

func createHPA(t *testing.T, h *autoscalingv2.HorizontalPodAutoscaler) {
	t.Helper()
	if _, err := hpas(h.Namespace).Create(context.Background(), h); err != nil {
		t.Fatal(err)
	}
}

func getHPA(t *testing.T, ns, name string) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	h, err := hpas(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func replicas(t *testing.T, ns, name string) int32 {
	t.Helper()
	d, err := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return *d.Spec.Replicas
}

func cond(h *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType) autoscalingv2.HorizontalPodAutoscalerCondition {
	for _, c := range h.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return autoscalingv2.HorizontalPodAutoscalerCondition{}
}

// hasCondition reports whether the HPA's condition typ has status and reason, and a message
// containing text.
func hasCondition(t *testing.T, ns, name string, typ autoscalingv2.HorizontalPodAutoscalerConditionType, status corev1.ConditionStatus, reason, text string) bool {
	t.Helper()
	cd := cond(getHPA(t, ns, name), typ)
	return cd.Status == status && cd.Reason == reason && strings.Contains(cd.Message, text)
}

func hasEvent(t *testing.T, ns, hpa, reason, text string) bool {
	t.Helper()
	l, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(l.Items, func(e *corev1.Event) bool {
		return e.InvolvedObject.Kind == "HorizontalPodAutoscaler" && e.InvolvedObject.Name == hpa && e.Reason == reason &&
			e.Source.Component == eventSource && strings.Contains(e.Message, text)
	})
}

// TestScaleUpAndDown: an HPA made through autoscaling/v1 (as kubectl autoscale makes them)
// scales a Deployment up from its pods' CPU, limited by maxReplicas, then back down once the
// downscale stabilization window has passed on the controller's clock.
func TestScaleUpAndDown(t *testing.T) {
	ns := testserver.Namespace(t, c, "hpa-up-")
	m, clk := start(t, ns)
	deployment(t, ns, "web", 2)
	m.set(map[string]int64{"web-0": 150, "web-1": 150}, nil) // 150% of the request, 3× the target

	v1 := &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: autoscalingv1.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		MaxReplicas:    4, TargetCPUUtilizationPercentage: new(int32(50))}}
	if _, err := client.Resource[*autoscalingv1.HorizontalPodAutoscaler](c, "horizontalpodautoscalers").Namespace(ns).Create(context.Background(), v1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the scale up to 4", func() bool { return replicas(t, ns, "web") == 4 })
	waitFor(t, "the status of the scale up", func() bool { return getHPA(t, ns, "web").Status.DesiredReplicas == 4 })
	// The sync that scaled saw 2 replicas; those after it see the 4 it wrote, and want 4 again
	// (6, held to maxReplicas): nothing more to do.
	h := getHPA(t, ns, "web")
	if cur := h.Status.CurrentReplicas; (cur != 2 && cur != 4) || h.Status.LastScaleTime == nil || len(h.Status.CurrentMetrics) != 1 {
		t.Fatalf("status %+v", h.Status)
	}
	if cur := h.Status.CurrentMetrics[0].Resource; cur == nil || *cur.Current.AverageUtilization != 150 || cur.Current.AverageValue.String() != "150m" {
		t.Errorf("current metrics %+v", h.Status.CurrentMetrics)
	}
	for _, want := range []struct {
		typ     autoscalingv2.HorizontalPodAutoscalerConditionType
		reasons []string
	}{
		{autoscalingv2.AbleToScale, []string{"SucceededRescale", "ReadyForNewScale"}},
		{autoscalingv2.ScalingActive, []string{"ValidMetricFound"}},
		{autoscalingv2.ScalingLimited, []string{"TooManyReplicas"}},
	} {
		if got := cond(h, want.typ); got.Status != corev1.ConditionTrue || !slices.Contains(want.reasons, got.Reason) {
			t.Errorf("condition %s: %s %s %q", want.typ, got.Status, got.Reason, got.Message)
		}
	}
	waitFor(t, "the SuccessfulRescale event", func() bool {
		return hasEvent(t, ns, "web", "SuccessfulRescale", "New size: 4; reason: cpu resource utilization (percentage of request) above target")
	})

	// The two pods the Deployment would add arrive; the load falls to 10%: the controller
	// wants 1 replica but holds 4 for the downscale window (5 minutes).
	runningPod(t, ns, "web-2", map[string]string{"app": "web"})
	runningPod(t, ns, "web-3", map[string]string{"app": "web"})
	m.set(map[string]int64{"web-0": 10, "web-1": 10, "web-2": 10, "web-3": 10}, nil)
	waitFor(t, "the scale down held back", func() bool {
		return hasCondition(t, ns, "web", autoscalingv2.AbleToScale, corev1.ConditionTrue, "ScaleDownStabilized", "recent recommendations were higher")
	})
	reads := m.readCount()
	waitFor(t, "more syncs", func() bool { return m.readCount() > reads+3 })
	if n := replicas(t, ns, "web"); n != 4 {
		t.Fatalf("scaled to %d within the downscale window", n)
	}
	clk.Add(5*time.Minute + time.Second)
	waitFor(t, "the scale down to 1", func() bool { return replicas(t, ns, "web") == 1 })
	waitFor(t, "the SuccessfulRescale event of the scale down", func() bool {
		return hasEvent(t, ns, "web", "SuccessfulRescale", "New size: 1; reason: All metrics below target")
	})
	waitFor(t, "ScalingLimited false", func() bool {
		return hasCondition(t, ns, "web", autoscalingv2.ScalingLimited, corev1.ConditionFalse, "DesiredWithinRange", "the desired count is within the acceptable range")
	})
}

// TestBehavior: with spec.behavior the scale-up policy paces the rise per period on the
// controller's clock.
func TestBehavior(t *testing.T) {
	ns := testserver.Namespace(t, c, "hpa-behavior-")
	m, clk := start(t, ns)
	deployment(t, ns, "api", 1)
	m.set(map[string]int64{"api-0": 400}, nil) // asks for 8
	createHPA(t, cpuHPA(ns, "api", "api", 10, func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60}}}}
	}))
	waitFor(t, "the first step, 1 → 3", func() bool { return replicas(t, ns, "api") == 3 })
	waitFor(t, "ScaleUpLimit", func() bool {
		return hasCondition(t, ns, "api", autoscalingv2.ScalingLimited, corev1.ConditionTrue, "ScaleUpLimit", "increasing faster than the maximum scale rate")
	})
	reads := m.readCount()
	waitFor(t, "more syncs", func() bool { return m.readCount() > reads+3 })
	if n := replicas(t, ns, "api"); n != 3 {
		t.Fatalf("%d replicas within the policy's period, want 3", n)
	}
	clk.Add(61 * time.Second)
	waitFor(t, "the second step, 3 → 5", func() bool { return replicas(t, ns, "api") == 5 })
}

// TestNoTarget: a missing target, or a kind nobody serves, leaves FailedGetScale and no scale.
func TestNoTarget(t *testing.T) {
	ns := testserver.Namespace(t, c, "hpa-notarget-")
	start(t, ns)
	createHPA(t, cpuHPA(ns, "ghost", "ghost", 3, nil))
	createHPA(t, cpuHPA(ns, "gadget", "g", 3, func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "example.com/v1", Kind: "Gadget", Name: "g"}
	}))
	waitFor(t, "FailedGetScale for the missing Deployment", func() bool {
		return hasCondition(t, ns, "ghost", autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale",
			`the HPA controller was unable to get the target's current scale: deployments.apps "ghost" not found`)
	})
	waitFor(t, "FailedGetScale for the unknown kind", func() bool {
		return hasCondition(t, ns, "gadget", autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale", `no matches for kind "Gadget" in group "example.com"`)
	})
	waitFor(t, "the FailedGetScale event", func() bool { return hasEvent(t, ns, "ghost", "FailedGetScale", `deployments.apps "ghost" not found`) })
	if h := getHPA(t, ns, "ghost"); h.Status.CurrentReplicas != 0 || h.Status.LastScaleTime != nil || len(h.Status.Conditions) != 1 {
		t.Errorf("status %+v", h.Status)
	}

	// The Deployment appears: the next sync finds it (the HPA was not given up on).
	deployment(t, ns, "ghost", 1)
	waitFor(t, "the target found", func() bool {
		return cond(getHPA(t, ns, "ghost"), autoscalingv2.AbleToScale).Status == corev1.ConditionTrue
	})
}

// TestMissingMetrics: no usage for the pods, or a metrics API that fails: FailedGetResourceMetric
// and FailedComputeMetricsReplicas, and the target's count left alone.
func TestMissingMetrics(t *testing.T) {
	ns := testserver.Namespace(t, c, "hpa-nometrics-")
	m, _ := start(t, ns)
	deployment(t, ns, "web", 2)
	createHPA(t, cpuHPA(ns, "web", "web", 5, nil))
	const prefix = "the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: "
	waitFor(t, "FailedGetResourceMetric", func() bool {
		return hasCondition(t, ns, "web", autoscalingv2.ScalingActive, corev1.ConditionFalse, "FailedGetResourceMetric",
			prefix+"no metrics returned from resource metrics API")
	})
	waitFor(t, "the events", func() bool {
		return hasEvent(t, ns, "web", "FailedGetResourceMetric", "no metrics returned from resource metrics API") &&
			hasEvent(t, ns, "web", "FailedComputeMetricsReplicas", "invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: ")
	})
	h := getHPA(t, ns, "web")
	if h.Status.CurrentReplicas != 2 || h.Status.DesiredReplicas != 0 || h.Status.LastScaleTime != nil {
		t.Errorf("status %+v", h.Status)
	}
	if got := cond(h, autoscalingv2.AbleToScale); got.Reason != "SucceededGetScale" {
		t.Errorf("AbleToScale %+v", got)
	}

	m.set(nil, errors.New("the metrics server is down"))
	waitFor(t, "FailedGetResourceMetric for a failing API", func() bool {
		return hasCondition(t, ns, "web", autoscalingv2.ScalingActive, corev1.ConditionFalse, "FailedGetResourceMetric",
			prefix+"unable to fetch metrics from resource metrics API: the metrics server is down")
	})
	// Only one pod measured, at the target: its unmeasured sibling is assumed at 100% on the
	// way down, at 0% on the way up; either way the count stays.
	m.set(map[string]int64{"web-0": 50}, nil)
	waitFor(t, "a count from one pod", func() bool {
		return hasCondition(t, ns, "web", autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound", "cpu resource utilization (percentage of request)")
	})
	if n := replicas(t, ns, "web"); n != 2 {
		t.Errorf("scaled to %d", n)
	}
}

// TestNotScaling: a target scaled to zero disables the HPA; metrics kplane has no API for
// fail with their reasons; two HPAs over the same pods both refuse.
func TestNotScaling(t *testing.T) {
	ns := testserver.Namespace(t, c, "hpa-notscaling-")
	start(t, ns)
	deployment(t, ns, "zero", 0)
	createHPA(t, cpuHPA(ns, "zero", "zero", 3, nil))
	waitFor(t, "ScalingDisabled", func() bool {
		return hasCondition(t, ns, "zero", autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled", "the replica count of the target is zero")
	})

	deployment(t, ns, "custom", 1)
	createHPA(t, cpuHPA(ns, "custom", "custom", 3, func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: "requests-per-second"},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(resource.MustParse("10"))}}}}
	}))
	waitFor(t, "FailedGetPodsMetric", func() bool {
		return hasCondition(t, ns, "custom", autoscalingv2.ScalingActive, corev1.ConditionFalse, "FailedGetPodsMetric", "unable to get metric requests-per-second: the custom metrics")
	})

	// No usage for these pods: the first HPA synced cannot scale before the second is known.
	deployment(t, ns, "shared", 1)
	createHPA(t, cpuHPA(ns, "shared-a", "shared", 3, nil))
	createHPA(t, cpuHPA(ns, "shared-b", "shared", 3, nil))
	for _, name := range []string{"shared-a", "shared-b"} {
		waitFor(t, "AmbiguousSelector of "+name, func() bool {
			return hasCondition(t, ns, name, autoscalingv2.ScalingActive, corev1.ConditionFalse, "AmbiguousSelector",
				fmt.Sprintf("pods by selector app=shared are controlled by multiple HPAs: [%s/shared-a %s/shared-b]", ns, ns))
		})
	}
	if n := replicas(t, ns, "shared"); n != 1 {
		t.Errorf("shared target scaled to %d", n)
	}
}

// TestSpecChangesDuringSyncs: spec changes racing the syncs (kubectl apply while the HPA is
// being synced) end with the last spec acted on and no FailedUpdateStatus warnings.
func TestSpecChangesDuringSyncs(t *testing.T) {
	ns := testserver.Namespace(t, c, "hpa-race-")
	m, _ := start(t, ns)
	deployment(t, ns, "web", 1)
	m.set(map[string]int64{"web-0": 1000}, nil)
	createHPA(t, cpuHPA(ns, "web", "web", 2, nil))
	for limit := int32(3); limit <= 8; limit++ {
		for {
			h := getHPA(t, ns, "web")
			h.Spec.MaxReplicas = limit
			_, err := hpas(ns).Update(context.Background(), h)
			if err == nil {
				break
			}
			if !client.IsConflict(err) {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, "the last maximum", func() bool { return replicas(t, ns, "web") == 8 })
	if hasEvent(t, ns, "web", "FailedUpdateStatus", "") {
		t.Error("FailedUpdateStatus recorded")
	}
}
