package limitrange

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// list parses "name=amount" pairs.
func list(pairs ...string) corev1.ResourceList {
	if len(pairs) == 0 {
		return nil
	}
	out := corev1.ResourceList{}
	for _, p := range pairs {
		name, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(name)] = resource.MustParse(q)
	}
	return out
}

func ctr(name string, requests, limits []string) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: list(requests...), Limits: list(limits...)}}
}

func lr(name string, items ...corev1.LimitRangeItem) *corev1.LimitRange {
	r := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.LimitRangeSpec{Limits: items}}
	for i := range r.Spec.Limits {
		DefaultItem(&r.Spec.Limits[i])
	}
	return r
}

func TestDefaultItem(t *testing.T) {
	item := corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: list("cpu=2", "memory=1Gi"), Min: list("ephemeral-storage=1Gi"),
		Default: list("memory=512Mi")}
	DefaultItem(&item)
	if got := item.Default; got.Cpu().String() != "2" || got.Memory().String() != "512Mi" {
		t.Errorf("default %v: the max fills in a missing default, a given one stays", got)
	}
	if got := item.DefaultRequest; got.Cpu().String() != "2" || got.Memory().String() != "512Mi" || got.StorageEphemeral().String() != "1Gi" {
		t.Errorf("defaultRequest %v: the default, else the min", got)
	}
	pod := corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: list("cpu=2")}
	DefaultItem(&pod)
	if pod.Default != nil || pod.DefaultRequest != nil {
		t.Error("a Pod item got defaults")
	}
}

func TestApplyDefaults(t *testing.T) {
	container := corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Default: list("cpu=500m", "memory=256Mi"), DefaultRequest: list("cpu=100m", "memory=128Mi")}
	for _, tc := range []struct {
		name       string
		pod        corev1.PodSpec
		ranges     []*corev1.LimitRange
		main       []string // requests, then limits of the first container, as "cpu=..,memory=.."
		annotation string
	}{
		{"nothing set: both filled", corev1.PodSpec{Containers: []corev1.Container{ctr("main", nil, nil)}}, []*corev1.LimitRange{lr("a", container)},
			[]string{"cpu=100m,memory=128Mi", "cpu=500m,memory=256Mi"},
			"LimitRanger plugin set: cpu, memory request for container main; cpu, memory limit for container main"},
		{"a request set: its limit filled", corev1.PodSpec{Containers: []corev1.Container{ctr("main", []string{"cpu=200m", "memory=64Mi"}, nil)}},
			[]*corev1.LimitRange{lr("a", container)},
			[]string{"cpu=200m,memory=64Mi", "cpu=500m,memory=256Mi"}, "LimitRanger plugin set: cpu, memory limit for container main"},
		{"everything set: untouched", corev1.PodSpec{Containers: []corev1.Container{ctr("main", []string{"cpu=1", "memory=1Gi"}, []string{"cpu=1", "memory=1Gi"})}},
			[]*corev1.LimitRange{lr("a", container)}, []string{"cpu=1,memory=1Gi", "cpu=1,memory=1Gi"}, ""},
		{"init containers too", corev1.PodSpec{InitContainers: []corev1.Container{ctr("setup", nil, nil)}, Containers: []corev1.Container{ctr("main", []string{"cpu=1", "memory=1Gi"}, []string{"cpu=1", "memory=1Gi"})}},
			[]*corev1.LimitRange{lr("a", container)}, []string{"cpu=1,memory=1Gi", "cpu=1,memory=1Gi"},
			"LimitRanger plugin set: cpu, memory request for init container setup; cpu, memory limit for init container setup"},
		{"the max stands for a missing default", corev1.PodSpec{Containers: []corev1.Container{ctr("main", nil, nil)}},
			[]*corev1.LimitRange{lr("a", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: list("cpu=2")})},
			[]string{"cpu=2", "cpu=2"}, "LimitRanger plugin set: cpu request for container main; cpu limit for container main"},
		{"pod items give no defaults", corev1.PodSpec{Containers: []corev1.Container{ctr("main", nil, nil)}},
			[]*corev1.LimitRange{lr("a", corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: list("cpu=2")})}, []string{"", ""}, ""},
		{"ranges apply in name order", corev1.PodSpec{Containers: []corev1.Container{ctr("main", nil, nil)}},
			[]*corev1.LimitRange{lr("b", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Default: list("memory=1Gi")}), lr("a", container)},
			[]string{"cpu=100m,memory=128Mi", "cpu=500m,memory=256Mi"},
			"LimitRanger plugin set: cpu, memory request for container main; cpu, memory limit for container main"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: tc.pod}
			changed := ApplyDefaults(pod, tc.ranges)
			main := pod.Spec.Containers[0].Resources
			if got := []string{render(main.Requests), render(main.Limits)}; got[0] != tc.main[0] || got[1] != tc.main[1] {
				t.Errorf("main container %q, want %q", got, tc.main)
			}
			if got := pod.Annotations[Annotation]; got != tc.annotation || changed != (tc.annotation != "") {
				t.Errorf("annotation %q (changed %v), want %q", got, changed, tc.annotation)
			}
		})
	}
}

func render(l corev1.ResourceList) string {
	var parts []string
	for _, n := range names(l) {
		q := l[n]
		parts = append(parts, string(n)+"="+q.String())
	}
	return strings.Join(parts, ",")
}

func TestCheckPod(t *testing.T) {
	container := func(min, max, ratio []string) corev1.LimitRangeItem {
		return corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Min: list(min...), Max: list(max...), MaxLimitRequestRatio: list(ratio...)}
	}
	pod := func(cs ...corev1.Container) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{Containers: cs}} }
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		ranges []*corev1.LimitRange
		want   string
	}{
		{"within", pod(ctr("main", []string{"cpu=200m"}, []string{"cpu=400m"})), []*corev1.LimitRange{lr("a", container([]string{"cpu=100m"}, []string{"cpu=500m"}, []string{"cpu=2"}))}, ""},
		{"limit over the max", pod(ctr("main", []string{"cpu=200m"}, []string{"cpu=1"})), []*corev1.LimitRange{lr("a", container(nil, []string{"cpu=500m"}, nil))},
			"maximum cpu usage per Container is 500m, but limit is 1"},
		{"no limit under a max", pod(ctr("main", []string{"cpu=200m"}, nil)), []*corev1.LimitRange{{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{container(nil, []string{"cpu=500m"}, nil)}}}},
			"maximum cpu usage per Container is 500m.  No limit is specified"},
		{"request under the min", pod(ctr("main", []string{"cpu=50m"}, nil)), []*corev1.LimitRange{lr("a", container([]string{"cpu=100m"}, nil, nil))},
			"minimum cpu usage per Container is 100m, but request is 50m"},
		{"no request over a min", pod(ctr("main", nil, nil)), []*corev1.LimitRange{{Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{container([]string{"memory=1Mi"}, nil, nil)}}}},
			"minimum memory usage per Container is 1Mi.  No request is specified"},
		{"ratio too large", pod(ctr("main", []string{"cpu=100m"}, []string{"cpu=500m"})), []*corev1.LimitRange{lr("a", container(nil, nil, []string{"cpu=2"}))},
			"cpu max limit to request ratio per Container is 2, but provided ratio is 5.000000"},
		{"ratio without a limit", pod(ctr("main", []string{"cpu=100m"}, nil)), []*corev1.LimitRange{lr("a", container(nil, nil, []string{"cpu=2"}))},
			"cpu max limit to request ratio per Container is 2, but no limit is specified or limit is 0"},
		{"several breaches in brackets", pod(ctr("main", []string{"cpu=50m"}, []string{"cpu=1"})), []*corev1.LimitRange{lr("a", container([]string{"cpu=100m"}, []string{"cpu=500m"}, nil))},
			"[minimum cpu usage per Container is 100m, but request is 50m, maximum cpu usage per Container is 500m, but limit is 1]"},
		{"the pod as a whole", pod(ctr("a", []string{"memory=600Mi"}, []string{"memory=600Mi"}), ctr("b", []string{"memory=600Mi"}, []string{"memory=600Mi"})),
			[]*corev1.LimitRange{lr("a", corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: list("memory=1Gi")})},
			"maximum memory usage per Pod is 1Gi, but limit is 1200Mi"},
		{"the first range by name", pod(ctr("main", []string{"cpu=2"}, []string{"cpu=2"})),
			[]*corev1.LimitRange{lr("z", container(nil, []string{"cpu=1"}, nil)), lr("b", container(nil, []string{"cpu=500m"}, nil))},
			"maximum cpu usage per Container is 500m, but limit is 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPod(tc.pod, tc.ranges)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckClaim(t *testing.T) {
	claim := func(size string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{Requests: list("storage=" + size)}}}
	}
	storage := lr("s", corev1.LimitRangeItem{Type: corev1.LimitTypePersistentVolumeClaim, Min: list("storage=1Gi"), Max: list("storage=10Gi")})
	for size, want := range map[string]string{
		"5Gi":   "",
		"20Gi":  "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi",
		"500Mi": "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi",
	} {
		got := ""
		if err := CheckClaim(claim(size), []*corev1.LimitRange{storage}); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%s: %q, want %q", size, got, want)
		}
	}
	// Container items do not bound claims.
	if err := CheckClaim(claim("20Gi"), []*corev1.LimitRange{lr("c", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: list("storage=1Gi")})}); err != nil {
		t.Errorf("container item applied to a claim: %v", err)
	}
}
