package podgc

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// p builds a pod: age in minutes before t0 (older = larger), phase, reason, node, deleting.
func p(name string, age int, phase corev1.PodPhase, reason, node string, deleting bool) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-time.Duration(age) * time.Minute))},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase, Reason: reason},
	}
	if deleting {
		ts := metav1.NewTime(t0)
		pod.DeletionTimestamp = &ts
	}
	return pod
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// TestOptions: --terminated-pod-gc-threshold as given on the command line (0: keep every
// terminated pod), and what Validate refuses.
func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		edit      func(*Options)
		threshold int
		errs      int
	}{
		{"defaults", nil, nil, 12500, 0},
		{"threshold", []string{"--terminated-pod-gc-threshold=100"}, nil, 100, 0},
		{"0 keeps them all", []string{"--terminated-pod-gc-threshold=0"}, nil, 0, 0},
		{"negative", []string{"--terminated-pod-gc-threshold=-1"}, nil, -1, 1},
		{"no period", nil, func(o *Options) { o.PodGCPeriod = 0 }, 12500, 1},
		{"negative quarantine", nil, func(o *Options) { o.PodGCQuarantine = -time.Second }, 12500, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(o)
			}
			if o.TerminatedPodGCThreshold != tc.threshold {
				t.Errorf("threshold %d, want %d", o.TerminatedPodGCThreshold, tc.threshold)
			}
			if errs := o.Validate(); len(errs) != tc.errs {
				t.Errorf("Validate: %v, want %d errors", errs, tc.errs)
			}
		})
	}
	if _, err := New(&controller.Context{Client: c, Informers: cache.NewFactory(c, "")}, &Options{TerminatedPodGCThreshold: -1, PodGCPeriod: time.Second}); err == nil {
		t.Error("New with a negative threshold: no error")
	}
}

func TestTerminatedToDelete(t *testing.T) {
	pods := []*corev1.Pod{
		p("run", 100, corev1.PodRunning, "", "n", false),
		p("ok-new", 1, corev1.PodSucceeded, "", "n", false),
		p("ok-old", 50, corev1.PodSucceeded, "", "n", false),
		p("fail-mid", 10, corev1.PodFailed, "", "n", false),
		p("evicted-new", 2, corev1.PodFailed, evictedReason, "n", false),
		p("tie-b", 30, corev1.PodFailed, "", "n", false),
		p("tie-a", 30, corev1.PodSucceeded, "", "n", false),
		p("pending", 200, corev1.PodPending, "", "", false),
	}
	for _, tc := range []struct {
		threshold int
		want      []string
	}{
		{6, nil},
		{10, nil},
		{5, []string{"evicted-new"}},
		{3, []string{"evicted-new", "ok-old", "tie-a"}},
		{0, []string{"evicted-new", "ok-old", "tie-a", "tie-b", "fail-mid", "ok-new"}},
	} {
		got := names(terminatedToDelete(slices.Clone(pods), tc.threshold))
		if !slices.Equal(got, tc.want) {
			t.Errorf("threshold %d: %v, want %v", tc.threshold, got, tc.want)
		}
	}
}

func TestOrphansAndUnscheduled(t *testing.T) {
	pods := []*corev1.Pod{
		p("on-a", 1, corev1.PodRunning, "", "a", false),
		p("on-gone", 1, corev1.PodRunning, "", "gone", false),
		p("on-gone-2", 1, corev1.PodSucceeded, "", "gone", false),
		p("on-other", 1, corev1.PodRunning, "", "other", false),
		p("unbound", 1, corev1.PodPending, "", "", false),
		p("unbound-deleting", 1, corev1.PodPending, "", "", true),
		p("bound-deleting", 1, corev1.PodRunning, "", "a", true),
	}
	nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}
	missing := missingNodes(pods, nodes)
	if want := map[string]bool{"gone": true, "other": true}; !mapsEqual(missing, want) {
		t.Errorf("missing %v, want %v", missing, want)
	}
	if got, want := names(orphans(pods, map[string]bool{"gone": true})), []string{"on-gone", "on-gone-2"}; !slices.Equal(got, want) {
		t.Errorf("orphans %v, want %v", got, want)
	}
	if got, want := names(unscheduledTerminating(pods)), []string{"unbound-deleting"}; !slices.Equal(got, want) {
		t.Errorf("unscheduled terminating %v, want %v", got, want)
	}
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestQuarantine(t *testing.T) {
	q := newQuarantine(40 * time.Second)
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	for i, step := range []struct {
		at      time.Duration
		missing map[string]bool
		want    []string
	}{
		{0, set("a", "b"), nil},
		{20 * time.Second, set("a", "b", "c"), nil},
		{40 * time.Second, set("a", "b", "c"), []string{"a", "b"}},
		{50 * time.Second, set("b", "c"), []string{"b"}},           // a came back
		{60 * time.Second, set("a", "b", "c"), []string{"b", "c"}}, // a starts again
		{100 * time.Second, set("a"), []string{"a"}},
	} {
		if got := q.observe(step.missing, t0.Add(step.at)); !slices.Equal(got, step.want) {
			t.Errorf("step %d: due %v, want %v", i, got, step.want)
		}
	}
}

func start(t *testing.T, o *Options) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(cctx, o)
	if err != nil {
		t.Fatal(err)
	}
	testserver.RunControllers(t, cctx, ctrl)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, what, 15*time.Second, cond)
}

// TestCollect runs the collector against the apiserver: with a threshold of 2 the oldest
// terminated pod goes; pods of a node that does not exist go once the quarantine is over; a
// node that exists keeps its pods.
func TestCollect(t *testing.T) {
	ctx := context.Background()
	ns := testserver.Namespace(t, c, "podgc-")
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	nodes := client.Resource[*corev1.Node](c, "nodes")
	nodeName := ns + "-node"
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(ctx, nodeName, metav1.DeleteOptions{}) })

	mk := func(name, node string, phase corev1.PodPhase) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		created, err := pods.Create(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		if phase != "" {
			created.Status.Phase = phase
			if _, err := pods.UpdateStatus(ctx, created); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(1100 * time.Millisecond) // distinct creation timestamps (seconds)
	}
	// The orphan is the oldest: the collector marks it Failed before deleting it, and a pass
	// that sees it Failed in between counts it among the terminated pods, where being the
	// oldest it is the one to go, as it is anyway.
	mk("orphan", "no-such-node-"+ns, corev1.PodRunning)
	mk("done-1", nodeName, corev1.PodSucceeded)
	mk("done-2", nodeName, corev1.PodFailed)
	mk("done-3", nodeName, corev1.PodSucceeded)
	mk("running", nodeName, corev1.PodRunning)

	o := DefaultOptions()
	o.TerminatedPodGCThreshold, o.PodGCPeriod, o.PodGCQuarantine = 2, 50*time.Millisecond, 300*time.Millisecond
	start(t, o)
	left := func() []string {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return names(list.Items)
	}
	want := []string{"done-2", "done-3", "running"}
	waitFor(t, fmt.Sprintf("pods %v", want), func() bool {
		got := left()
		slices.Sort(got)
		return slices.Equal(got, want)
	})
}
