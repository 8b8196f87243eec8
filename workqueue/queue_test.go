package workqueue

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// runScript drives q single-threaded through steps, failing at the first one whose outcome
// differs. Steps:
//
//	+x        Add(x)
//	get x     Get returns x, shutdown=false
//	get!      Get returns shutdown=true
//	done x    Done(x)
//	len n     Len() == n
//	shutdown  ShutDown()
//	drain     ShutDownWithDrain() (only when nothing is held, or it would block)
//	closing   ShuttingDown() == true
func runScript(t *testing.T, q *Queue[string], steps []string) {
	t.Helper()
	for i, step := range steps {
		verb, arg, _ := strings.Cut(step, " ")
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d %q: %s", i, step, fmt.Sprintf(format, args...))
		}
		switch {
		case strings.HasPrefix(verb, "+"):
			q.Add(verb[1:])
		case verb == "get":
			if item, shutdown := q.Get(); item != arg || shutdown {
				fail("Get() = %q, %v", item, shutdown)
			}
		case verb == "get!":
			if item, shutdown := q.Get(); item != "" || !shutdown {
				fail("Get() = %q, %v", item, shutdown)
			}
		case verb == "done":
			q.Done(arg)
		case verb == "len":
			if n, _ := strconv.Atoi(arg); q.Len() != n {
				fail("Len() = %d", q.Len())
			}
		case verb == "shutdown":
			q.ShutDown()
		case verb == "drain":
			q.ShutDownWithDrain()
		case verb == "closing":
			if !q.ShuttingDown() {
				fail("ShuttingDown() = false")
			}
		default:
			fail("unknown step")
		}
	}
}

func TestQueueSemantics(t *testing.T) {
	tests := []struct {
		name  string
		steps []string
	}{
		{"fifo", []string{"+a", "+b", "+c", "len 3", "get a", "get b", "get c", "len 0"}},
		{"waiting duplicates collapse", []string{"+a", "+b", "+a", "+a", "len 2", "get a", "get b", "len 0"}},
		{"collapsed item keeps its first place", []string{"+a", "+b", "+a", "get a", "done a", "get b"}},
		{"re-add while processing waits for Done", []string{
			"+a", "get a", "+a", "len 0", "+b", "len 1", "get b", "len 0",
			"done a", "len 1", "get a", "done a", "done b", "len 0"}},
		{"re-add while processing goes to the back", []string{
			"+a", "get a", "+a", "+b", "+c", "done a", "get b", "get c", "get a"}},
		{"many re-adds while processing collapse", []string{"+a", "get a", "+a", "+a", "+a", "done a", "len 1", "get a", "done a", "len 0"}},
		{"processed item can be added again", []string{"+a", "get a", "done a", "+a", "len 1", "get a"}},
		{"done of an item not held is ignored", []string{"+a", "done a", "done z", "len 1", "get a", "len 0"}},
		{"second done is ignored", []string{"+a", "get a", "done a", "done a", "+a", "get a", "len 0"}},
		{"shutdown ignores adds and drains what waits", []string{
			"+a", "+b", "shutdown", "closing", "+c", "len 2", "get a", "get b", "get!", "get!"}},
		{"shutdown on empty queue", []string{"shutdown", "get!", "shutdown", "get!"}},
		{"dirty held item survives shutdown", []string{"+a", "get a", "+a", "shutdown", "get!", "done a", "len 1", "get a", "done a", "get!"}},
		{"drain with nothing held returns", []string{"+a", "drain", "closing", "get a", "get!", "done a"}},
		{"zero value item", []string{"+", "len 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New[string]()
			defer q.ShutDown()
			runScript(t, q, tt.steps)
		})
	}
}

// Workers never hold one item at the same time, and an Add is always followed by a Get of that
// item that started after the Add did, even when the item was being processed at the time.
func TestConcurrentWorkers(t *testing.T) {
	const (
		keys      = 20
		producers = 4
		addsEach  = 500
		workers   = 8
	)
	q := New[int]()
	var (
		mu        sync.Mutex
		clock     int // orders adds and gets
		addedAt   [keys]int
		gotAt     [keys]int
		inFlight  [keys]bool
		processed int
	)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				mu.Lock()
				if inFlight[k] {
					t.Errorf("item %d handed to two workers", k)
				}
				inFlight[k] = true
				clock++
				gotAt[k] = clock
				processed++
				mu.Unlock()

				runtime.Gosched() // widen the window in which a re-add lands on a held item

				mu.Lock()
				inFlight[k] = false
				mu.Unlock()
				q.Done(k)
			}
		})
	}
	var producersWG sync.WaitGroup
	for p := range producers {
		producersWG.Go(func() {
			for i := range addsEach {
				k := (p*7 + i) % keys
				mu.Lock()
				clock++
				addedAt[k] = clock
				mu.Unlock()
				q.Add(k)
			}
		})
	}
	producersWG.Wait()
	// Workers leave only when nothing waits, and a held dirty item is re-queued by its own worker's
	// Done before that worker asks again, so every add is processed before they all leave.
	q.ShutDown()
	wg.Wait()
	for k := range keys {
		if gotAt[k] < addedAt[k] {
			t.Errorf("item %d added at %d, last handed out at %d", k, addedAt[k], gotAt[k])
		}
	}
	if q.Len() != 0 {
		t.Errorf("Len() = %d after all workers left", q.Len())
	}
	t.Logf("%d adds, %d processed", producers*addsEach, processed)
}

func TestReaddWhileProcessingNotHandedOutBeforeDone(t *testing.T) {
	q := New[string]()
	defer q.ShutDown()
	q.Add("a")
	item, _ := q.Get()
	q.Add("a")

	got := make(chan struct{})
	go func() {
		defer close(got)
		if item, _ := q.Get(); item != "a" {
			t.Errorf("second Get() = %q", item)
		}
		q.Done("a")
	}()
	if !stillBlocked(got) {
		t.Fatal("a was handed to a second worker before the first called Done")
	}
	q.Done(item)
	<-got
}

func TestGetBlocksUntilAddOrShutDown(t *testing.T) {
	q := New[string]()
	results := make(chan string, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			item, shutdown := q.Get()
			results <- fmt.Sprintf("%s %v", item, shutdown)
		})
	}
	q.Add("a")
	if r := <-results; r != "a false" {
		t.Fatalf("Get() = %s", r)
	}
	q.ShutDown()
	wg.Wait()
	for range 2 {
		if r := <-results; r != " true" {
			t.Fatalf("Get() after ShutDown = %s", r)
		}
	}
}

func TestShutDownWithDrain(t *testing.T) {
	q := New[string]()
	q.Add("a")
	q.Add("b")
	q.Add("c")
	a, _ := q.Get()
	b, _ := q.Get()

	drained := make(chan struct{})
	go func() {
		defer close(drained)
		q.ShutDownWithDrain()
	}()
	eventually(t, "shutdown to begin", q.ShuttingDown)
	// Waiting items are still handed out during the drain; adds are not taken.
	q.Add("d")
	if item, shutdown := q.Get(); item != "c" || shutdown {
		t.Fatalf("Get() during drain = %q, %v", item, shutdown)
	}
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get() on an empty draining queue did not report shutdown")
	}
	for _, item := range []string{a, b} {
		if !stillBlocked(drained) {
			t.Fatalf("ShutDownWithDrain returned while %s was held", item)
		}
		q.Done(item)
	}
	if !stillBlocked(drained) {
		t.Fatal("ShutDownWithDrain returned while c was held")
	}
	q.Done("c")
	<-drained
}

func TestShutDownCancelsDrain(t *testing.T) {
	q := New[string]()
	q.Add("a")
	q.Get()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		q.ShutDownWithDrain()
	}()
	if !stillBlocked(drained) {
		t.Fatal("ShutDownWithDrain returned while a was held")
	}
	q.ShutDown()
	<-drained
}

// Every goroutine a queue starts ends by the time ShutDown (or ShutDownWithDrain) returns.
func TestGoroutinesEndOnShutDown(t *testing.T) {
	clock := newFakeClock()
	limiter := func() RateLimiter[string] { return DefaultControllerRateLimiter[string]() }
	type queue interface {
		Add(string)
		ShutDown()
		ShutDownWithDrain()
	}
	tests := []struct {
		name       string
		new        func() queue
		goroutines int
	}{
		{"queue", func() queue { return New[string]() }, 0},
		{"named queue", func() queue { return New[string](WithName("leak-q"), WithMetrics(testMetrics(t))) }, 1},
		{"delaying", func() queue { return NewDelaying[string]() }, 1},
		{"named delaying", func() queue {
			return NewDelaying[string](WithName("leak-d"), WithMetrics(testMetrics(t)), WithClock(clock))
		}, 2},
		{"rate limited", func() queue { return NewRateLimited(limiter()) }, 1},
		{"named rate limited", func() queue {
			return NewRateLimited(limiter(), WithName("leak-r"), WithMetrics(testMetrics(t)))
		}, 2},
	}
	for _, tt := range tests {
		for _, how := range []string{"ShutDown", "ShutDownWithDrain"} {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				noQueueGoroutines(t) // none left over from earlier tests
				q := tt.new()
				q.Add("a")
				if d, ok := q.(interface{ AddAfter(string, time.Duration) }); ok {
					d.AddAfter("b", time.Hour) // arm the timer
				}
				if n := len(queueGoroutines()); n != tt.goroutines {
					t.Errorf("queue started %d goroutines, want %d", n, tt.goroutines)
				}
				if how == "ShutDown" {
					q.ShutDown()
				} else {
					q.ShutDownWithDrain()
				}
				noQueueGoroutines(t)
			})
		}
	}
}
