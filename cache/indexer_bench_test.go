package cache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	cg "k8s.io/client-go/tools/cache"
)

// BenchmarkIndexerAdd: upserts into an indexer (namespace index) of 10000 pods in 100
// namespaces; every op after the first 10000 replaces an existing object.
func BenchmarkIndexerAdd(b *testing.B) {
	pods := benchPods(10000)
	b.Run("kplane", func(b *testing.B) {
		x := NewIndexer(Indexers[*corev1.Pod]{NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod]})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			x.Add(pods[i%len(pods)])
		}
	})
	b.Run("client-go", func(b *testing.B) {
		x := cg.NewIndexer(cg.MetaNamespaceKeyFunc, cg.Indexers{cg.NamespaceIndex: cg.MetaNamespaceIndexFunc})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = x.Add(pods[i%len(pods)])
		}
	})
}

// BenchmarkIndexerByIndex: list one namespace (100 pods) out of 10000 pods.
func BenchmarkIndexerByIndex(b *testing.B) {
	pods := benchPods(10000)
	b.Run("kplane", func(b *testing.B) {
		x := NewIndexer(Indexers[*corev1.Pod]{NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod]})
		x.Replace(pods)
		b.ReportAllocs()
		for b.Loop() {
			if objs, _ := x.ByIndex(NamespaceIndex, "ns7"); len(objs) != 100 {
				b.Fatal(len(objs))
			}
		}
	})
	b.Run("client-go", func(b *testing.B) {
		x := cg.NewIndexer(cg.MetaNamespaceKeyFunc, cg.Indexers{cg.NamespaceIndex: cg.MetaNamespaceIndexFunc})
		list := make([]any, len(pods))
		for i, p := range pods {
			list[i] = p
		}
		_ = x.Replace(list, "")
		b.ReportAllocs()
		for b.Loop() {
			if objs, _ := x.ByIndex(cg.NamespaceIndex, "ns7"); len(objs) != 100 {
				b.Fatal(len(objs))
			}
		}
	})
}

// BenchmarkIndexerReplace: replace the whole contents with 10000 pods.
func BenchmarkIndexerReplace(b *testing.B) {
	pods := benchPods(10000)
	b.Run("kplane", func(b *testing.B) {
		x := NewIndexer(Indexers[*corev1.Pod]{NamespaceIndex: MetaNamespaceIndexFunc[*corev1.Pod]})
		b.ReportAllocs()
		for b.Loop() {
			x.Replace(pods)
		}
	})
	b.Run("client-go", func(b *testing.B) {
		x := cg.NewIndexer(cg.MetaNamespaceKeyFunc, cg.Indexers{cg.NamespaceIndex: cg.MetaNamespaceIndexFunc})
		b.ReportAllocs()
		for b.Loop() {
			// client-go's Replace takes []interface{}; building it is part of its cost.
			list := make([]any, len(pods))
			for i, p := range pods {
				list[i] = p
			}
			_ = x.Replace(list, "")
		}
	})
}
