package testserver

import "runtime"

// LiveHeap reports the bytes of heap that build's result keeps alive: the live heap after a
// collection, less the same before build ran. For benchmarks of what a structure holds.
func LiveHeap[T any](build func() T) uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(kept)
	return ms.HeapAlloc - before
}
