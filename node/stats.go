package node

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/kplane/kplane/node/cgroups"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// summary collects the node's usage and its running containers' as the kubelet's
// /stats/summary reports them: cumulative CPU and memory, for the node, each pod with at
// least one running container, and those containers. The error says that the node's own
// figures could not be read (the rest is there); a container that exits meanwhile is left
// out, not an error.
func (a *Agent) summary() (*statsv1alpha1.Summary, error) {
	out := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: a.name}, Pods: []statsv1alpha1.PodStats{}}
	u, boot, nodeErr := cgroups.NodeUsage()
	if nodeErr == nil {
		out.Node.StartTime = metav1.NewTime(boot)
		out.Node.CPU, out.Node.Memory = cpuStats(u), memoryStats(u, memTotal())
	}

	a.mu.Lock()
	workers := make([]*podWorker, 0, len(a.workers))
	for _, w := range a.workers {
		workers = append(workers, w)
	}
	a.mu.Unlock()
	snap := a.cgroups.Snapshot()
	for _, w := range workers {
		w.mu.Lock()
		pod, runs := w.pod, slices.Clone(w.runs)
		w.mu.Unlock()
		ps := statsv1alpha1.PodStats{PodRef: statsv1alpha1.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)}}
		if pod.Status.StartTime != nil {
			ps.StartTime = *pod.Status.StartTime
		}
		var running []*cgroups.Container
		for _, r := range runs {
			if r == nil || r.cg == nil {
				continue
			}
			u, err := snap.Container(r.cg)
			if err != nil {
				continue // exited (its cgroup is gone) or not placed yet
			}
			running = append(running, r.cg)
			ps.Containers = append(ps.Containers, statsv1alpha1.ContainerStats{
				Name: r.name, StartTime: metav1.NewTime(r.cg.Started()),
				CPU: cpuStats(u), Memory: memoryStats(u, r.cg.Settings().MemoryLimit),
			})
		}
		if len(running) == 0 {
			continue
		}
		if u, err := snap.Pod(pod.UID, running); err == nil {
			ps.CPU, ps.Memory = cpuStats(u), memoryStats(u, cgroups.ForPod(pod).MemoryLimit)
		}
		out.Pods = append(out.Pods, ps)
	}
	slices.SortFunc(out.Pods, func(x, y statsv1alpha1.PodStats) int {
		return strings.Compare(x.PodRef.Namespace+"/"+x.PodRef.Name, y.PodRef.Namespace+"/"+y.PodRef.Name)
	})
	return out, nodeErr
}

func cpuStats(u cgroups.Usage) *statsv1alpha1.CPUStats {
	return &statsv1alpha1.CPUStats{Time: metav1.NewTime(u.Time), UsageCoreNanoSeconds: new(u.CPU)}
}

// memoryStats reports u; limit (0: none) gives the available bytes, as the kubelet: the
// limit less the working set.
func memoryStats(u cgroups.Usage, limit int64) *statsv1alpha1.MemoryStats {
	m := &statsv1alpha1.MemoryStats{Time: metav1.NewTime(u.Time), UsageBytes: new(u.Memory), WorkingSetBytes: new(u.WorkingSet),
		RSSBytes: new(u.RSS), PageFaults: new(u.PageFaults), MajorPageFaults: new(u.MajorPageFaults)}
	if limit > 0 {
		m.AvailableBytes = new(uint64(max(limit-int64(u.WorkingSet), 0)))
	}
	return m
}

// serveSummary answers GET /stats/summary with the JSON of the kubelet's stats API
// (k8s.io/kubelet/pkg/apis/stats/v1alpha1). Only CPU and memory are reported, so
// only_cpu_and_memory=true changes nothing.
func (a *Agent) serveSummary(w http.ResponseWriter, _ *http.Request) {
	s, err := a.summary()
	if err != nil {
		slog.Error("reading node usage", "err", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// The kubelet's resource metrics (/metrics/resource), what metrics-server and kplane's
// apiserver read: the same names, labels and types, each sample with the time it was read.
var (
	nodeCPUDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"CPU time the node has used, in core-seconds, since it booted", nil, nil)
	nodeMemoryDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"Memory the node uses in bytes, less inactive file pages", nil, nil)
	containerStartDesc = prometheus.NewDesc("container_start_time_seconds",
		"When the container's current run started, in seconds since the Unix epoch", []string{"container", "pod", "namespace"}, nil)
	containerCPUDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"CPU time the container's current run has used, in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemoryDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"Memory the container uses in bytes, less inactive file pages", []string{"container", "pod", "namespace"}, nil)
	podCPUDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"CPU time the pod has used, in core-seconds", []string{"pod", "namespace"}, nil)
	podMemoryDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"Memory the pod uses in bytes, less inactive file pages", []string{"pod", "namespace"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("scrape_error",
		"1 if reading the containers' usage failed, else 0", nil, nil)
	resourceScrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"1 if reading the containers' usage failed, else 0", nil, nil)
)

// resourceCollector turns each scrape's summary into the resource metrics.
type resourceCollector struct{ a *Agent }

func (resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUDesc, nodeMemoryDesc, containerStartDesc, containerCPUDesc, containerMemoryDesc,
		podCPUDesc, podMemoryDesc, scrapeErrorDesc, resourceScrapeErrorDesc} {
		ch <- d
	}
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.a.summary()
	failed := 0.0
	if err != nil {
		slog.Error("reading node usage", "err", err)
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed)
	ch <- prometheus.MustNewConstMetric(resourceScrapeErrorDesc, prometheus.GaugeValue, failed)
	sample := func(d *prometheus.Desc, t prometheus.ValueType, at metav1.Time, v float64, labels ...string) {
		ch <- prometheus.NewMetricWithTimestamp(at.Time, prometheus.MustNewConstMetric(d, t, v, labels...))
	}
	if cpu := s.Node.CPU; cpu != nil {
		sample(nodeCPUDesc, prometheus.CounterValue, cpu.Time, seconds(*cpu.UsageCoreNanoSeconds))
	}
	if mem := s.Node.Memory; mem != nil {
		sample(nodeMemoryDesc, prometheus.GaugeValue, mem.Time, float64(*mem.WorkingSetBytes))
	}
	for _, p := range s.Pods {
		for _, ct := range p.Containers {
			ch <- prometheus.MustNewConstMetric(containerStartDesc, prometheus.GaugeValue,
				float64(ct.StartTime.UnixNano())/float64(time.Second), ct.Name, p.PodRef.Name, p.PodRef.Namespace)
			sample(containerCPUDesc, prometheus.CounterValue, ct.CPU.Time, seconds(*ct.CPU.UsageCoreNanoSeconds), ct.Name, p.PodRef.Name, p.PodRef.Namespace)
			sample(containerMemoryDesc, prometheus.GaugeValue, ct.Memory.Time, float64(*ct.Memory.WorkingSetBytes), ct.Name, p.PodRef.Name, p.PodRef.Namespace)
		}
		if p.CPU != nil {
			sample(podCPUDesc, prometheus.CounterValue, p.CPU.Time, seconds(*p.CPU.UsageCoreNanoSeconds), p.PodRef.Name, p.PodRef.Namespace)
			sample(podMemoryDesc, prometheus.GaugeValue, p.Memory.Time, float64(*p.Memory.WorkingSetBytes), p.PodRef.Name, p.PodRef.Namespace)
		}
	}
}

func seconds(ns uint64) float64 { return float64(ns) / float64(time.Second) }

// resourceMetricsHandler serves /metrics/resource in the Prometheus text format.
func (a *Agent) resourceMetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(resourceCollector{a})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
