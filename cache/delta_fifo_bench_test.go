package cache

import (
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cg "k8s.io/client-go/tools/cache"
)

func benchPods(n int) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns" + strconv.Itoa(i%100), Name: "pod-" + strconv.Itoa(i), ResourceVersion: strconv.Itoa(i + 1),
		}}
	}
	return pods
}

// fifoBench is the part of a DeltaFIFO and its consumer the benchmarks need.
type fifoBench struct {
	add func(*corev1.Pod)
	pop func() int // pops one key, returns how many deltas it had
}

func ourFIFOBench() fifoBench {
	idx := NewIndexer(Indexers[*corev1.Pod]{NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod]})
	f := NewDeltaFIFO[*corev1.Pod](idx)
	var n int
	process := func(_ string, deltas []Delta[*corev1.Pod], _ bool) error {
		n = len(deltas)
		for _, d := range deltas {
			if d.Type == Deleted {
				idx.Delete(d.Object)
			} else {
				idx.Update(d.Object)
			}
		}
		return nil
	}
	return fifoBench{
		add: func(p *corev1.Pod) { _ = f.Add(p) },
		pop: func() int { _ = f.Pop(process); return n },
	}
}

func clientGoFIFOBench() fifoBench {
	idx := cg.NewIndexer(cg.DeletionHandlingMetaNamespaceKeyFunc, cg.Indexers{cg.NamespaceIndex: cg.MetaNamespaceIndexFunc})
	f := cg.NewDeltaFIFOWithOptions(cg.DeltaFIFOOptions{KnownObjects: idx, EmitDeltaTypeReplaced: true})
	var n int
	process := func(obj any, _ bool) error {
		n = len(obj.(cg.Deltas))
		for _, d := range obj.(cg.Deltas) {
			if d.Type == cg.Deleted {
				_ = idx.Delete(d.Object)
			} else if _, ok, _ := idx.Get(d.Object); ok {
				_ = idx.Update(d.Object)
			} else {
				_ = idx.Add(d.Object)
			}
		}
		return nil
	}
	return fifoBench{
		add: func(p *corev1.Pod) { _ = f.Add(p) },
		pop: func() int { _, _ = f.Pop(process); return n },
	}
}

var fifoImpls = []struct {
	name string
	make func() fifoBench
}{{"kplane", ourFIFOBench}, {"client-go", clientGoFIFOBench}}

// BenchmarkDeltaFIFOAddPop: one Add and one Pop (applied to an indexer) per op, queue depth
// up to `depth`, over 10000 keys.
func BenchmarkDeltaFIFOAddPop(b *testing.B) {
	pods := benchPods(10000)
	for _, depth := range []int{1, 1000} {
		for _, impl := range fifoImpls {
			b.Run(fmt.Sprintf("%s/depth=%d", impl.name, depth), func(b *testing.B) {
				f := impl.make()
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					f.add(pods[i%len(pods)])
					if (i+1)%depth == 0 {
						for range depth {
							f.pop()
						}
					}
				}
			})
		}
	}
}

// BenchmarkDeltaFIFOProducerConsumer: a producer goroutine adds while the consumer pops, as a
// reflector and an informer's process loop do; ns/op is per object delivered.
func BenchmarkDeltaFIFOProducerConsumer(b *testing.B) {
	pods := benchPods(10000)
	for _, impl := range fifoImpls {
		b.Run(impl.name, func(b *testing.B) {
			f := impl.make()
			b.ReportAllocs()
			n := b.N
			b.ResetTimer()
			go func() {
				for i := range n {
					f.add(pods[i%len(pods)])
				}
			}()
			// A key added again before it is popped joins its queued deltas, so count deltas.
			for got := 0; got < n; {
				got += f.pop()
			}
		})
	}
}
