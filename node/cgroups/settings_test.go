package cgroups

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func resources(reqCPU, limCPU, limMem string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if reqCPU != "" {
		r.Requests[corev1.ResourceCPU] = resource.MustParse(reqCPU)
	}
	if limCPU != "" {
		r.Limits[corev1.ResourceCPU] = resource.MustParse(limCPU)
	}
	if limMem != "" {
		r.Limits[corev1.ResourceMemory] = resource.MustParse(limMem)
	}
	return r
}

func TestForContainer(t *testing.T) {
	cases := []struct {
		name               string
		res                corev1.ResourceRequirements
		shares             uint64
		quota, period, mem int64
		weight             uint64
		cpuMax, memMax     string
	}{
		{"best effort", resources("", "", ""), 2, 0, 0, 0, 1, "max 100000", "max"},
		{"half a cpu requested", resources("500m", "", ""), 512, 0, 0, 0, 20, "max 100000", "max"},
		{"one cpu limit", resources("1", "1", ""), 1024, 100000, 100000, 0, 39, "100000 100000", "max"},
		{"tiny limit gets the smallest quota", resources("1m", "1m", ""), 2, 1000, 100000, 0, 1, "1000 100000", "max"},
		{"memory limit", resources("", "", "64Mi"), 2, 0, 0, 64 << 20, 1, "max 100000", "67108864"},
		{"huge request capped", resources("1000", "", ""), 262144, 0, 0, 0, 10000, "max 100000", "max"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := ForContainer(&corev1.Container{Resources: tc.res})
			if s.CPUShares != tc.shares || s.CPUQuota != tc.quota || s.CPUPeriod != tc.period || s.MemoryLimit != tc.mem {
				t.Errorf("settings = %+v", s)
			}
			if w := v2Weight(s.CPUShares); w != tc.weight {
				t.Errorf("weight = %d, want %d", w, tc.weight)
			}
			if got := v2CPUMax(s); got != tc.cpuMax {
				t.Errorf("cpu.max = %q, want %q", got, tc.cpuMax)
			}
			if got := v2MemoryMax(s); got != tc.memMax {
				t.Errorf("memory.max = %q, want %q", got, tc.memMax)
			}
		})
	}
}

func TestForPod(t *testing.T) {
	limited := corev1.Container{Resources: resources("250m", "500m", "32Mi")}
	unlimited := corev1.Container{Resources: resources("250m", "", "")}
	cases := []struct {
		name       string
		containers []corev1.Container
		want       Settings
	}{
		{"every container limited", []corev1.Container{limited, limited}, Settings{CPUShares: 512, CPUQuota: 100000, CPUPeriod: 100000, MemoryLimit: 64 << 20}},
		// One container without limits: the pod as a whole has none, only the shares.
		{"one unlimited", []corev1.Container{limited, unlimited}, Settings{CPUShares: 512}},
	}
	for _, tc := range cases {
		got := ForPod(&corev1.Pod{Spec: corev1.PodSpec{Containers: tc.containers}})
		got.MemoryRequest = 0
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestChoose(t *testing.T) {
	v1 := []mount{
		{root: "/", point: "/sys/fs/cgroup/memory", fstype: "cgroup", options: []string{"rw", "memory"}},
		{root: "/", point: "/sys/fs/cgroup/cpu", fstype: "cgroup", options: []string{"rw", "cpu"}},
		{root: "/", point: "/sys/fs/cgroup/cpuacct", fstype: "cgroup", options: []string{"rw", "cpuacct"}},
		{root: "/", point: "/sys/fs/cgroup/unified", fstype: "cgroup2", options: []string{"rw"}},
	}
	combined := []mount{
		{root: "/docker/abc", point: "/sys/fs/cgroup/memory", fstype: "cgroup", options: []string{"rw", "memory"}},
		{root: "/docker/abc", point: "/sys/fs/cgroup/cpu,cpuacct", fstype: "cgroup", options: []string{"rw", "cpu", "cpuacct"}},
	}
	v2 := []mount{{root: "/", point: "/sys/fs/cgroup", fstype: "cgroup2", options: []string{"rw", "nsdelegate"}}}
	own := map[string]string{"memory": "/process_api/7", "cpu": "/", "cpuacct": "/", "": "/"}
	ownDocker := map[string]string{"memory": "/docker/abc/agent", "cpu": "/docker/abc", "cpuacct": "/docker/abc"}
	controllers := func(have string) func(string) string { return func(string) string { return have } }
	cases := []struct {
		name   string
		mounts []mount
		own    map[string]string
		ctrls  string
		kind   Kind
		want   layout
	}{
		{"hybrid: empty v2 beside v1", v1, own, "", V1, layout{"/sys/fs/cgroup/memory/process_api/7/kplane/n1", "/sys/fs/cgroup/cpu/kplane/n1", "/sys/fs/cgroup/cpuacct/kplane/n1"}},
		{"v1 with cpu and cpuacct together, in a container", combined, ownDocker, "", V1, layout{"/sys/fs/cgroup/memory/agent/kplane/n1", "/sys/fs/cgroup/cpu,cpuacct/kplane/n1", "/sys/fs/cgroup/cpu,cpuacct/kplane/n1"}},
		{"v2 with controllers", v2, own, "cpuset cpu io memory pids", V2, layout{"/sys/fs/cgroup/kplane/n1", "/sys/fs/cgroup/kplane/n1", "/sys/fs/cgroup/kplane/n1"}},
		{"v2 without memory", v2, own, "cpu pids", None, layout{}},
		{"nothing mounted", nil, own, "", None, layout{}},
	}
	for _, tc := range cases {
		kind, l, err := choose(tc.mounts, tc.own, "n1", controllers(tc.ctrls))
		if kind != tc.kind || l != tc.want || (kind == None) != (err != nil) {
			t.Errorf("%s: %s %+v %v, want %s %+v", tc.name, kind, l, err, tc.kind, tc.want)
		}
	}
	if got := (layout{"/a", "/b", "/b"}).dirs(); strings.Join(got, " ") != "/a /b" {
		t.Errorf("dirs = %v", got)
	}
}

func TestParseFiles(t *testing.T) {
	dir := t.TempDir()
	mi := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(mi, []byte(`22 1 0:21 / /sys rw - sysfs sysfs rw
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 30 0:37 / /sys/fs/cgroup/my\040dir rw,relatime shared:9 - cgroup2 cgroup2 rw
`), 0o644); err != nil {
		t.Fatal(err)
	}
	mounts, err := cgroupMounts(mi)
	if err != nil || len(mounts) != 2 || mounts[0].point != "/sys/fs/cgroup/cpu" || !contains(mounts[0].options, "cpu") ||
		mounts[1].point != "/sys/fs/cgroup/my dir" || mounts[1].fstype != "cgroup2" {
		t.Errorf("mounts = %+v, %v", mounts, err)
	}
	st, ok := parseStat([]byte("42 (a (weird) name) S 1 40 40 0 -1 4194304 123 0 7 0 11 22 33 44 20 0 1 0 100 1000000 55 18446744073709551615"))
	if !ok || st.pgrp != 40 || st.minflt != 123 || st.majflt != 7 || st.utime != 11 || st.stime != 22 || st.cutime != 33 || st.cstime != 44 || st.rss != 55 {
		t.Errorf("stat = %+v %v", st, ok)
	}
	cg := filepath.Join(dir, "cgroup")
	if err := os.WriteFile(cg, []byte("9:name=systemd:/\n4:memory:/process_api/3\n2:cpu,cpuacct:/x\n0::/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	own, err := ownCgroups(cg)
	if err != nil || own["memory"] != "/process_api/3" || own["cpuacct"] != "/x" || own["cpu"] != "/x" || own[""] != "/" {
		t.Errorf("own = %v, %v", own, err)
	}
}
