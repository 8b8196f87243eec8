package cache

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// applyIndexerOps applies "add k@rv; update k@rv; delete k@rv; replace k@rv ..." to x.
func applyIndexerOps[T Object](t *testing.T, k kind[T], x *Indexer[T], script string) {
	t.Helper()
	for op := range strings.SplitSeq(script, ";") {
		fields := strings.Fields(op)
		if len(fields) == 0 {
			continue
		}
		var objs []T
		for _, f := range fields[1:] {
			key, rv := splitItem(f)
			objs = append(objs, k.obj(key, rv))
		}
		switch fields[0] {
		case "add":
			x.Add(objs[0])
		case "update":
			x.Update(objs[0])
		case "delete":
			x.Delete(objs[0])
		case "replace":
			x.Replace(objs)
		default:
			t.Fatalf("bad op %q", op)
		}
		checkIndexConsistency(t, x)
	}
}

func TestIndexerOps(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"empty", "", ""},
		{"add", "add a/x@1; add b/y@2",
			"a/x@1 b/y@2 | labels: app=x=[a/x] app=y=[b/y] tier=t0=[b/y] tier=t1=[a/x] | namespace: a=[a/x] b=[b/y]"},
		{"add of an existing key replaces it", "add a/x@1; add a/x@2",
			"a/x@2 | labels: app=x=[a/x] tier=t0=[a/x] | namespace: a=[a/x]"},
		{"update moves index entries", "add a/x@1; add a/y@4; update a/x@2",
			"a/x@2 a/y@4 | labels: app=x=[a/x] app=y=[a/y] tier=t0=[a/x a/y] | namespace: a=[a/x a/y]"},
		{"update of a missing key adds it", "update a/x@1", "a/x@1 | labels: app=x=[a/x] tier=t1=[a/x] | namespace: a=[a/x]"},
		{"update to no index values", "add a/x@1; update a/x@7", "a/x@7 | namespace: a=[a/x]"},
		{"delete drops empty index values", "add a/x@1; add b/y@2; delete a/x@99",
			"b/y@2 | labels: app=y=[b/y] tier=t0=[b/y] | namespace: b=[b/y]"},
		{"delete of a missing key", "add a/x@1; delete a/y@1", "a/x@1 | labels: app=x=[a/x] tier=t1=[a/x] | namespace: a=[a/x]"},
		{"replace", "add a/x@1; add b/y@2; replace b/y@3 c@4 c@5",
			"b/y@3 c@5 | labels: app=c=[c] app=y=[b/y] tier=t1=[c] | namespace: =[c] b=[b/y]"},
		{"replace with nothing", "add a/x@1; replace", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndexer(testIndexers[*corev1.Pod]())
			applyIndexerOps(t, podKind, x, tc.script)
			if got := ourView(t, x).String(); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestIndexerUnknownIndex(t *testing.T) {
	x := NewIndexer[*corev1.Pod](nil)
	x.Add(podKind.obj("a/x", "1"))
	if _, err := x.ByIndex("nope", "a"); err == nil {
		t.Error("ByIndex on a missing index: no error")
	}
	if _, err := x.IndexKeys("nope", "a"); err == nil {
		t.Error("IndexKeys on a missing index: no error")
	}
	if got := x.ListIndexFuncValues("nope"); len(got) != 0 {
		t.Errorf("ListIndexFuncValues on a missing index = %v", got)
	}
	if got, err := x.ByIndex(NamespaceIndex, "a"); err == nil || got != nil {
		t.Errorf("ByIndex on an index not configured = %v, %v", got, err)
	}
}

func TestIndexerAddIndexers(t *testing.T) {
	x := NewIndexer(Indexers[*corev1.Pod]{NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod]})
	applyIndexerOps(t, podKind, x, "add a/x@1; add b/y@2")
	labels := testIndexers[*corev1.Pod]()["labels"]
	err := x.AddIndexers(Indexers[*corev1.Pod]{"labels": labels, NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod]})
	if err == nil || !strings.Contains(err.Error(), NamespaceIndex) {
		t.Fatalf("AddIndexers with a used name = %v, want an error naming it", err)
	}
	if vals := x.ListIndexFuncValues("labels"); len(vals) != 0 {
		t.Fatalf("a refused AddIndexers added an index: %v", vals)
	}
	if err := x.AddIndexers(Indexers[*corev1.Pod]{"labels": labels}); err != nil {
		t.Fatal(err)
	}
	applyIndexerOps(t, podKind, x, "update a/x@4")
	want := "a/x@4 b/y@2 | labels: app=x=[a/x] app=y=[b/y] tier=t0=[a/x b/y] | namespace: a=[a/x] b=[b/y]"
	if got := ourView(t, x).String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestIndexerIndexFuncErrorPanicsAndChangesNothing(t *testing.T) {
	x := NewIndexer(Indexers[*corev1.Pod]{
		NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod],
		"picky": func(p *corev1.Pod) ([]string, error) {
			if p.ResourceVersion == "13" {
				return nil, errors.New("unlucky")
			}
			return []string{p.Name}, nil
		},
	})
	applyIndexerOps(t, podKind, x, "add a/x@1")
	before := ourView(t, x).String()
	for name, write := range map[string]func(){
		"Add":     func() { x.Add(podKind.obj("a/x", "13")) },
		"Replace": func() { x.Replace([]*corev1.Pod{podKind.obj("a/y", "2"), podKind.obj("a/z", "13")}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "unlucky") {
					t.Errorf("%s: recovered %v, want the index error", name, r)
				}
			}()
			write()
		}()
		if after := ourView(t, x).String(); after != before {
			t.Errorf("%s: failed write changed the store:\n before %s\n after  %s", name, before, after)
		}
	}
}

func TestIndexerReturnsFreshSlices(t *testing.T) {
	x := NewIndexer(testIndexers[*corev1.Pod]())
	applyIndexerOps(t, podKind, x, "add a/x@1; add a/y@2")
	keys, _ := x.IndexKeys(NamespaceIndex, "a")
	keys[0] = "scribbled"
	objs, _ := x.ByIndex(NamespaceIndex, "a")
	objs[0] = nil
	list := x.List()
	list[0] = nil
	lk := x.ListKeys()
	lk[0] = "scribbled"
	vals := x.ListIndexFuncValues(NamespaceIndex)
	vals[0] = "scribbled"
	want := "a/x@1 a/y@2 | labels: app=x=[a/x] app=y=[a/y] tier=t0=[a/y] tier=t1=[a/x] | namespace: a=[a/x a/y]"
	if got := ourView(t, x).String(); got != want {
		t.Errorf("changing returned slices changed the Indexer:\n got  %s\n want %s", got, want)
	}
}

// TestIndexerConcurrent runs writers and readers together; every read must be self-consistent
// (each object found under a namespace is in that namespace), and the indices must match the
// store at the end. Run with -race.
func TestIndexerConcurrent(t *testing.T) {
	x := NewIndexer(Indexers[*corev1.Pod]{NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod]})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := range 300 {
				key := fmt.Sprintf("ns%d/p%d", i%4, i%10)
				obj := podKind.obj(key, strconv.Itoa(w*1000+i+1))
				switch i % 5 {
				case 0, 1:
					x.Add(obj)
				case 2:
					x.Update(obj)
				case 3:
					x.Delete(obj)
				case 4:
					if w == 0 && i%50 == 4 {
						x.Replace([]*corev1.Pod{obj, podKind.obj("ns9/q", "1")})
					}
				}
			}
		})
	}
	wg.Go(func() {
		err := x.AddIndexers(testIndexers[*corev1.Pod]()) // conflicts on namespace: refused
		if err == nil {
			t.Error("AddIndexers with a used name succeeded")
		}
		if err := x.AddIndexers(Indexers[*corev1.Pod]{"labels": testIndexers[*corev1.Pod]()["labels"]}); err != nil {
			t.Error(err)
		}
	})
	for range 2 {
		wg.Go(func() {
			for i := range 300 {
				ns := fmt.Sprintf("ns%d", i%4)
				objs, err := x.ByIndex(NamespaceIndex, ns)
				if err != nil {
					t.Error(err)
					return
				}
				for _, o := range objs {
					if o.Namespace != ns {
						t.Errorf("ByIndex(%q) returned %s/%s", ns, o.Namespace, o.Name)
					}
				}
				keys, _ := x.IndexKeys(NamespaceIndex, ns)
				for _, k := range keys {
					if !strings.HasPrefix(k, ns+"/") {
						t.Errorf("IndexKeys(%q) returned %s", ns, k)
					}
				}
				_ = x.List()
				_ = x.ListIndexFuncValues(NamespaceIndex)
			}
		})
	}
	wg.Wait()
	checkIndexConsistency(t, x)
	if got := len(x.ListIndexFuncValues("labels")); got == 0 && x.Len() > 0 {
		t.Error("labels index empty after AddIndexers")
	}
}
