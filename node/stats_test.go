package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func limitedPod(ns, name, node, script, memLimit string) *corev1.Pod {
	p := shPod(ns, name, node, script, corev1.RestartPolicyNever)
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse(memLimit)},
	}
	return p
}

func getJSON(t *testing.T, url string, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}

// deletePodsAtEnd deletes the test's pods at its end, while its agent still runs: a later
// agent of the same name (go test -count) would otherwise run them again.
func deletePodsAtEnd(t *testing.T, pods *client.Typed[*corev1.Pod]) {
	t.Cleanup(func() {
		list, err := pods.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, p := range list.Items {
			_ = pods.Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		}
	})
}

// TestContainerCgroups: a container runs in its own cgroup, with its limits, below its pod's;
// a container over its memory limit is OOMKilled with exit code 137; the pod's cgroup goes
// with the pod.
func TestContainerCgroups(t *testing.T) {
	c := newClient(t)
	a := startAgent(t, c, "node-cgroups", "127.101.0.0/24")
	ns := testserver.Namespace(t, c, "node-cgroups-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	deletePodsAtEnd(t, pods)
	eventually(t, "agent running", func() (bool, string) { return a.Port() != 0 && a.cgroups != nil, "" })
	if ok, why := a.cgroups.Enforced(); !ok {
		t.Skipf("no cgroups on this machine (%s): the fallback is covered by TestCgroupsFallback", why)
	}

	pidFile := filepath.Join(t.TempDir(), "pid")
	p, err := pods.Create(ctx, limitedPod(ns, "sleeper", "node-cgroups", `echo $$$$ > `+pidFile+`; exec sleep 100`, "64Mi"))
	if err != nil {
		t.Fatal(err)
	}
	runningPod(t, pods, "sleeper")
	pid := readPID(t, pidFile)
	// /proc/<pid>/cgroup names the container's cgroup in each hierarchy.
	want := fmt.Sprintf("kplane/node-cgroups/pod%s/main", p.UID)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || !strings.Contains(string(b), want) {
		t.Fatalf("process %d is in %q, want %s (%v)", pid, b, want, err)
	}
	podDirs := a.cgroups.NodeDirs()
	for i := range podDirs {
		podDirs[i] = filepath.Join(podDirs[i], "pod"+string(p.UID))
		if _, err := os.Stat(filepath.Join(podDirs[i], "main")); err != nil {
			t.Errorf("container cgroup: %v", err)
		}
	}

	if _, err := pods.Create(ctx, limitedPod(ns, "hog", "node-cgroups", `x=0123456789abcdef; while :; do x="$x$x"; done`, "16Mi")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "hog OOMKilled", func() (bool, string) {
		p, err := pods.Get(ctx, "hog")
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 || cs[0].State.Terminated == nil {
			return false, fmt.Sprintf("%+v", p.Status)
		}
		term := cs[0].State.Terminated
		if term.Reason != "OOMKilled" || term.ExitCode != 137 || p.Status.Phase != corev1.PodFailed {
			t.Fatalf("terminated %+v, phase %s: want OOMKilled, 137, Failed", term, p.Status.Phase)
		}
		return true, ""
	})

	if err := pods.Delete(ctx, "sleeper", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod cgroup removed", func() (bool, string) {
		for _, d := range podDirs {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				return false, fmt.Sprint(d, err)
			}
		}
		return true, ""
	})
}

// TestCgroupsFallback: an agent that may not use cgroups says so once (an event on its Node)
// and still accounts its containers' usage, from /proc.
func TestCgroupsFallback(t *testing.T) {
	c := newClient(t)
	a := startAgent(t, c, "node-nocgroups", "127.102.0.0/24", func(o *Options) { o.DisableCgroups = true })
	ns := testserver.Namespace(t, c, "node-nocgroups-")
	ctx := context.Background()
	eventually(t, "CgroupsUnavailable event on the node", func() (bool, string) {
		evs, err := client.Resource[*corev1.Event](c, "events").Namespace(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == "node-nocgroups" && e.Reason == cgroupsUnavailable {
				return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "not enforced"), e.Message
			}
		}
		return false, "no event"
	})
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	deletePodsAtEnd(t, pods)
	if _, err := pods.Create(ctx, limitedPod(ns, "spin", "node-nocgroups", `while :; do :; done`, "1Mi")); err != nil {
		t.Fatal(err)
	}
	runningPod(t, pods, "spin")
	eventually(t, "usage from /proc", func() (bool, string) {
		var s statsv1alpha1.Summary
		getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/stats/summary", a.Port()), &s)
		for _, p := range s.Pods {
			if p.PodRef.Name == "spin" && len(p.Containers) == 1 {
				ct := p.Containers[0]
				// The 1Mi limit is not enforced: the shell uses more and runs on.
				return *ct.CPU.UsageCoreNanoSeconds > 0 && *ct.Memory.WorkingSetBytes > 1<<20, fmt.Sprintf("%+v %+v", ct.CPU, ct.Memory)
			}
		}
		return false, fmt.Sprintf("%+v", s.Pods)
	})
}

// TestStatsEndpoints: /stats/summary decodes as the kubelet's stats API and /metrics/resource
// carries the kubelet's resource metrics, for the node, a pod and its container.
func TestStatsEndpoints(t *testing.T) {
	c := newClient(t)
	a := startAgent(t, c, "node-stats", "127.103.0.0/24")
	ns := testserver.Namespace(t, c, "node-stats-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	deletePodsAtEnd(t, pods)
	// The shell fills a variable once it runs in its cgroup (under cgroup v1 it joins right
	// after it starts, and what it touched before is charged to the agent), then spins.
	if _, err := pods.Create(ctx, limitedPod(ns, "busy", "node-stats", `sleep 0.2; x=$(seq 1 50000); while :; do :; done`, "64Mi")); err != nil {
		t.Fatal(err)
	}
	p := runningPod(t, pods, "busy")
	base := fmt.Sprintf("http://127.0.0.1:%d", a.Port())

	var s statsv1alpha1.Summary
	eventually(t, "busy in the summary, using CPU", func() (bool, string) {
		s = statsv1alpha1.Summary{}
		getJSON(t, base+"/stats/summary", &s)
		if len(s.Pods) != 1 || len(s.Pods[0].Containers) != 1 {
			return false, fmt.Sprintf("%+v", s.Pods)
		}
		ct := s.Pods[0].Containers[0]
		return *ct.CPU.UsageCoreNanoSeconds > 0 && *ct.Memory.WorkingSetBytes > 100<<10, fmt.Sprintf("%+v", ct.Memory)
	})
	if s.Node.NodeName != "node-stats" || s.Node.CPU == nil || *s.Node.CPU.UsageCoreNanoSeconds == 0 || *s.Node.Memory.WorkingSetBytes == 0 || s.Node.StartTime.IsZero() {
		t.Errorf("node stats %+v", s.Node)
	}
	ps := s.Pods[0]
	if ps.PodRef != (statsv1alpha1.PodReference{Name: "busy", Namespace: ns, UID: string(p.UID)}) || ps.CPU == nil || ps.Memory == nil {
		t.Errorf("pod stats %+v", ps)
	}
	ct := ps.Containers[0]
	if ct.Name != "main" || ct.StartTime.IsZero() || *ct.Memory.WorkingSetBytes == 0 || *ct.Memory.UsageBytes < *ct.Memory.WorkingSetBytes {
		t.Errorf("container stats %+v %+v", ct, ct.Memory)
	}
	if ok, _ := a.cgroups.Enforced(); ok && (ct.Memory.AvailableBytes == nil || *ct.Memory.AvailableBytes > 64<<20) {
		t.Errorf("available bytes under a 64Mi limit: %v", ct.Memory.AvailableBytes)
	}

	resp, err := http.Get(base + "/metrics/resource")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"node_cpu_usage_seconds_total":       {},
		"node_memory_working_set_bytes":      {},
		"container_cpu_usage_seconds_total":  {"container": "main", "pod": "busy", "namespace": ns},
		"container_memory_working_set_bytes": {"container": "main", "pod": "busy", "namespace": ns},
		"container_start_time_seconds":       {"container": "main", "pod": "busy", "namespace": ns},
		"pod_cpu_usage_seconds_total":        {"pod": "busy", "namespace": ns},
		"pod_memory_working_set_bytes":       {"pod": "busy", "namespace": ns},
		"scrape_error":                       {},
		"resource_scrape_error":              {},
	}
	for name, labels := range want {
		mf, ok := families[name]
		if !ok || len(mf.Metric) != 1 {
			t.Errorf("%s: %v", name, mf)
			continue
		}
		m := mf.Metric[0]
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(labels) {
			t.Errorf("%s labels %v, want %v", name, got, labels)
		}
		value := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		switch {
		case strings.HasSuffix(name, "scrape_error"):
			if value != 0 {
				t.Errorf("%s = %v", name, value)
			}
		case value <= 0:
			t.Errorf("%s = %v", name, value)
		case strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_bytes"):
			if m.GetTimestampMs() == 0 {
				t.Errorf("%s has no timestamp", name)
			}
		}
	}
	if families["container_cpu_usage_seconds_total"].GetType().String() != "COUNTER" {
		t.Errorf("container_cpu_usage_seconds_total is a %s", families["container_cpu_usage_seconds_total"].GetType())
	}
}

// TestNodeAllocatable: capacity is the machine's, allocatable keeps the kubelet's default
// eviction reserve out.
func TestNodeAllocatable(t *testing.T) {
	capacity, allocatable := machineResources(t.TempDir())
	mem, amem := capacity[corev1.ResourceMemory], allocatable[corev1.ResourceMemory]
	if mem.Value() != memTotal() || mem.Value()-amem.Value() != 100<<20 {
		t.Errorf("memory capacity %s allocatable %s", mem.String(), amem.String())
	}
	cpu, acpu := capacity[corev1.ResourceCPU], allocatable[corev1.ResourceCPU]
	if cpu.Value() < 1 || cpu.Cmp(acpu) != 0 {
		t.Errorf("cpu capacity %s allocatable %s", cpu.String(), acpu.String())
	}
	fs, afs := capacity[corev1.ResourceEphemeralStorage], allocatable[corev1.ResourceEphemeralStorage]
	if fs.Value() <= 0 || afs.Value() != fs.Value()-fs.Value()/10 {
		t.Errorf("ephemeral-storage capacity %s allocatable %s", fs.String(), afs.String())
	}
}
