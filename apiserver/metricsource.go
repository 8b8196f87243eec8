package apiserver

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
)

// Resource usage for metrics.k8s.io comes from the nodes' /metrics/resource: cumulative CPU
// time and the memory working set, each sample with the time it was read. CPU usage is a
// rate, so it needs two samples, as metrics-server's does. metrics-server scrapes every node
// every 15 s and keeps the last two scrapes; this server scrapes a node when a request needs
// it and keeps, per node, the last two scrapes at least minWindow apart. A request takes the
// rate between a fresh scrape and the newest kept one at least minWindow older; when there is
// none (the node's first request, or an idle minute), it scrapes, waits minWindow, and
// scrapes again. So `kubectl top` answers at once when run again within maxWindow, and
// within about minWindow otherwise.
const (
	minWindow = time.Second
	maxWindow = time.Minute
	// scrapeTimeout bounds one node's answer.
	scrapeTimeout = 5 * time.Second
)

// sample is a cumulative CPU figure and a memory figure, each read at its time.
type sample struct {
	cpu     float64 // core-seconds
	cpuAt   time.Time
	memory  float64   // working set bytes
	started time.Time // containers: when the run started (its CPU time counts from there)
}

type containerKey struct{ namespace, pod, container string }

// scrape is one node's /metrics/resource.
type scrape struct {
	at         time.Time
	node       *sample
	containers map[containerKey]*sample
}

// nodeSamples holds one node's kept scrapes; mu makes its requests take turns, so that
// concurrent requests share scrapes.
type nodeSamples struct {
	mu         sync.Mutex
	last, prev *scrape
	used       time.Time
}

// metricsSampler scrapes nodes for the metrics API.
type metricsSampler struct {
	client *http.Client
	mu     sync.Mutex
	nodes  map[string]*nodeSamples // by node name
}

func newMetricsSampler() *metricsSampler {
	return &metricsSampler{client: &http.Client{Timeout: scrapeTimeout,
		Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: scrapeTimeout}).DialContext, MaxIdleConnsPerHost: 2}},
		nodes: map[string]*nodeSamples{}}
}

// window is a node's usage between two scrapes.
type window struct{ cur, base *scrape }

// sample scrapes node now and returns the window to compute rates over.
func (m *metricsSampler) sample(ctx context.Context, node *corev1.Node) (window, error) {
	now := time.Now()
	m.mu.Lock()
	ns := m.nodes[node.Name]
	if ns == nil {
		ns = &nodeSamples{}
		m.nodes[node.Name] = ns
	}
	ns.used = now
	for name, other := range m.nodes { // forget nodes nobody asked about for long (deleted ones)
		if now.Sub(other.used) > 10*maxWindow {
			delete(m.nodes, name)
		}
	}
	m.mu.Unlock()

	ns.mu.Lock()
	defer ns.mu.Unlock()
	cur, err := m.fetch(ctx, node)
	if err != nil {
		return window{}, err
	}
	base := ns.baseFor(cur)
	if base == nil {
		select {
		case <-ctx.Done():
			return window{}, ctx.Err()
		case <-time.After(minWindow):
		}
		ns.keep(cur)
		base = cur
		if cur, err = m.fetch(ctx, node); err != nil {
			return window{}, err
		}
	}
	ns.keep(cur)
	return window{cur: cur, base: base}, nil
}

// baseFor is the newest kept scrape at least minWindow and at most maxWindow before cur.
func (ns *nodeSamples) baseFor(cur *scrape) *scrape {
	for _, s := range []*scrape{ns.last, ns.prev} {
		if s != nil {
			if age := cur.at.Sub(s.at); age >= minWindow && age <= maxWindow {
				return s
			}
		}
	}
	return nil
}

// keep keeps s when it is at least minWindow newer than the last kept scrape, so that the
// kept ones stay far enough apart to be a base.
func (ns *nodeSamples) keep(s *scrape) {
	if ns.last == nil || s.at.Sub(ns.last.at) >= minWindow {
		ns.prev, ns.last = ns.last, s
	}
}

// fetch reads and parses node's /metrics/resource.
func (m *metricsSampler) fetch(ctx context.Context, node *corev1.Node) (*scrape, error) {
	host, port := nodeEndpoint(node)
	loc := url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: "/metrics/resource"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping node %s: %w", node.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping node %s: %s", node.Name, resp.Status)
	}
	return parseResourceMetrics(resp.Body, time.Now())
}

// parseResourceMetrics reads the kubelet's resource metrics from the text format; samples
// without a timestamp count as read at at.
func parseResourceMetrics(r io.Reader, at time.Time) (*scrape, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing resource metrics: %w", err)
	}
	s := &scrape{at: at, containers: map[containerKey]*sample{}}
	container := func(labels map[string]string) *sample {
		k := containerKey{labels["namespace"], labels["pod"], labels["container"]}
		c := s.containers[k]
		if c == nil {
			c = &sample{}
			s.containers[k] = c
		}
		return c
	}
	for name, mf := range families {
		for _, mt := range mf.Metric {
			labels := map[string]string{}
			for _, l := range mt.Label {
				labels[l.GetName()] = l.GetValue()
			}
			value := mt.GetCounter().GetValue() + mt.GetGauge().GetValue() + mt.GetUntyped().GetValue()
			ts := at
			if mt.TimestampMs != nil {
				ts = time.UnixMilli(mt.GetTimestampMs())
			}
			switch name {
			case "node_cpu_usage_seconds_total":
				s.nodeSample().cpu, s.node.cpuAt = value, ts
			case "node_memory_working_set_bytes":
				s.nodeSample().memory = value
			case "container_cpu_usage_seconds_total":
				c := container(labels)
				c.cpu, c.cpuAt = value, ts
			case "container_memory_working_set_bytes":
				container(labels).memory = value
			case "container_start_time_seconds":
				sec, frac := math.Modf(value)
				container(labels).started = time.Unix(int64(sec), int64(frac*1e9))
			}
		}
	}
	return s, nil
}

func (s *scrape) nodeSample() *sample {
	if s.node == nil {
		s.node = &sample{}
	}
	return s.node
}

// usage is the CPU rate and memory of cur against base; ok is false when they do not make a
// window: no CPU figure, samples out of order, or no base and a container started less than
// minWindow ago. A container with no sample in base, or restarted since, counts from its
// start with zero CPU time, as metrics-server does for fresh containers.
func usage(cur, base *sample) (list corev1.ResourceList, at time.Time, win time.Duration, ok bool) {
	if cur == nil || cur.cpuAt.IsZero() {
		return nil, at, 0, false
	}
	if base == nil || base.cpuAt.IsZero() || !base.started.Equal(cur.started) || cur.cpu < base.cpu {
		if cur.started.IsZero() || cur.cpuAt.Sub(cur.started) < minWindow {
			return nil, at, 0, false
		}
		base = &sample{cpuAt: cur.started}
	}
	// The scrapes are minWindow apart by the apiserver's clock; the samples' own times (the
	// node's, in ms) may differ from that by a little, never by their order.
	win = cur.cpuAt.Sub(base.cpuAt)
	if win <= 0 {
		return nil, at, 0, false
	}
	nanoCores := (cur.cpu - base.cpu) / win.Seconds() * 1e9
	return corev1.ResourceList{
		corev1.ResourceCPU:    *apiresource.NewScaledQuantity(int64(nanoCores), apiresource.Nano),
		corev1.ResourceMemory: *apiresource.NewQuantity(int64(cur.memory), apiresource.BinarySI),
	}, cur.cpuAt, win, true
}
