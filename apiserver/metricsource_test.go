package apiserver

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestParseResourceMetrics(t *testing.T) {
	text := `# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="main",namespace="ns",pod="web"} 1.5 1700000000123
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="main",namespace="ns",pod="web"} 4096 1700000000123
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="main",namespace="ns",pod="web"} 1.6999999995e+09
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 1234.5 1700000000100
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1e+09 1700000000100
# TYPE scrape_error gauge
scrape_error 0
`
	at := time.Unix(1700000001, 0)
	s, err := parseResourceMetrics(strings.NewReader(text), at)
	if err != nil {
		t.Fatal(err)
	}
	if s.node == nil || s.node.cpu != 1234.5 || s.node.memory != 1e9 || !s.node.cpuAt.Equal(time.UnixMilli(1700000000100)) {
		t.Errorf("node %+v", s.node)
	}
	c := s.containers[containerKey{"ns", "web", "main"}]
	if c == nil || c.cpu != 1.5 || c.memory != 4096 || !c.cpuAt.Equal(time.UnixMilli(1700000000123)) || !c.started.Equal(time.Unix(1699999999, 5e8)) {
		t.Errorf("container %+v", c)
	}
	if _, err := parseResourceMetrics(strings.NewReader("not { metrics"), at); err == nil {
		t.Error("garbage parsed")
	}
}

func TestUsage(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	start := t0.Add(-time.Minute)
	pt := func(cpu float64, at time.Time, started time.Time) *sample {
		return &sample{cpu: cpu, cpuAt: at, memory: 1 << 20, started: started}
	}
	cases := []struct {
		name      string
		cur, base *sample
		milli     int64 // -1: no usage
		window    time.Duration
	}{
		{"rate over the window", pt(12, t0.Add(2*time.Second), start), pt(11, t0, start), 500, 2 * time.Second},
		{"idle", pt(11, t0.Add(time.Second), start), pt(11, t0, start), 0, time.Second},
		{"samples a little less than minWindow apart", pt(12, t0.Add(998*time.Millisecond), start), pt(11.5, t0, start), 502, 998 * time.Millisecond},
		{"samples out of order", pt(12, t0, start), pt(11, t0.Add(time.Millisecond), start), -1, 0},
		{"no base: from the start", pt(30, t0, start), nil, 500, time.Minute},
		{"restarted: from the new start", pt(1, t0, t0.Add(-4*time.Second)), pt(50, t0.Add(-10*time.Second), start), 250, 4 * time.Second},
		{"counter went back", pt(3, t0, start), pt(4, t0.Add(-time.Second), start), 50, time.Minute},
		{"started too recently", pt(0.1, t0, t0.Add(-100*time.Millisecond)), nil, -1, 0},
		{"node without a base", &sample{cpu: 5, cpuAt: t0}, nil, -1, 0},
		{"no cpu figure", &sample{memory: 5}, nil, -1, 0},
	}
	for _, tc := range cases {
		use, _, win, ok := usage(tc.cur, tc.base)
		if tc.milli < 0 {
			if ok {
				t.Errorf("%s: usage %v", tc.name, use)
			}
			continue
		}
		cpu, mem := use[corev1.ResourceCPU], use[corev1.ResourceMemory]
		if !ok || cpu.MilliValue() != tc.milli || win != tc.window || mem.Value() != 1<<20 {
			t.Errorf("%s: cpu %s (%dm) memory %s window %v ok %v; want %dm over %v", tc.name, cpu.String(), cpu.MilliValue(), mem.String(), win, ok, tc.milli, tc.window)
		}
	}
}

// TestKeptScrapes: the kept scrapes stay at least minWindow apart, and a base is the newest
// of them at least minWindow and at most maxWindow old.
func TestKeptScrapes(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	at := func(d time.Duration) *scrape { return &scrape{at: t0.Add(d)} }
	var ns nodeSamples
	steps := []struct {
		now      time.Duration
		wantBase time.Duration // -1: none
	}{
		{0, -1},
		{500 * time.Millisecond, -1}, // too close; not kept either
		{time.Second, 0},
		{1500 * time.Millisecond, 0}, // the last (1 s) is too recent, the one before will do
		{2100 * time.Millisecond, time.Second},
		{2 * time.Minute, -1}, // all too old
	}
	for _, st := range steps {
		cur := at(st.now)
		base := ns.baseFor(cur)
		switch {
		case st.wantBase < 0 && base != nil:
			t.Errorf("at %v: base %v, want none", st.now, base.at.Sub(t0))
		case st.wantBase >= 0 && (base == nil || base.at.Sub(t0) != st.wantBase):
			t.Errorf("at %v: base %v, want %v", st.now, base, st.wantBase)
		}
		ns.keep(cur)
	}
}
