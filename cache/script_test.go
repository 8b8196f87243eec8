package cache

// A small script language drives a DeltaFIFO and the store its process loop fills, so that unit
// tests read as data and the differential tests can run one script against ours and client-go's.
//
//	add ns/name@rv   update ns/name@rv   delete ns/name@rv
//	replace ns/name@rv ...   (the full list; may be empty)
//	resync
//	pop        pop one key and apply its deltas to the store, as an informer's process loop does
//	popfail    pop one key, and have process return an error (nothing is applied)
//
// Keys without a slash are cluster-scoped. Ops are separated by ";". The FIFO under test is
// closed before the script starts, so pop never blocks: it reports "closed" when empty.

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kind makes test objects of one type.
type kind[T Object] struct {
	name string
	mk   func(meta metav1.ObjectMeta) T
}

var (
	podKind = kind[*corev1.Pod]{"Pod", func(m metav1.ObjectMeta) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: m, Spec: corev1.PodSpec{NodeName: "node-" + m.ResourceVersion}}
	}}
	configMapKind = kind[*corev1.ConfigMap]{"ConfigMap", func(m metav1.ObjectMeta) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: m, Data: map[string]string{"rv": m.ResourceVersion}}
	}}
)

// testMeta gives the object labels that vary with rv, so index values change on updates.
func testMeta(key, rv string) metav1.ObjectMeta {
	ns, name, err := SplitKey(key)
	if err != nil {
		panic(err)
	}
	n, _ := strconv.Atoi(rv)
	labels := map[string]string{"app": name}
	if n%3 != 0 {
		labels["tier"] = "t" + strconv.Itoa(n%2)
	}
	return metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, Labels: labels}
}

func (k kind[T]) obj(key, rv string) T { return k.mk(testMeta(key, rv)) }

// labelIndexFunc is a multi-valued index: one value per label, none for every seventh rv.
func labelIndexFunc(obj metav1.Object) []string {
	if n, _ := strconv.Atoi(obj.GetResourceVersion()); n%7 == 0 {
		return nil
	}
	var out []string
	for k, v := range obj.GetLabels() {
		out = append(out, k+"="+v)
	}
	return out
}

func testIndexers[T Object]() Indexers[T] {
	return Indexers[T]{
		NamespaceIndex: MetaNamespaceIndexFunc[T],
		"labels":       func(obj T) ([]string, error) { return labelIndexFunc(obj), nil },
	}
}

var errProcess = errors.New("process failed")

// fifoUnderTest is a DeltaFIFO and the store its process loop maintains.
type fifoUnderTest interface {
	add(key, rv string) error
	update(key, rv string) error
	delete(key, rv string) error
	replace(items [][2]string) error
	resync() error
	// pop formats what was popped: "key [Type@rv Type@rv! ...]" (! marks FinalStateUnknown),
	// with " (initial)" appended when isInInitialList; "closed" when there was nothing.
	pop(fail bool) (string, error)
	hasSynced() bool
	// store formats the store: its objects and the namespace and labels indices.
	store() string
}

type step struct {
	op, result string
	synced     bool
}

func (s step) String() string { return fmt.Sprintf("%s => %s synced=%v", s.op, s.result, s.synced) }

func splitItem(item string) (key, rv string) {
	key, rv, ok := strings.Cut(item, "@")
	if !ok {
		panic("item without @rv: " + item)
	}
	return key, rv
}

// runScript runs script against d and returns one step per op.
func runScript(t testing.TB, d fifoUnderTest, script string) []step {
	t.Helper()
	var steps []step
	for op := range strings.SplitSeq(script, ";") {
		op = strings.TrimSpace(op)
		if op == "" {
			continue
		}
		fields := strings.Fields(op)
		var (
			result string
			err    error
		)
		switch fields[0] {
		case "add", "update", "delete":
			key, rv := splitItem(fields[1])
			switch fields[0] {
			case "add":
				err = d.add(key, rv)
			case "update":
				err = d.update(key, rv)
			default:
				err = d.delete(key, rv)
			}
		case "replace":
			var items [][2]string
			for _, f := range fields[1:] {
				key, rv := splitItem(f)
				items = append(items, [2]string{key, rv})
			}
			err = d.replace(items)
		case "resync":
			err = d.resync()
		case "pop", "popfail":
			fail := fields[0] == "popfail"
			result, err = d.pop(fail)
			if fail && result != "closed" {
				if !errors.Is(err, errProcess) {
					t.Fatalf("%s: Pop returned %v, want the process error", op, err)
				}
				err = nil
			}
		default:
			t.Fatalf("bad op %q", op)
		}
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		steps = append(steps, step{op: op, result: result, synced: d.hasSynced()})
	}
	return steps
}

// popsAndSync condenses steps for unit tests: each pop's result, and "SYNCED" where HasSynced
// turned true.
func popsAndSync(steps []step) []string {
	var out []string
	synced := false
	for _, s := range steps {
		if s.result != "" {
			out = append(out, s.result)
		}
		if s.synced && !synced {
			out = append(out, "SYNCED")
		}
		synced = s.synced
	}
	return out
}

func formatDelta(typ string, obj metav1.Object, fsu bool) string {
	rv := "<nil>"
	if obj != nil && !reflect.ValueOf(obj).IsNil() {
		rv = obj.GetResourceVersion()
	}
	s := typ + "@" + rv
	if fsu {
		s += "!"
	}
	return s
}

func formatPop(key string, deltas []string, initial bool) string {
	s := key + " [" + strings.Join(deltas, " ") + "]"
	if initial {
		s += " (initial)"
	}
	return s
}

// storeView is what both Indexer implementations expose, in formatted form.
type storeView struct {
	items   map[string]string // key -> rv
	indices map[string]map[string][]string
}

func (v storeView) String() string {
	var parts, items []string
	for _, k := range slices.Sorted(maps.Keys(v.items)) {
		items = append(items, k+"@"+v.items[k])
	}
	if len(items) > 0 {
		parts = append(parts, strings.Join(items, " "))
	}
	for _, name := range slices.Sorted(maps.Keys(v.indices)) {
		s := name + ":"
		for _, val := range slices.Sorted(maps.Keys(v.indices[name])) {
			s += fmt.Sprintf(" %s=%v", val, v.indices[name][val])
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " | ")
}

// ourView formats our Indexer through its public reads, checking them against each other.
func ourView[T Object](t testing.TB, x *Indexer[T]) storeView {
	t.Helper()
	v := storeView{items: map[string]string{}, indices: map[string]map[string][]string{}}
	for _, obj := range x.List() {
		v.items[MetaNamespaceKey(obj)] = obj.GetResourceVersion()
	}
	keys := x.ListKeys()
	if len(keys) != len(v.items) || x.Len() != len(keys) {
		t.Fatalf("List has %d objects, ListKeys %d keys, Len %d", len(v.items), len(keys), x.Len())
	}
	for _, k := range keys {
		obj, ok := x.Get(k)
		if !ok || MetaNamespaceKey(obj) != k || v.items[k] != obj.GetResourceVersion() {
			t.Fatalf("Get(%q) = %v, %v; disagrees with List", k, obj, ok)
		}
	}
	for _, name := range []string{NamespaceIndex, "labels"} {
		vals := x.ListIndexFuncValues(name)
		if len(vals) == 0 {
			continue
		}
		m := map[string][]string{}
		for _, val := range vals {
			ks, err := x.IndexKeys(name, val)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.IsSorted(ks) {
				t.Fatalf("IndexKeys(%q, %q) = %v, not sorted", name, val, ks)
			}
			objs, err := x.ByIndex(name, val)
			if err != nil {
				t.Fatal(err)
			}
			var fromObjs []string
			for _, o := range objs {
				fromObjs = append(fromObjs, MetaNamespaceKey(o))
			}
			slices.Sort(fromObjs)
			if !slices.Equal(ks, fromObjs) {
				t.Fatalf("index %q value %q: IndexKeys %v, ByIndex %v", name, val, ks, fromObjs)
			}
			m[val] = ks
		}
		v.indices[name] = m
	}
	checkIndexConsistency(t, x)
	return v
}

// checkIndexConsistency recomputes every index from the stored objects and compares it with the
// Indexer's own, reading its internals.
func checkIndexConsistency[T Object](t testing.TB, x *Indexer[T]) {
	t.Helper()
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.indices) != len(x.funcs) || len(x.byName) != len(x.funcs) {
		t.Fatalf("%d index funcs, %d indices, %d names", len(x.funcs), len(x.indices), len(x.byName))
	}
	for i, f := range x.funcs {
		want := index{}
		buildIndex(want, f, x.items)
		if !reflect.DeepEqual(want, x.indices[i]) {
			t.Fatalf("index %q is %v, recomputed from the store %v", f.name, x.indices[i], want)
		}
	}
}

// ours drives our DeltaFIFO and Indexer.
type ours[T Object] struct {
	t    testing.TB
	kind kind[T]
	idx  *Indexer[T]
	f    *DeltaFIFO[T]
}

func newOurs[T Object](t testing.TB, k kind[T]) *ours[T] {
	idx := NewIndexer(testIndexers[T]())
	f := NewDeltaFIFO[T](idx)
	f.Close()
	return &ours[T]{t: t, kind: k, idx: idx, f: f}
}

func (o *ours[T]) add(key, rv string) error    { return o.f.Add(o.kind.obj(key, rv)) }
func (o *ours[T]) update(key, rv string) error { return o.f.Update(o.kind.obj(key, rv)) }
func (o *ours[T]) delete(key, rv string) error { return o.f.Delete(o.kind.obj(key, rv)) }
func (o *ours[T]) resync() error               { return o.f.Resync() }
func (o *ours[T]) hasSynced() bool             { return o.f.HasSynced() }
func (o *ours[T]) store() string               { return ourView(o.t, o.idx).String() }

func (o *ours[T]) replace(items [][2]string) error {
	list := make([]T, 0, len(items))
	for _, it := range items {
		list = append(list, o.kind.obj(it[0], it[1]))
	}
	return o.f.Replace(list, "99")
}

func (o *ours[T]) pop(fail bool) (string, error) {
	var result string
	err := o.f.Pop(func(key string, deltas []Delta[T], initial bool) error {
		var ds []string
		for _, d := range deltas {
			if MetaNamespaceKey(d.Object) != key {
				o.t.Fatalf("popped key %q with a delta for %q", key, MetaNamespaceKey(d.Object))
			}
			ds = append(ds, formatDelta(string(d.Type), d.Object, d.FinalStateUnknown))
		}
		result = formatPop(key, ds, initial)
		if fail {
			return errProcess
		}
		for _, d := range deltas {
			switch d.Type {
			case Added, Updated, Replaced, Sync:
				o.idx.Update(d.Object)
			case Deleted:
				o.idx.Delete(d.Object)
			}
		}
		return nil
	})
	if errors.Is(err, ErrFIFOClosed) {
		return "closed", nil
	}
	return result, err
}

type podT = corev1.Pod
