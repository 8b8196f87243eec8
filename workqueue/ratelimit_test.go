package workqueue

import (
	"math"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestItemExponentialFailureRateLimiter(t *testing.T) {
	tests := []struct {
		name      string
		base, max time.Duration
		skip      int // When calls made before the checked ones
		want      []time.Duration
	}{
		{"doubles from base", 5 * ms, 1000 * time.Second, 0, []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms}},
		{"capped at max", ms, 10 * ms, 0, []time.Duration{ms, 2 * ms, 4 * ms, 8 * ms, 10 * ms, 10 * ms}},
		{"max below base", 10 * ms, 3 * ms, 0, []time.Duration{3 * ms, 3 * ms}},
		{"reaches 1000s after 18 failures", 5 * ms, 1000 * time.Second, 17, []time.Duration{655360 * ms, 1000 * time.Second}},
		{"no overflow after many failures", ms, 1000 * time.Second, 1000, []time.Duration{1000 * time.Second}},
		{"no overflow near the top", time.Minute, math.MaxInt64, 27, []time.Duration{time.Minute << 27, math.MaxInt64, math.MaxInt64}},
		{"zero base", 0, time.Second, 0, []time.Duration{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewItemExponentialFailureRateLimiter[string](tt.base, tt.max)
			for range tt.skip {
				r.When("x")
			}
			for i, want := range tt.want {
				if got := r.When("x"); got != want {
					t.Errorf("When #%d = %v, want %v", tt.skip+i, got, want)
				}
			}
			if got, want := r.NumRequeues("x"), tt.skip+len(tt.want); got != want {
				t.Errorf("NumRequeues = %d, want %d", got, want)
			}
		})
	}
}

func TestExponentialForgetResets(t *testing.T) {
	r := NewItemExponentialFailureRateLimiter[string](ms, time.Second)
	for range 3 {
		r.When("a")
	}
	r.When("b")
	if r.NumRequeues("a") != 3 || r.NumRequeues("b") != 1 || r.NumRequeues("c") != 0 {
		t.Fatalf("NumRequeues a, b, c = %d, %d, %d; want 3, 1, 0", r.NumRequeues("a"), r.NumRequeues("b"), r.NumRequeues("c"))
	}
	r.Forget("a")
	if n := r.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}
	if d := r.When("a"); d != ms {
		t.Fatalf("When after Forget = %v, want base", d)
	}
	if d := r.When("b"); d != 2*ms {
		t.Fatalf("Forget of a changed b: When = %v", d)
	}
}

func TestBucketRateLimiter(t *testing.T) {
	clock := newFakeClock()
	r := NewBucketRateLimiter[string](10, 100)
	r.now = clock.Now
	for i := range 100 {
		if d := r.When("x"); d != 0 {
			t.Fatalf("When #%d within the burst = %v", i, d)
		}
	}
	// Past the burst, each retry waits one more token at 10 per second, whatever the item.
	for i, item := range []string{"x", "y", "z"} {
		if d, want := r.When(item), time.Duration(i+1)*100*ms; d != want {
			t.Fatalf("When(%s) after the burst = %v, want %v", item, d, want)
		}
	}
	clock.step(300 * ms) // pays off the debt
	if d := r.When("x"); d != 100*ms {
		t.Fatalf("When once the debt is paid = %v, want 100ms", d)
	}
	clock.step(time.Hour) // refills to the burst, no further
	for range 100 {
		if d := r.When("x"); d != 0 {
			t.Fatalf("When after refill = %v", d)
		}
	}
	if d := r.When("x"); d != 100*ms {
		t.Fatalf("When past the refilled burst = %v", d)
	}
	r.Forget("x")
	if n := r.NumRequeues("x"); n != 0 {
		t.Fatalf("NumRequeues = %d", n)
	}
}

// constLimiter always answers d and counts calls.
type constLimiter struct {
	d      time.Duration
	calls  map[string]int
	forgot []string
}

func (c *constLimiter) When(item string) time.Duration { c.calls[item]++; return c.d }
func (c *constLimiter) Forget(item string)             { c.forgot = append(c.forgot, item); delete(c.calls, item) }
func (c *constLimiter) NumRequeues(item string) int    { return c.calls[item] }

func TestMaxOfRateLimiter(t *testing.T) {
	slow := &constLimiter{d: 7 * ms, calls: map[string]int{}}
	exp := NewItemExponentialFailureRateLimiter[string](2*ms, time.Second)
	r := NewMaxOfRateLimiter[string](slow, exp)
	for i, want := range []time.Duration{7 * ms, 7 * ms, 8 * ms, 16 * ms} {
		if got := r.When("a"); got != want {
			t.Fatalf("When #%d = %v, want %v", i, got, want)
		}
	}
	slow.calls["a"] = 9 // the largest count wins
	if n := r.NumRequeues("a"); n != 9 {
		t.Fatalf("NumRequeues = %d, want 9", n)
	}
	r.Forget("a")
	if len(slow.forgot) != 1 || exp.NumRequeues("a") != 0 {
		t.Fatal("Forget did not reach every limiter")
	}
	if d := NewMaxOfRateLimiter[string]().When("a"); d != 0 {
		t.Fatalf("empty MaxOf When = %v", d)
	}
}

func TestDefaultControllerRateLimiter(t *testing.T) {
	r := DefaultControllerRateLimiter[int]()
	for i, want := range []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms} {
		if got := r.When(0); got != want {
			t.Fatalf("When #%d of one item = %v, want %v", i, got, want)
		}
	}
	// 4 tokens taken; 96 more distinct items fit in the burst of 100 with their 5ms first backoff.
	for item := 1; item <= 96; item++ {
		if got := r.When(item); got != 5*ms {
			t.Fatalf("When(%d) inside the burst = %v, want 5ms", item, got)
		}
	}
	// The next one waits for the bucket: about 100ms at 10 qps (less the time this test took).
	if got := r.When(97); got <= 50*ms || got > 100*ms {
		t.Fatalf("When past the burst = %v, want about 100ms", got)
	}
	if n := r.NumRequeues(0); n != 4 {
		t.Fatalf("NumRequeues = %d, want 4", n)
	}
}

func TestRateLimitingQueue(t *testing.T) {
	clock := newFakeClock()
	q := NewRateLimited[string](NewItemExponentialFailureRateLimiter[string](ms, time.Second), WithClock(clock))
	defer q.ShutDown()
	readyIn := func(item string) time.Duration {
		q.waitMu.Lock()
		defer q.waitMu.Unlock()
		return q.waiting.entries[q.waiting.index[item]].readyAt.Sub(clock.Now())
	}

	q.AddRateLimited("a")
	if d := readyIn("a"); d != ms {
		t.Fatalf("first retry of a in %v, want 1ms", d)
	}
	settle(t, q.DelayingQueue, clock)
	clock.step(ms)
	takeAll(t, q.DelayingQueue, clock, []string{"a"})

	q.AddRateLimited("a")
	q.AddRateLimited("b")
	if d := readyIn("a"); d != 2*ms {
		t.Fatalf("second retry of a in %v, want 2ms", d)
	}
	if d := readyIn("b"); d != ms {
		t.Fatalf("first retry of b in %v, want 1ms", d)
	}
	if q.NumRequeues("a") != 2 || q.NumRequeues("b") != 1 {
		t.Fatalf("NumRequeues a, b = %d, %d; want 2, 1", q.NumRequeues("a"), q.NumRequeues("b"))
	}
	q.Forget("a")
	if n := q.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}
	settle(t, q.DelayingQueue, clock)
	clock.step(2 * ms)
	takeAll(t, q.DelayingQueue, clock, []string{"b", "a"})
}
