package cache

// Differential tests: our DeltaFIFO and Indexer against client-go's on the same operations.
//
// client-go's DeltaFIFO is built the way its shared informer builds it (EmitDeltaTypeReplaced,
// MetaNamespaceKeyFunc, its indexer as known objects), except that its known objects list keys
// in sorted order: client-go then queues the deletions of Replace and the syncs of Resync in the
// same order as ours, which sorts them, instead of in map order.

import (
	"fmt"
	"math/rand"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cg "k8s.io/client-go/tools/cache"
)

type sortedKnown struct{ cg.Indexer }

func (s sortedKnown) ListKeys() []string {
	keys := s.Indexer.ListKeys()
	slices.Sort(keys)
	return keys
}

func newClientGoIndexer(withLabels bool) cg.Indexer {
	indexers := cg.Indexers{cg.NamespaceIndex: cg.MetaNamespaceIndexFunc}
	if withLabels {
		indexers["labels"] = clientGoLabelIndexFunc
	}
	// The informer's key function: Delete is handed DeletedFinalStateUnknown tombstones.
	return cg.NewIndexer(cg.DeletionHandlingMetaNamespaceKeyFunc, indexers)
}

func clientGoLabelIndexFunc(obj any) ([]string, error) {
	return labelIndexFunc(obj.(metav1.Object)), nil
}

// theirs drives client-go's DeltaFIFO and indexer.
type theirs[T Object] struct {
	t    testing.TB
	kind kind[T]
	idx  cg.Indexer
	f    *cg.DeltaFIFO
}

func newTheirs[T Object](t testing.TB, k kind[T]) *theirs[T] {
	idx := newClientGoIndexer(true)
	f := cg.NewDeltaFIFOWithOptions(cg.DeltaFIFOOptions{
		KeyFunction:           cg.MetaNamespaceKeyFunc,
		KnownObjects:          sortedKnown{idx},
		EmitDeltaTypeReplaced: true,
	})
	f.Close() // Pop never blocks; as in ours, Close does not stop producers
	return &theirs[T]{t: t, kind: k, idx: idx, f: f}
}

func (c *theirs[T]) add(key, rv string) error    { return c.f.Add(c.kind.obj(key, rv)) }
func (c *theirs[T]) update(key, rv string) error { return c.f.Update(c.kind.obj(key, rv)) }
func (c *theirs[T]) delete(key, rv string) error { return c.f.Delete(c.kind.obj(key, rv)) }
func (c *theirs[T]) resync() error               { return c.f.Resync() }
func (c *theirs[T]) hasSynced() bool             { return c.f.HasSynced() }
func (c *theirs[T]) store() string               { return clientGoView(c.t, c.idx).String() }

func (c *theirs[T]) replace(items [][2]string) error {
	list := make([]any, 0, len(items))
	for _, it := range items {
		list = append(list, c.kind.obj(it[0], it[1]))
	}
	return c.f.Replace(list, "99")
}

func (c *theirs[T]) pop(fail bool) (string, error) {
	var result string
	_, err := c.f.Pop(func(obj any, initial bool) error {
		deltas := obj.(cg.Deltas)
		key, err := c.f.KeyOf(deltas)
		if err != nil {
			c.t.Fatal(err)
		}
		var ds []string
		for _, d := range deltas {
			o, fsu := d.Object, false
			if tomb, ok := o.(cg.DeletedFinalStateUnknown); ok {
				if tomb.Key != key {
					c.t.Fatalf("popped key %q with a tombstone for %q", key, tomb.Key)
				}
				o, fsu = tomb.Obj, true
			}
			var m metav1.Object
			if o != nil {
				m = o.(metav1.Object)
				if k, _ := cg.MetaNamespaceKeyFunc(m); k != key {
					c.t.Fatalf("popped key %q with a delta for %q", key, k)
				}
			}
			ds = append(ds, formatDelta(string(d.Type), m, fsu))
		}
		result = formatPop(key, ds, initial)
		if fail {
			return errProcess
		}
		// What client-go's processDeltas does to the store.
		for _, d := range deltas {
			switch d.Type {
			case cg.Sync, cg.Replaced, cg.Added, cg.Updated:
				if _, exists, _ := c.idx.Get(d.Object); exists {
					err = c.idx.Update(d.Object)
				} else {
					err = c.idx.Add(d.Object)
				}
			case cg.Deleted:
				err = c.idx.Delete(d.Object)
			}
			if err != nil {
				c.t.Fatal(err)
			}
		}
		return nil
	})
	if err == cg.ErrFIFOClosed {
		return "closed", nil
	}
	return result, err
}

func clientGoView(t testing.TB, x cg.Indexer) storeView {
	t.Helper()
	v := storeView{items: map[string]string{}, indices: map[string]map[string][]string{}}
	for _, obj := range x.List() {
		m := obj.(metav1.Object)
		key, _ := cg.MetaNamespaceKeyFunc(m)
		v.items[key] = m.GetResourceVersion()
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
			m[val] = ks
		}
		v.indices[name] = m
	}
	return v
}

// compareRuns runs script on ours and client-go's and reports the first difference.
func compareRuns[T Object](t *testing.T, k kind[T], script string) []step {
	t.Helper()
	o, c := newOurs(t, k), newTheirs(t, k)
	ourSteps, theirSteps := runScript(t, o, script), runScript(t, c, script)
	for i := range ourSteps {
		if ourSteps[i] != theirSteps[i] {
			t.Fatalf("%s: step %d differs\n ours:      %v\n client-go: %v\nscript: %s\nsteps so far:\n%s",
				k.name, i, ourSteps[i], theirSteps[i], script, formatSteps(ourSteps[:i]))
		}
	}
	if os, cs := o.store(), c.store(); os != cs {
		t.Fatalf("%s: final stores differ\n ours:      %s\n client-go: %s\nscript: %s", k.name, os, cs, script)
	}
	return ourSteps
}

func formatSteps(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "  %v\n", s)
	}
	return b.String()
}

func TestDeltaFIFODiffTable(t *testing.T) {
	for _, tc := range fifoCases {
		t.Run(tc.name, func(t *testing.T) {
			compareRuns(t, podKind, tc.script)
			compareRuns(t, configMapKind, tc.script)
		})
	}
}

// randomScript makes a sequence of DeltaFIFO operations over a small key space, so keys collide
// often, ending with pops that drain the queue.
func randomScript(r *rand.Rand, ops int) string {
	keys := []string{"a/p0", "a/p1", "a/p2", "b/p0", "b/p1", "b/p2", "n0", "n1"}
	rv := 0
	next := func() string { rv++; return strconv.Itoa(rv) }
	item := func() string { return keys[r.Intn(len(keys))] + "@" + next() }
	replace := func() string {
		s := "replace"
		for _, k := range keys {
			if r.Intn(2) == 0 {
				s += " " + k + "@" + next()
				if r.Intn(10) == 0 { // the same key twice in one list
					s += " " + k + "@" + next()
				}
			}
		}
		return s
	}
	var out []string
	if r.Intn(2) == 0 { // as a reflector starts: with a list
		out = append(out, replace())
	}
	for len(out) < ops {
		switch n := r.Intn(100); {
		case n < 18:
			out = append(out, "add "+item())
		case n < 36:
			out = append(out, "update "+item())
		case n < 50:
			out = append(out, "delete "+item())
		case n < 57:
			out = append(out, replace())
		case n < 63:
			out = append(out, "resync")
		case n < 67:
			out = append(out, "popfail")
		default:
			out = append(out, "pop")
		}
	}
	for range len(keys) + 1 {
		out = append(out, "pop")
	}
	return strings.Join(out, "; ")
}

func TestDeltaFIFODiffRandom(t *testing.T) {
	seeds := 1500
	if testing.Short() {
		seeds = 150
	}
	// How often the runs hit each behaviour, to show the random scripts reach all of them.
	features := map[string]*regexp.Regexp{
		"Added":                   regexp.MustCompile(`Added@`),
		"Updated":                 regexp.MustCompile(`Updated@`),
		"Deleted":                 regexp.MustCompile(`Deleted@\d+[] ]`),
		"Deleted, state unknown":  regexp.MustCompile(`Deleted@\d+!`),
		"Replaced":                regexp.MustCompile(`Replaced@`),
		"Sync":                    regexp.MustCompile(`Sync@`),
		"initial list":            regexp.MustCompile(`\(initial\)`),
		"several deltas":          regexp.MustCompile(`\[\S+ \S+`),
		"replace, deleted in one": regexp.MustCompile(`Replaced@\d+ Deleted`),
		"empty queue":             regexp.MustCompile(`^closed$`),
	}
	hits := map[string]int{}
	unsynced := 0
	for seed := range seeds {
		r := rand.New(rand.NewSource(int64(seed)))
		script := randomScript(r, 10+r.Intn(70))
		var steps []step
		if seed%4 == 0 {
			steps = compareRuns(t, configMapKind, script)
		} else {
			steps = compareRuns(t, podKind, script)
		}
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
		for _, s := range steps {
			for name, re := range features {
				if re.MatchString(s.result) {
					hits[name]++
				}
			}
			if !s.synced {
				unsynced++
			}
		}
	}
	hits["HasSynced false"] = unsynced
	t.Logf("behaviours exercised (pops showing each): %v", hits)
	for name := range features {
		if hits[name] == 0 {
			t.Errorf("no run exercised %q", name)
		}
	}
}

// TestIndexerDiffRandom applies the same writes to our Indexer and client-go's, adding the
// labels index part-way through, and compares every read after every write.
func TestIndexerDiffRandom(t *testing.T) {
	seeds := 250
	if testing.Short() {
		seeds = 25
	}
	keys := []string{"a/p0", "a/p1", "a/p2", "b/p0", "b/p1", "c/p0", "n0", "n1"}
	for seed := range seeds {
		r := rand.New(rand.NewSource(int64(seed)))
		ours := NewIndexer(Indexers[*podT]{NamespaceIndex: MetaNamespaceIndexFunc[*podT]})
		theirs := newClientGoIndexer(false)
		var log []string
		addIndexAt := r.Intn(40)
		for i := range 40 {
			rv := strconv.Itoa(seed*100 + i + 1)
			key := keys[r.Intn(len(keys))]
			obj := podKind.obj(key, rv)
			var op string
			switch n := r.Intn(10); {
			case i == addIndexAt:
				op = "AddIndexers(labels)"
				if err := ours.AddIndexers(Indexers[*podT]{"labels": testIndexers[*podT]()["labels"]}); err != nil {
					t.Fatal(err)
				}
				if err := theirs.AddIndexers(cg.Indexers{"labels": clientGoLabelIndexFunc}); err != nil {
					t.Fatal(err)
				}
			case n < 3:
				op = "Add " + key + "@" + rv
				ours.Add(obj)
				_ = theirs.Add(obj)
			case n < 6:
				op = "Update " + key + "@" + rv
				ours.Update(obj)
				_ = theirs.Update(obj)
			case n < 8:
				op = "Delete " + key
				ours.Delete(obj)
				_ = theirs.Delete(obj)
			default:
				var list []*podT
				var anyList []any
				for j, k := range keys {
					if r.Intn(2) == 0 {
						o := podKind.obj(k, strconv.Itoa(seed*100+i+1+j*7))
						list = append(list, o)
						anyList = append(anyList, o)
					}
				}
				op = fmt.Sprintf("Replace(%d items)", len(list))
				ours.Replace(list)
				_ = theirs.Replace(anyList, "")
			}
			log = append(log, op)
			if o, c := ourView(t, ours).String(), clientGoView(t, theirs).String(); o != c {
				t.Fatalf("seed %d after %v:\n ours:      %s\n client-go: %s", seed, log, o, c)
			}
		}
		// Both refuse an index name already in use.
		errOurs := ours.AddIndexers(Indexers[*podT]{NamespaceIndex: MetaNamespaceIndexFunc[*podT]})
		errTheirs := theirs.AddIndexers(cg.Indexers{NamespaceIndex: cg.MetaNamespaceIndexFunc})
		if (errOurs == nil) != (errTheirs == nil) || errOurs == nil {
			t.Fatalf("AddIndexers with a used name: ours %v, client-go %v", errOurs, errTheirs)
		}
	}
}
