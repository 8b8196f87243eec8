package cache

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// fifoCases are DeltaFIFO scripts with the pops they must produce (see popsAndSync) and,
// where it matters, the store the process loop ends with. They also run against client-go in
// the differential test.
var fifoCases = []struct {
	name, script string
	want         []string
	store        string // compared if set; "<empty>" for an empty store
}{
	{
		name:   "add then pop",
		script: "add a/x@1; pop; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "closed"},
		store:  "a/x@1 | labels: app=x=[a/x] tier=t1=[a/x] | namespace: a=[a/x]",
	},
	{
		name:   "cluster-scoped key",
		script: "add x@1; pop",
		want:   []string{"SYNCED", "x [Added@1]"},
		store:  "x@1 | labels: app=x=[x] tier=t1=[x] | namespace: =[x]",
	},
	{
		name:   "deltas stay with their key, keys pop in first-queued order",
		script: "add a/x@1; add a/y@2; update a/x@3; add b/x@4; pop; pop; pop; pop",
		want:   []string{"SYNCED", "a/x [Added@1 Updated@3]", "a/y [Added@2]", "b/x [Added@4]", "closed"},
	},
	{
		name:   "delete of a key neither known nor queued is dropped",
		script: "delete a/x@1; pop",
		want:   []string{"SYNCED", "closed"},
	},
	{
		name:   "delete of a queued key",
		script: "add a/x@1; delete a/x@2; pop",
		want:   []string{"SYNCED", "a/x [Added@1 Deleted@2]"},
		store:  "<empty>",
	},
	{
		name:   "delete of a known key",
		script: "add a/x@1; pop; delete a/x@2; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "a/x [Deleted@2]"},
		store:  "<empty>",
	},
	{
		name:   "consecutive deletes collapse to the first",
		script: "add a/x@1; pop; delete a/x@2; delete a/x@3; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "a/x [Deleted@2]"},
	},
	{
		name:   "a real delete replaces a queued final-state-unknown one",
		script: "add a/x@1; pop; replace; delete a/x@5; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "a/x [Deleted@5]"},
	},
	{
		name:   "a final-state-unknown delete does not replace a real one",
		script: "add a/x@1; pop; delete a/x@2; replace; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "a/x [Deleted@2]"},
	},
	{
		name:   "two final-state-unknown deletes collapse",
		script: "add a/x@1; pop; replace; replace; pop; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "a/x [Deleted@1!]", "closed"},
	},
	{
		name:   "delete after add is not collapsed",
		script: "add a/x@1; delete a/x@2; add a/x@3; delete a/x@4; pop",
		want:   []string{"SYNCED", "a/x [Added@1 Deleted@2 Added@3 Deleted@4]"},
	},
	{
		name:   "replace: listed objects in list order, then known objects missing from the list",
		script: "add a/x@1; add a/y@2; pop; pop; replace a/y@3 a/z@4; pop; pop; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "a/y [Added@2]", "a/y [Replaced@3]", "a/z [Replaced@4]", "a/x [Deleted@1!]"},
		store:  "a/y@3 a/z@4 | labels: app=y=[a/y] app=z=[a/z] tier=t0=[a/z] | namespace: a=[a/y a/z]",
	},
	{
		name:   "replace: a queued key missing from the list gets its newest object as final state",
		script: "add a/x@1; update a/x@2; replace a/y@3; pop; pop",
		want:   []string{"SYNCED", "a/x [Added@1 Updated@2 Deleted@2!]", "a/y [Replaced@3]"},
		store:  "a/y@3 | labels: app=y=[a/y] | namespace: a=[a/y]",
	},
	{
		name:   "replace: known and queued key missing from the list is deleted once",
		script: "add a/x@1; pop; update a/x@2; replace; pop; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "a/x [Updated@2 Deleted@2!]", "closed"},
	},
	{
		name:   "replace: duplicate keys in the list",
		script: "replace a/x@1 a/x@2; pop; pop",
		want:   []string{"a/x [Replaced@1 Replaced@2] (initial)", "SYNCED", "closed"},
	},
	{
		name:   "initial list: synced after its last key is popped",
		script: "replace a/x@1 a/y@2; pop; add a/z@3; pop; pop",
		want:   []string{"a/x [Replaced@1] (initial)", "a/y [Replaced@2] (initial)", "SYNCED", "a/z [Added@3]"},
	},
	{
		name:   "initial list: later deltas for its keys ride along",
		script: "replace a/x@1; delete a/x@2; pop",
		want:   []string{"a/x [Replaced@1 Deleted@2] (initial)", "SYNCED"},
		store:  "<empty>",
	},
	{
		name:   "initial list: an empty first replace syncs at once",
		script: "replace; pop",
		want:   []string{"SYNCED", "closed"},
	},
	{
		name:   "initial list: only the first replace counts",
		script: "replace a/x@1; pop; replace a/y@2; pop; pop",
		want:   []string{"a/x [Replaced@1] (initial)", "SYNCED", "a/y [Replaced@2]", "a/x [Deleted@1!]"},
	},
	{
		name:   "initial list: none when an add comes first",
		script: "add a/x@1; replace a/y@2; pop; pop",
		want:   []string{"SYNCED", "a/x [Added@1 Deleted@1!]", "a/y [Replaced@2]"},
	},
	{
		name:   "initial list: a failed pop still counts",
		script: "replace a/x@1; popfail; pop",
		want:   []string{"a/x [Replaced@1] (initial)", "SYNCED", "closed"},
		store:  "<empty>",
	},
	{
		name:   "resync before anything queues nothing and does not sync",
		script: "resync; pop",
		want:   []string{"closed"},
	},
	{
		name:   "resync: known keys without queued deltas, in key order",
		script: "replace b/x@1 a/x@2 c/x@3; pop; pop; pop; update b/x@4; resync; pop; pop; pop; pop",
		want: []string{
			"b/x [Replaced@1] (initial)", "a/x [Replaced@2] (initial)", "c/x [Replaced@3] (initial)", "SYNCED",
			"b/x [Updated@4]", "a/x [Sync@2]", "c/x [Sync@3]", "closed",
		},
		store: "a/x@2 b/x@4 c/x@3 | labels: app=x=[a/x b/x c/x] tier=t0=[a/x b/x] | namespace: a=[a/x] b=[b/x] c=[c/x]",
	},
	{
		name:   "resync then delete",
		script: "add a/x@1; pop; resync; delete a/x@2; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "a/x [Sync@1 Deleted@2]"},
		store:  "<empty>",
	},
	{
		name:   "a failed pop is not requeued",
		script: "add a/x@1; popfail; pop",
		want:   []string{"SYNCED", "a/x [Added@1]", "closed"},
		store:  "<empty>",
	},
}

func TestDeltaFIFOScripts(t *testing.T) {
	for _, tc := range fifoCases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOurs(t, podKind)
			steps := runScript(t, o, tc.script)
			if got := popsAndSync(steps); !slices.Equal(got, tc.want) {
				t.Errorf("pops:\n got  %q\n want %q", got, tc.want)
			}
			if tc.store == "" {
				return
			}
			want := tc.store
			if want == "<empty>" {
				want = ""
			}
			if got := o.store(); got != want {
				t.Errorf("store:\n got  %s\n want %s", got, want)
			}
		})
	}
}

func TestDeltaFIFOPopBlocksUntilAddOrClose(t *testing.T) {
	f := NewDeltaFIFO[*corev1.Pod](nil)
	got := make(chan string)
	go func() {
		for {
			err := f.Pop(func(key string, deltas []Delta[*corev1.Pod], _ bool) error {
				got <- key
				return nil
			})
			if err != nil {
				got <- err.Error()
				return
			}
		}
	}()
	select {
	case k := <-got:
		t.Fatalf("Pop returned %q from an empty queue", k)
	case <-time.After(20 * time.Millisecond):
	}
	if err := f.Add(podKind.obj("a/x", "1")); err != nil {
		t.Fatal(err)
	}
	if k := <-got; k != "a/x" {
		t.Fatalf("popped %q, want a/x", k)
	}
	f.Close()
	if k := <-got; k != ErrFIFOClosed.Error() {
		t.Fatalf("after Close, Pop gave %q, want ErrFIFOClosed", k)
	}
	if !f.IsClosed() {
		t.Fatal("IsClosed() = false after Close")
	}
	f.Close() // harmless
}

func TestDeltaFIFOClosedStillDrains(t *testing.T) {
	f := NewDeltaFIFO[*corev1.Pod](nil)
	f.Close()
	if err := f.Add(podKind.obj("a/x", "1")); err != nil {
		t.Fatal(err)
	}
	var popped string
	if err := f.Pop(func(key string, _ []Delta[*corev1.Pod], _ bool) error { popped = key; return nil }); err != nil || popped != "a/x" {
		t.Fatalf("Pop = %v, key %q; want nil, a/x", err, popped)
	}
	if err := f.Pop(func(string, []Delta[*corev1.Pod], bool) error { return nil }); !errors.Is(err, ErrFIFOClosed) {
		t.Fatalf("Pop on closed empty FIFO = %v, want ErrFIFOClosed", err)
	}
}

// TestDeltaFIFOConcurrent has several producers, each owning some keys and sending increasing
// versions of them, and several consumers. Every delta must be delivered exactly once, in order
// per key.
func TestDeltaFIFOConcurrent(t *testing.T) {
	const producers, keysEach, versions, consumers = 4, 25, 20, 3
	f := NewDeltaFIFO[*corev1.ConfigMap](nil)
	var (
		mu   sync.Mutex
		seen = map[string][]int{}
		wg   sync.WaitGroup
	)
	for c := 0; c < consumers; c++ {
		wg.Go(func() {
			for {
				err := f.Pop(func(key string, deltas []Delta[*corev1.ConfigMap], _ bool) error {
					mu.Lock()
					defer mu.Unlock()
					for _, d := range deltas {
						rv, _ := strconv.Atoi(d.Object.ResourceVersion)
						seen[key] = append(seen[key], rv)
					}
					return nil
				})
				if errors.Is(err, ErrFIFOClosed) {
					return
				}
			}
		})
	}
	var pwg sync.WaitGroup
	for p := 0; p < producers; p++ {
		pwg.Go(func() {
			for v := 1; v <= versions; v++ {
				for k := 0; k < keysEach; k++ {
					obj := configMapKind.obj(fmt.Sprintf("p%d/k%d", p, k), strconv.Itoa(v))
					var err error
					if v == 1 {
						err = f.Add(obj)
					} else {
						err = f.Update(obj)
					}
					if err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	pwg.Wait()
	// Let the consumers drain, then stop them.
	for f.Len() > 0 {
		time.Sleep(time.Millisecond)
	}
	f.Close()
	wg.Wait()
	// A consumer may still have been inside process when Len hit 0; wg.Wait covers that.
	if len(seen) != producers*keysEach {
		t.Fatalf("saw %d keys, want %d", len(seen), producers*keysEach)
	}
	for key, rvs := range seen {
		want := make([]int, versions)
		for i := range want {
			want[i] = i + 1
		}
		if !slices.Equal(rvs, want) {
			t.Errorf("%s: deltas %v, want %v", key, rvs, want)
		}
	}
}

func TestDeltaFIFOSyncedChannel(t *testing.T) {
	f := NewDeltaFIFO[*corev1.Pod](nil)
	if err := f.Replace([]*corev1.Pod{podKind.obj("a/x", "1")}, "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Synced():
		t.Fatal("Synced closed before the initial list was popped")
	default:
	}
	if err := f.Pop(func(_ string, _ []Delta[*corev1.Pod], initial bool) error {
		if !initial {
			t.Error("isInInitialList = false for the initial list")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Synced():
	default:
		t.Fatal("Synced not closed after the initial list was popped")
	}
	if !f.HasSynced() {
		t.Fatal("HasSynced() = false")
	}
}

func TestDeltaFIFORefusesNamelessObjects(t *testing.T) {
	f := NewDeltaFIFO[*corev1.Pod](nil)
	bad := &corev1.Pod{}
	bad.Namespace = "a"
	for name, err := range map[string]error{
		"Add":     f.Add(bad),
		"Update":  f.Update(bad),
		"Delete":  f.Delete(bad),
		"Replace": f.Replace([]*corev1.Pod{podKind.obj("a/x", "1"), bad}, "1"),
	} {
		if err == nil {
			t.Errorf("%s accepted an object without a name", name)
		}
	}
	if f.Len() != 0 || f.HasSynced() {
		t.Fatalf("refused input changed the FIFO: Len %d, HasSynced %v", f.Len(), f.HasSynced())
	}
}

func TestDeltaFIFOListKeys(t *testing.T) {
	f := NewDeltaFIFO[*corev1.Pod](nil)
	for _, k := range []string{"b/x", "a/x", "b/x", "c"} {
		if err := f.Update(podKind.obj(k, "1")); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := f.ListKeys(), []string{"b/x", "a/x", "c"}; !slices.Equal(got, want) || f.Len() != 3 {
		t.Fatalf("ListKeys = %v, Len %d; want %v", got, f.Len(), want)
	}
}

// vanishingKnown lists keys it cannot then return, as a store changed behind the FIFO's back would.
type vanishingKnown struct{ keys []string }

func (v vanishingKnown) ListKeys() []string             { return v.keys }
func (v vanishingKnown) Get(string) (*corev1.Pod, bool) { return nil, false }

func TestDeltaFIFOKnownKeyVanishing(t *testing.T) {
	f := NewDeltaFIFO[*corev1.Pod](vanishingKnown{keys: []string{"a/gone"}})
	if err := f.Replace([]*corev1.Pod{podKind.obj("a/x", "1")}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Resync(); err != nil {
		t.Fatal(err)
	}
	if got := f.ListKeys(); !slices.Equal(got, []string{"a/x"}) {
		t.Fatalf("queued %v, want only a/x: no delta can be made for a key without an object", got)
	}
	if err := f.Pop(func(string, []Delta[*corev1.Pod], bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if !f.HasSynced() {
		t.Fatal("HasSynced() = false after popping the whole initial list")
	}
}

func TestDeltaFIFONilKnown(t *testing.T) {
	f := NewDeltaFIFO[*corev1.Pod](nil)
	f.Close()
	steps := runScript(t, &ours[*corev1.Pod]{t: t, kind: podKind, idx: NewIndexer[*corev1.Pod](nil), f: f},
		"add a/x@1; pop; delete a/x@2; resync; add a/y@3; replace a/z@4; pop; pop; pop")
	want := []string{"SYNCED", "a/x [Added@1]", "a/y [Added@3 Deleted@3!]", "a/z [Replaced@4]", "closed"}
	if got := popsAndSync(steps); !slices.Equal(got, want) {
		t.Fatalf("pops:\n got  %q\n want %q", got, want)
	}
}
