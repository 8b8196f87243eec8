package cache

import (
	"fmt"
	"slices"
	"sync"
)

// IndexFunc computes the values under which an object is indexed. It may return several values
// (the object is then found under each) or none (the object is absent from that index).
//
// An IndexFunc must be a pure function of the object and must not fail for any object the
// Indexer is given: an Indexer whose index silently lacked entries would answer ByIndex wrongly,
// so an error from an IndexFunc is treated as a programming error and panics (as in client-go).
type IndexFunc[T Object] func(obj T) ([]string, error)

// Indexers names the index functions of an Indexer.
type Indexers[T Object] map[string]IndexFunc[T]

// NamespaceIndex is the conventional name of the index built by MetaNamespaceIndexFunc.
const NamespaceIndex = "namespace"

// MetaNamespaceIndexFunc indexes an object by its namespace ("" for cluster-scoped objects).
func MetaNamespaceIndexFunc[T Object](obj T) ([]string, error) {
	return []string{obj.GetNamespace()}, nil
}

// keySet is a set of store keys.
type keySet map[string]struct{}

// index maps an indexed value to the keys of the objects indexed under it.
type index map[string]keySet

func (ix index) add(key string, values []string) {
	for _, v := range values {
		set := ix[v]
		if set == nil {
			set = keySet{}
			ix[v] = set
		}
		set[key] = struct{}{}
	}
}

func (ix index) remove(key string, values []string) {
	for _, v := range values {
		set := ix[v]
		if set == nil {
			continue
		}
		delete(set, key)
		// Drop empty sets: indices over short-lived, high-cardinality values (pod UIDs, node
		// names of churned nodes) would otherwise grow without bound.
		if len(set) == 0 {
			delete(ix, v)
		}
	}
}

type namedIndexFunc[T Object] struct {
	name string
	fn   IndexFunc[T]
}

// Indexer is a thread-safe store of objects keyed by MetaNamespaceKey, with named secondary
// indices. It is what an informer's process loop writes and its listers read.
//
// Every write updates the store and all indices under one lock, so a reader never sees an index
// that disagrees with the store. Slices returned by reads are fresh and owned by the caller; the
// objects in them are shared with the Indexer and every other reader and must not be mutated.
//
// The zero value is not usable; call NewIndexer.
type Indexer[T Object] struct {
	mu    sync.RWMutex
	items map[string]T
	// funcs is append-only (AddIndexers only adds), so its length identifies its version and
	// funcs[:n] may be read without the lock by whoever saw length n under it; indices[i] is the
	// index of funcs[i].
	funcs   []namedIndexFunc[T]
	indices []index
	byName  map[string]int
}

// NewIndexer returns an empty Indexer maintaining the given indices. indexers may be nil.
func NewIndexer[T Object](indexers Indexers[T]) *Indexer[T] {
	x := &Indexer[T]{items: map[string]T{}, byName: map[string]int{}}
	x.appendIndexers(indexers)
	return x
}

// appendIndexers registers indexers (in name order, for determinism) with empty indices.
// Callers check for name conflicts and hold the lock (or own x exclusively).
func (x *Indexer[T]) appendIndexers(indexers Indexers[T]) {
	names := make([]string, 0, len(indexers))
	for name := range indexers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		x.byName[name] = len(x.funcs)
		x.funcs = append(x.funcs, namedIndexFunc[T]{name: name, fn: indexers[name]})
		x.indices = append(x.indices, index{})
	}
}

// AddIndexers adds indices and builds them over the objects already stored. If any name is
// already in use it returns an error and adds none of them.
func (x *Indexer[T]) AddIndexers(indexers Indexers[T]) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	var conflicts []string
	for name := range indexers {
		if _, ok := x.byName[name]; ok {
			conflicts = append(conflicts, name)
		}
	}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		return fmt.Errorf("cache: indexer conflict: %v already exist", conflicts)
	}
	n := len(x.funcs)
	x.appendIndexers(indexers)
	for i := n; i < len(x.funcs); i++ {
		buildIndex(x.indices[i], x.funcs[i], x.items)
	}
	return nil
}

// buildIndex fills ix with every item of items under f.
func buildIndex[T Object](ix index, f namedIndexFunc[T], items map[string]T) {
	for key, obj := range items {
		ix.add(key, mustIndex(f, key, obj))
	}
}

func mustIndex[T Object](f namedIndexFunc[T], key string, obj T) []string {
	values, err := f.fn(obj)
	if err != nil {
		panic(fmt.Sprintf("cache: index %q failed for %q: %v", f.name, key, err))
	}
	return values
}

// indexChange is one index's part of a write, computed before anything is modified so that a
// panicking IndexFunc leaves the Indexer unchanged.
type indexChange struct {
	old, new []string
}

// Add stores obj under its key, replacing any object already there, and updates every index.
// Add and Update are the same operation; both exist because callers speak in those terms.
func (x *Indexer[T]) Add(obj T) { x.put(obj) }

// Update is Add.
func (x *Indexer[T]) Update(obj T) { x.put(obj) }

func (x *Indexer[T]) put(obj T) {
	key := MetaNamespaceKey(obj)
	x.mu.Lock()
	defer x.mu.Unlock()
	old, had := x.items[key]
	var buf [4]indexChange
	changes := buf[:0]
	for _, f := range x.funcs {
		var c indexChange
		if had {
			c.old = mustIndex(f, key, old)
		}
		c.new = mustIndex(f, key, obj)
		changes = append(changes, c)
	}
	x.items[key] = obj
	for i, c := range changes {
		// Most updates leave a single-valued index (the namespace, say) as it was.
		if len(c.old) == 1 && len(c.new) == 1 && c.old[0] == c.new[0] {
			continue
		}
		x.indices[i].remove(key, c.old)
		x.indices[i].add(key, c.new)
	}
}

// Delete removes the object stored under obj's key, if any, from the store and every index.
// Only obj's key matters: the stored object, not obj, determines which index entries go.
func (x *Indexer[T]) Delete(obj T) {
	key := MetaNamespaceKey(obj)
	x.mu.Lock()
	defer x.mu.Unlock()
	old, had := x.items[key]
	if !had {
		return
	}
	var buf [4][]string
	olds := buf[:0]
	for _, f := range x.funcs {
		olds = append(olds, mustIndex(f, key, old))
	}
	delete(x.items, key)
	for i, values := range olds {
		x.indices[i].remove(key, values)
	}
}

// Replace makes items the entire contents of the Indexer, rebuilding every index; readers see
// either the old contents or the new, never a mixture. If two items share a key the later wins.
// The Indexer keeps the objects but not the slice.
func (x *Indexer[T]) Replace(items []T) {
	// Build the new store and indices without the lock so readers are not held up by a large
	// relist; the swap below is the only step under it.
	x.mu.RLock()
	funcs := x.funcs
	x.mu.RUnlock()

	newItems := make(map[string]T, len(items))
	for _, obj := range items {
		newItems[MetaNamespaceKey(obj)] = obj
	}
	newIndices := make([]index, len(funcs), len(funcs)+1)
	for i, f := range funcs {
		newIndices[i] = index{}
		buildIndex(newIndices[i], f, newItems)
	}

	x.mu.Lock()
	defer x.mu.Unlock()
	// Indices added by a concurrent AddIndexers after the snapshot are built here, under the lock.
	for i := len(funcs); i < len(x.funcs); i++ {
		ix := index{}
		buildIndex(ix, x.funcs[i], newItems)
		newIndices = append(newIndices, ix)
	}
	x.items = newItems
	x.indices = newIndices
}

// Get returns the object stored under key ("ns/name" or "name") and whether there was one.
func (x *Indexer[T]) Get(key string) (T, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	obj, ok := x.items[key]
	return obj, ok
}

// Len returns the number of objects stored.
func (x *Indexer[T]) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.items)
}

// List returns every stored object, in no particular order.
func (x *Indexer[T]) List() []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]T, 0, len(x.items))
	for _, obj := range x.items {
		out = append(out, obj)
	}
	return out
}

// ListKeys returns the key of every stored object, in no particular order.
func (x *Indexer[T]) ListKeys() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.items))
	for key := range x.items {
		out = append(out, key)
	}
	return out
}

// ByIndex returns the objects indexed under value in the named index, in no particular order.
// It is an error if the index does not exist.
func (x *Indexer[T]) ByIndex(indexName, value string) ([]T, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i, ok := x.byName[indexName]
	if !ok {
		return nil, fmt.Errorf("cache: index %q does not exist", indexName)
	}
	set := x.indices[i][value]
	out := make([]T, 0, len(set))
	for key := range set {
		out = append(out, x.items[key])
	}
	return out, nil
}

// IndexKeys returns, sorted, the keys of the objects indexed under value in the named index.
// It is an error if the index does not exist.
func (x *Indexer[T]) IndexKeys(indexName, value string) ([]string, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i, ok := x.byName[indexName]
	if !ok {
		return nil, fmt.Errorf("cache: index %q does not exist", indexName)
	}
	set := x.indices[i][value]
	out := make([]string, 0, len(set))
	for key := range set {
		out = append(out, key)
	}
	slices.Sort(out)
	return out, nil
}

// ListIndexFuncValues returns, in no particular order, every value under which at least one
// object is indexed in the named index; none if the index does not exist.
func (x *Indexer[T]) ListIndexFuncValues(indexName string) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i, ok := x.byName[indexName]
	if !ok {
		return []string{}
	}
	out := make([]string, 0, len(x.indices[i]))
	for v := range x.indices[i] {
		out = append(out, v)
	}
	return out
}
