package workqueue

import (
	"fmt"
	"sync"
	"testing"
	"time"

	kwq "k8s.io/client-go/util/workqueue"
)

// benchQueue is the part of both queues the benchmarks use.
type benchQueue interface {
	Add(string)
	Get() (string, bool)
	Done(string)
	ShutDown()
}

var benchImpls = []struct {
	name string
	new  func() benchQueue
}{
	{"kplane", func() benchQueue { return New[string]() }},
	{"client-go", func() benchQueue { return kwq.NewTyped[string]() }},
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("namespace-%d/object-%d", i%10, i)
	}
	return keys
}

// BenchmarkQueueSerial: one goroutine does Add, Get, Done; the cost of the bookkeeping alone.
func BenchmarkQueueSerial(b *testing.B) {
	keys := benchKeys(1000)
	for _, impl := range benchImpls {
		b.Run(impl.name, func(b *testing.B) {
			q := impl.new()
			defer q.ShutDown()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				q.Add(keys[i%len(keys)])
				item, _ := q.Get()
				q.Done(item)
			}
		})
	}
}

// BenchmarkQueueParallel: producers Add b.N keys in all (from a key space of 10k, so some adds
// collapse or land on held keys), consumers Get and Done until the queue shuts down and empties.
// One op is one Add, with its share of the Gets and Dones.
func BenchmarkQueueParallel(b *testing.B) {
	keys := benchKeys(10000)
	for _, shape := range []struct{ producers, consumers int }{{1, 1}, {4, 4}, {16, 16}} {
		for _, impl := range benchImpls {
			b.Run(fmt.Sprintf("%dp%dc/%s", shape.producers, shape.consumers, impl.name), func(b *testing.B) {
				q := impl.new()
				var consumers, producers sync.WaitGroup
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for range shape.consumers {
					consumers.Go(func() {
						for {
							item, shutdown := q.Get()
							if shutdown {
								return
							}
							q.Done(item)
						}
					})
				}
				for p := range shape.producers {
					producers.Go(func() {
						for i := p; i < b.N; i += shape.producers {
							q.Add(keys[i%len(keys)])
						}
					})
				}
				producers.Wait()
				q.ShutDown()
				consumers.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "adds/s")
			})
		}
	}
}

// BenchmarkAddAfter: b.N delayed adds spread over an hour, none due during the benchmark; the cost
// of scheduling (ours: a heap under a mutex; client-go: a channel to its goroutine).
func BenchmarkAddAfter(b *testing.B) {
	keys := benchKeys(10000)
	impls := []struct {
		name string
		new  func() interface {
			AddAfter(string, time.Duration)
			ShutDown()
		}
	}{
		{"kplane", func() interface {
			AddAfter(string, time.Duration)
			ShutDown()
		} {
			return NewDelaying[string]()
		}},
		{"client-go", func() interface {
			AddAfter(string, time.Duration)
			ShutDown()
		} {
			return kwq.NewTypedDelayingQueue[string]()
		}},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			q := impl.new()
			defer q.ShutDown()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				q.AddAfter(keys[i%len(keys)], time.Minute+time.Duration(i%3600)*time.Second)
			}
		})
	}
}
