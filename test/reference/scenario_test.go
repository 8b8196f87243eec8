//go:build linux

package reference

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A scenario is the script of a differential test of one controller: the same objects are
// created in namespace "<prefix>-reference", with the reference controller manager running, and
// then in "<prefix>-kplane" with kplane's, the test playing the node (and, where needed, the
// scheduler) by the same rules; after each step, once the controller has come to rest, the
// outcomes of the two runs must be equal, up to the differences the scenario tolerates.
type scenario struct {
	prefix string
	// controllers is the --controllers flag of both controller managers.
	controllers string
	// node plays the node for the pods of the namespace (nil: no pods to play).
	node  func(ctx context.Context, pods *client.Typed[*corev1.Pod]) cache.Handler[*corev1.Pod]
	steps []step
	// outcomes renders what the controller wrote in a namespace, by key, without what differs
	// between runs by nature (names with random suffixes, UIDs, times, hashes).
	outcomes func(ctx context.Context, c *client.Client, ns string) (map[string]string, error)
	// retire, when set, removes the run's controlled objects once its outcomes are taken, so
	// that the next controller manager does not act on them.
	retire func(ctx context.Context, c *client.Client, ns string) error
	// tolerate says why a difference between the outcomes for key after the named step is
	// expected ("" if it is not).
	tolerate func(step, key, ref, got string) string
}

// A step changes the namespace's objects (the first creates them) and says when the
// controller has done its part.
type step struct {
	name string
	act  func(ctx context.Context, c *client.Client, ns string) error
	// atRest lists what has not come to rest yet (none: the outcomes are then also required to
	// stay unchanged for stableFor).
	atRest func(ctx context.Context, c *client.Client, ns string) ([]string, error)
}

// stepTimeout bounds the wait for one step to come to rest.
const stepTimeout = 90 * time.Second

// runDifferential runs sc with the reference controller manager KPLANE_REFERENCE_KCM names
// (skipping the test without one) and then with kplane's, against one kplane apiserver, and
// reports the differences of each step's outcomes (with KPLANE_REFERENCE_SHOW set, it also logs
// the reference's outcomes).
func runDifferential(t *testing.T, sc scenario) {
	t.Helper()
	e := newEnv(t)
	ref := runScenario(t, e.c, e.logDir, "reference", e.referenceCommand(sc.controllers), sc)
	got := runScenario(t, e.c, e.logDir, "kplane", e.kplaneCommand(sc.controllers), sc)
	var diffs []string
	for i, st := range sc.steps {
		if os.Getenv("KPLANE_REFERENCE_SHOW") != "" {
			t.Logf("the reference's outcomes after %s:\n%s", st.name, render(ref[i]))
		}
		for _, key := range unionKeys(ref[i], got[i]) {
			r, g := ref[i][key], got[i][key]
			if r == g {
				continue
			}
			if why := tolerated(sc, st.name, key, r, g); why != "" {
				t.Logf("tolerated difference after %s, %s: %s\n- %s\n+ %s", st.name, key, why, r, g)
				continue
			}
			diffs = append(diffs, fmt.Sprintf("after %s, %s:\n- %s\n+ %s", st.name, key, r, g))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("kplane's %s controller differs from the reference's in %d ways (- reference, + kplane):\n%s",
			sc.controllers, len(diffs), strings.Join(diffs, "\n"))
	}
}

func tolerated(sc scenario, step, key, ref, got string) string {
	if sc.tolerate == nil {
		return ""
	}
	return sc.tolerate(step, key, ref, got)
}

// runScenario runs sc's steps in namespace "<prefix>-<name>" with the controller manager cmd
// and returns the outcomes after each step.
func runScenario(t *testing.T, c *client.Client, logDir, name string, cmd *exec.Cmd, sc scenario) []map[string]string {
	t.Helper()
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, which the informer waits for
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := sc.prefix + "-" + name
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if sc.node != nil {
		pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
		inf := cache.NewInformer[*corev1.Pod]("ref-pods", pods)
		inf.AddHandler(sc.node(ctx, pods), 0)
		wg.Go(func() { inf.Run(ctx) })
	}

	logs, err := os.Create(filepath.Join(logDir, name+"-"+sc.prefix+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopProcess(cmd)

	var out []map[string]string
	for _, st := range sc.steps {
		if err := st.act(ctx, c, ns); err != nil {
			t.Fatalf("%s: %s: %v", name, st.name, err)
		}
		deadline := time.Now().Add(stepTimeout)
		var last map[string]string
		var lastChange time.Time
		for {
			moving, err := st.atRest(ctx, c, ns)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, st.name, err)
			}
			now, err := sc.outcomes(ctx, c, ns)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, st.name, err)
			}
			if len(moving) > 0 || !maps.Equal(now, last) {
				last, lastChange = now, time.Now()
			} else if time.Since(lastChange) >= stableFor {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s: not at rest after %v (moving: %v); outcomes:\n%s\nlog: %s",
					name, st.name, stepTimeout, moving, render(now), tail(logs.Name()))
			}
			time.Sleep(200 * time.Millisecond)
		}
		out = append(out, last)
	}
	if sc.retire != nil {
		if err := sc.retire(ctx, c, ns); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func render(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "  %s: %s\n", k, m[k])
	}
	return b.String()
}

// runningAndReady is the node's part for a pod bound to it, or for any pod when bind is false:
// it runs, with its containers ready (the pod counts as available at once).
func runningAndReady(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	var cs []corev1.ContainerStatus
	for _, ctr := range p.Spec.Containers {
		cs = append(cs, corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	p.Status.ContainerStatuses = cs
	p.Status.StartTime = &now
	return p
}

// playNode plays the node for a controller's pods: a pod runs and is ready at once, a pod
// being deleted is gone. With bind, it plays the scheduler first: a pod whose required node
// affinity names one node is bound there, and only a bound pod runs.
func playNode(bind bool) func(ctx context.Context, pods *client.Typed[*corev1.Pod]) cache.Handler[*corev1.Pod] {
	return func(ctx context.Context, pods *client.Typed[*corev1.Pod]) cache.Handler[*corev1.Pod] {
		play := func(p *corev1.Pod) {
			switch {
			case p.DeletionTimestamp != nil:
				reapDeleted(ctx, pods, p)
			case bind && p.Spec.NodeName == "":
				if node := affinityNode(p); node != "" {
					_ = pods.CreateSubresource(ctx, p.Name, "binding", &corev1.Binding{
						ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
						Target:     corev1.ObjectReference{Kind: "Node", Name: node}}, nil)
				}
			case p.Status.Phase == "" || p.Status.Phase == corev1.PodPending:
				_, _ = pods.UpdateStatus(ctx, runningAndReady(p))
			}
		}
		return cache.Handler[*corev1.Pod]{
			OnAdd:    func(p *corev1.Pod, _ bool) { play(p) },
			OnUpdate: func(_, p *corev1.Pod) { play(p) },
		}
	}
}

// affinityNode is the one node a pod's required node affinity names by metadata.name.
func affinityNode(p *corev1.Pod) string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// reapDeleted is the kubelet's part for a pod being deleted: its containers stop at once
// (grace 0); a finalizer, if any, keeps it until the controller lets it go.
func reapDeleted(ctx context.Context, pods *client.Typed[*corev1.Pod], p *corev1.Pod) {
	if p.DeletionTimestamp != nil {
		_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	}
}

// sortedKeys renders a count per key as "k:n k:n", in key order.
func sortedCounts(counts map[string]int) string {
	var ps []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		ps = append(ps, fmt.Sprintf("%s:%d", k, counts[k]))
	}
	return strings.Join(ps, " ")
}

// list returns the objects of a resource in the namespace.
func list[T client.Object](ctx context.Context, c *client.Client, resource, ns string) ([]T, error) {
	l, err := client.Resource[T](c, resource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// listWithPods returns the objects of a resource in the namespace, and its pods.
func listWithPods[T client.Object](ctx context.Context, c *client.Client, resource, ns string) ([]T, []*corev1.Pod, error) {
	objs, err := list[T](ctx, c, resource, ns)
	if err != nil {
		return nil, nil, err
	}
	pods, err := list[*corev1.Pod](ctx, c, "pods", ns)
	return objs, pods, err
}

// unsettledPods names the pods being deleted, and those pending says are not settled either
// (nil: none).
func unsettledPods(pods []*corev1.Pod, pending func(*corev1.Pod) bool) []string {
	var out []string
	for _, p := range pods {
		if p.DeletionTimestamp != nil || pending != nil && pending(p) {
			out = append(out, "pod "+p.Name)
		}
	}
	return out
}

// modify gets an object, changes it and writes it back, again on a conflict.
func modify[T client.Object](ctx context.Context, api *client.Typed[T], name string, change func(T)) error {
	for {
		obj, err := api.Get(ctx, name)
		if err != nil {
			return err
		}
		change(obj)
		if _, err = api.Update(ctx, obj); !client.IsConflict(err) {
			return err
		}
	}
}

// deleteAll returns a retire function that deletes every object of the resource in the
// namespace, leaving what they own (no garbage collector runs).
func deleteAll[T client.Object](resource string) func(ctx context.Context, c *client.Client, ns string) error {
	return func(ctx context.Context, c *client.Client, ns string) error {
		objs, err := list[T](ctx, c, resource, ns)
		if err != nil {
			return err
		}
		api := client.Resource[T](c, resource).Namespace(ns)
		for _, obj := range objs {
			if err := api.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !client.IsNotFound(err) {
				return err
			}
		}
		return nil
	}
}

func createAll[T client.Object](ctx context.Context, c *client.Client, resource, ns string, objs []T) error {
	for _, o := range objs {
		if _, err := client.Resource[T](c, resource).Namespace(ns).Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", resource, o.GetName(), err)
		}
	}
	return nil
}

// revisions are one owner's ControllerRevisions: their numbers by hash and by name (a
// DaemonSet's pods name their revision by hash, a StatefulSet's by name).
type revisions struct {
	byKey   map[string]int64
	numbers []int64
}

// number names the revision a hash or name points to by its number.
func (r revisions) number(key string) string {
	if n, ok := r.byKey[key]; ok {
		return strconv.FormatInt(n, 10)
	}
	if key == "" {
		return "<none>"
	}
	return "<unknown revision>"
}

// String lists the revision numbers.
func (r revisions) String() string {
	slices.Sort(r.numbers)
	return fmt.Sprint(r.numbers)
}

// revisionsByOwner returns the namespace's ControllerRevisions by the name of their owner.
func revisionsByOwner(ctx context.Context, c *client.Client, ns string) (map[string]revisions, error) {
	l, err := list[*appsv1.ControllerRevision](ctx, c, "controllerrevisions", ns)
	if err != nil {
		return nil, err
	}
	out := map[string]revisions{}
	for _, cr := range l {
		owner := "<no owner>"
		if ref := metav1.GetControllerOf(cr); ref != nil {
			owner = ref.Name
		}
		r := out[owner]
		if r.byKey == nil {
			r.byKey = map[string]int64{}
		}
		r.byKey[cr.Labels[appsv1.ControllerRevisionHashLabelKey]] = cr.Revision
		r.byKey[cr.Name] = cr.Revision
		r.numbers = append(r.numbers, cr.Revision)
		out[owner] = r
	}
	return out, nil
}

func ownedBy(refs []metav1.OwnerReference, kind, name string) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.Kind == kind && r.Name == name })
}

func withoutKey(m map[string]string, key string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}
