package podresources

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func ctr(req, limit string) corev1.Container {
	c := corev1.Container{}
	if req != "" {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req), corev1.ResourceMemory: resource.MustParse(req + "Mi")}
	}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit), corev1.ResourceMemory: resource.MustParse(limit + "Mi")}
	}
	return c
}

func sidecar(req, limit string) corev1.Container {
	c := ctr(req, limit)
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func TestRequestsAndLimits(t *testing.T) {
	cases := []struct {
		name                 string
		spec                 corev1.PodSpec
		cpuReq, cpuLimit     string // "" = absent
		cpuLimited, memLimit bool
	}{
		{"no resources", corev1.PodSpec{Containers: []corev1.Container{ctr("", "")}}, "", "", false, false},
		{"containers add up", corev1.PodSpec{Containers: []corev1.Container{ctr("1", "2"), ctr("3", "4")}}, "4", "6", true, true},
		{"one container without limit", corev1.PodSpec{Containers: []corev1.Container{ctr("1", "2"), ctr("3", "")}}, "4", "2", false, false},
		{"init container larger than the sum", corev1.PodSpec{InitContainers: []corev1.Container{ctr("5", "5")}, Containers: []corev1.Container{ctr("1", "1"), ctr("1", "1")}}, "5", "5", true, true},
		{"init container smaller", corev1.PodSpec{InitContainers: []corev1.Container{ctr("1", "1")}, Containers: []corev1.Container{ctr("2", "2")}}, "2", "2", true, true},
		// The sidecar runs beside the app (1+2) and beside the later init container (1+4).
		{"sidecar", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("1", "1"), ctr("4", "4")}, Containers: []corev1.Container{ctr("2", "2")}}, "5", "5", true, true},
		{"pod-level resources replace the sum", corev1.PodSpec{Containers: []corev1.Container{ctr("1", "")},
			Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}},
			"7", "8", true, false},
		{"overhead", corev1.PodSpec{Containers: []corev1.Container{ctr("1", "1")}, Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}, "1250m", "1250m", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: tc.spec}
			req := Requests(pod)
			lim, cpuLimited, memLimited := Limits(pod)
			if got := quantity(req, corev1.ResourceCPU); got != tc.cpuReq {
				t.Errorf("cpu request = %q, want %q", got, tc.cpuReq)
			}
			if got := quantity(lim, corev1.ResourceCPU); got != tc.cpuLimit {
				t.Errorf("cpu limit = %q, want %q", got, tc.cpuLimit)
			}
			if cpuLimited != tc.cpuLimited || memLimited != tc.memLimit {
				t.Errorf("limited cpu=%v memory=%v, want %v %v", cpuLimited, memLimited, tc.cpuLimited, tc.memLimit)
			}
		})
	}
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return ""
	}
	return q.String()
}
