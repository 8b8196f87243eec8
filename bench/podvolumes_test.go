package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkPodVolumes measures pod startup under `kplane up` when each of 100 pods has a
// ConfigMap, a Secret and the projected service-account token volume (admission adds it;
// the node asks the TokenRequest API for each pod's token): create → Ready, p50 and p99,
// all created at once, and the RSS with them running. Run with -benchtime=1x.
func BenchmarkPodVolumes(b *testing.B) {
	for range b.N {
		b.StopTimer()
		up := startUp(b)
		ctx := context.Background()
		for i := range upPods {
			name := fmt.Sprint("p-", i)
			if _, err := client.Resource[*corev1.ConfigMap](up.c, "configmaps").Namespace("default").Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"config.yaml": "replicas: 3\nname: " + name + "\n"}}); err != nil {
				b.Fatal(err)
			}
			if _, err := client.Resource[*corev1.Secret](up.c, "secrets").Namespace("default").Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"password": []byte("secret of " + name)}}); err != nil {
				b.Fatal(err)
			}
		}
		lat := podStartup(b, up, func(i int) *corev1.Pod {
			name := fmt.Sprint("p-", i)
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "c", Image: "sleep", Command: []string{"sleep", "3600"},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "secret", MountPath: "/etc/secret"}}}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}},
						{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}},
					}}}
		})
		time.Sleep(time.Second)
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "pod-startup-p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "pod-startup-p99-ms")
		b.ReportMetric(rssMB(up.cmd.Process.Pid), "RSS-100-pods-MB")
	}
}
