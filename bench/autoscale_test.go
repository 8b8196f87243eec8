package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hpaSyncPeriod is --horizontal-pod-autoscaler-sync-period under `kplane up` (the default).
const hpaSyncPeriod = 15 * time.Second

// BenchmarkUpAutoscale measures the horizontal pod autoscaler under `kplane up` (a process):
// a Deployment of one pod requesting 100m of CPU, idle until the benchmark starts its load
// (bursts of `yes`, a fifth of the time: well above 50m even on a busy machine; the idle pod
// looks for the start every half second), and an HPA targeting 50% CPU with an immediate
// scale-up behavior. The time measured runs from the load's start to the scale up written
// (the Deployment's spec.replicas above 1): the wait for the HPA's next sync, the node
// agent's measurement through metrics.k8s.io, the decision and the write. The load starts at
// a random moment of the sync period, as load does in life, once the HPA has counted the idle
// pod; each iteration has a namespace of its own. Reported: the mean, median and longest
// reaction. Run with -benchtime=5x (about a minute an iteration).
func BenchmarkUpAutoscale(b *testing.B) {
	b.StopTimer()
	up := startUp(b)
	root := b.TempDir()
	var reactions []time.Duration
	for i := range b.N {
		reactions = append(reactions, autoscaleOnce(b, up.c, filepath.Join(root, fmt.Sprint(i)), fmt.Sprintf("bench-hpa-%d", i)))
	}
	slices.Sort(reactions)
	var sum time.Duration
	for _, r := range reactions {
		sum += r
	}
	b.ReportMetric((sum / time.Duration(len(reactions))).Seconds(), "reaction-mean-s")
	b.ReportMetric(reactions[len(reactions)/2].Seconds(), "reaction-p50-s")
	b.ReportMetric(reactions[len(reactions)-1].Seconds(), "reaction-max-s")
}

func autoscaleOnce(b *testing.B, c *client.Client, dir, ns string) time.Duration {
	ctx := context.Background()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
		_ = client.Resource[*corev1.Namespace](c, "namespaces").Delete(ctx, ns, metav1.DeleteOptions{})
	}()
	labels := map[string]string{"app": "burn"}
	one := int32(1)
	load := `while [ ! -e /ctl/go ]; do sleep 0.5; done; while [ ! -e /ctl/stop ]; do timeout 0.05 yes > /dev/null; sleep 0.2; done; exec sleep 3600`
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "burn"}, Spec: appsv1.DeploymentSpec{
		Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(0)),
			Containers: []corev1.Container{{Name: "main", Image: "sh", Command: []string{"/bin/sh", "-c", load},
				Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "ctl", MountPath: "/ctl"}}}},
			Volumes: []corev1.Volume{{Name: "ctl", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}},
		}},
	}}
	deployments := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns)
	if _, err := deployments.Create(ctx, d); err != nil {
		b.Fatal(err)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "burn"}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "burn"},
		MinReplicas:    &one, MaxReplicas: 3,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
			Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(int32(50))}}}},
		Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(0)),
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 1}}}},
	}}
	hpas := client.Resource[*autoscalingv2.HorizontalPodAutoscaler](c, "horizontalpodautoscalers").Namespace(ns)
	if _, err := hpas.Create(ctx, hpa); err != nil {
		b.Fatal(err)
	}
	// The idle pod counted: a sync computed a count from its usage.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		h, err := hpas.Get(ctx, "burn")
		if err != nil {
			b.Fatal(err)
		}
		if counted(h) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the HPA never counted the idle pod: %+v", h.Status)
		}
	}
	time.Sleep(rand.N(hpaSyncPeriod))
	if got, err := deployments.Get(ctx, "burn"); err != nil || *got.Spec.Replicas != 1 {
		b.Fatalf("scaled before the load started: %v, %v", got.Spec.Replicas, err)
	}

	b.StartTimer()
	began := time.Now()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	for deadline := began.Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		got, err := deployments.Get(ctx, "burn")
		if err != nil {
			b.Fatal(err)
		}
		if *got.Spec.Replicas > 1 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("no scale up within 3 minutes of the load's start")
		}
	}
	took := time.Since(began)
	b.StopTimer()
	return took
}

func counted(h *autoscalingv2.HorizontalPodAutoscaler) bool {
	for _, c := range h.Status.Conditions {
		if c.Type == autoscalingv2.ScalingActive && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
