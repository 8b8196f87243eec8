package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// benchDeployment is a Deployment of a realistic size: one container with ports, env,
// resources and probes, labels and an annotation that each write changes.
func benchDeployment(name, revision string) *appsv1.Deployment {
	replicas := int32(3)
	labels := map[string]string{"app": name, "tier": "web"}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"bench/revision": revision}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "registry.example/app:1.0",
					Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
					Env:            []corev1.EnvVar{{Name: "MODE", Value: "bench"}, {Name: "LEVEL", Value: "info"}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}},
				}}},
			},
		},
	}
}

// perClient runs n writes spread over `clients` goroutines, each writing its own object (so
// updates never conflict), and reports p50 and p99 in ms.
func perClient(b *testing.B, n int, op func(client, i int) error) {
	lat := make([]time.Duration, n)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	b.ResetTimer()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < n; i += clients {
				start := time.Now()
				if err := op(c, i); err != nil {
					errs[c] = err
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	report(b, lat)
}

// BenchmarkApply compares a server-side apply of a whole Deployment with an update (PUT) of
// the same Deployment on the same server, each write changing one annotation; both record
// managedFields. 16 clients, each on its own object.
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()
	for _, t := range targets(b) {
		ns := "bench-apply-" + runID
		ensureNamespace(b, t, ns)
		deployments := t.cs.AppsV1().Deployments(ns)
		b.Run(t.name+"/update", func(b *testing.B) {
			last := make([]*appsv1.Deployment, clients)
			for c := range clients {
				d, err := deployments.Create(ctx, benchDeployment(fmt.Sprintf("u-%d-%d", b.N, c), "0"), metav1.CreateOptions{})
				if err != nil {
					b.Fatal(err)
				}
				last[c] = d
			}
			perClient(b, b.N, func(c, i int) error {
				d := last[c].DeepCopy()
				d.Annotations["bench/revision"] = strconv.Itoa(i)
				out, err := deployments.Update(ctx, d, metav1.UpdateOptions{})
				if err == nil {
					last[c] = out
				}
				return err
			})
		})
		b.Run(t.name+"/apply", func(b *testing.B) {
			apply := func(c int, revision string) error {
				name := fmt.Sprintf("a-%d-%d", b.N, c)
				body, err := json.Marshal(benchDeployment(name, revision))
				if err != nil {
					return err
				}
				_, err = deployments.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "bench"})
				return err
			}
			for c := range clients { // created outside the measurement, as for the updates
				if err := apply(c, "0"); err != nil {
					b.Fatal(err)
				}
			}
			perClient(b, b.N, func(c, i int) error { return apply(c, strconv.Itoa(i)) })
		})
	}
}
