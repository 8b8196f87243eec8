package workqueue

import (
	"slices"
	"strings"
	"testing"
	"time"
)

type delayedAdd struct {
	item string
	d    time.Duration
}

// settle waits until q's goroutine is parked with nothing left to do: every due item queued, the
// timer armed for the earliest of the rest, no wake-up pending. Only then are the queue's contents
// final, and only then does stepping the fake clock fire the timer (a goroutine still busy could
// re-arm it from a time read before the step).
func settle(t *testing.T, q *DelayingQueue[string], clock *fakeClock) {
	t.Helper()
	eventually(t, "the delaying goroutine to settle", func() bool {
		q.waitMu.Lock()
		next, pending := q.waiting.peek()
		q.waitMu.Unlock()
		return len(q.wake) == 0 && waitLoopParked() &&
			(!pending || next.After(clock.Now()) && clock.armedAt(next))
	})
}

// waitLoopParked reports whether a delaying goroutine is blocked in its select. Tests run one
// delaying queue at a time.
func waitLoopParked() bool {
	for _, g := range queueGoroutines() {
		if strings.Contains(g, ").waitLoop(") {
			return strings.Contains(g, " [select")
		}
	}
	return false
}

// takeAll checks that q holds exactly want, in that order, and empties it.
func takeAll(t *testing.T, q *DelayingQueue[string], clock *fakeClock, want []string) {
	t.Helper()
	settle(t, q, clock)
	var got []string
	for q.Len() > 0 {
		item, _ := q.Get()
		got = append(got, item)
		q.Done(item)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestAddAfter(t *testing.T) {
	type step struct {
		adds    []delayedAdd
		advance time.Duration
		want    []string // added by the time advance has passed, in order
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one item", []step{
			{adds: []delayedAdd{{"a", 50 * time.Millisecond}}, advance: 49 * time.Millisecond},
			{advance: time.Millisecond, want: []string{"a"}},
			{advance: time.Hour},
		}},
		{"ready order, not add order", []step{
			{adds: []delayedAdd{{"a", time.Second}, {"b", 500 * time.Millisecond}, {"c", 250 * time.Millisecond}},
				advance: 2 * time.Second, want: []string{"c", "b", "a"}},
		}},
		{"equal ready times keep add order", []step{
			{adds: []delayedAdd{{"a", time.Second}, {"b", time.Second}, {"c", time.Second}},
				advance: time.Second, want: []string{"a", "b", "c"}},
		}},
		{"an earlier item re-arms the timer", []step{
			{adds: []delayedAdd{{"a", time.Second}, {"b", 50 * time.Millisecond}}, advance: 60 * time.Millisecond, want: []string{"b"}},
			{adds: []delayedAdd{{"c", 2 * time.Second}}, advance: time.Second, want: []string{"a"}},
			{advance: 2 * time.Second, want: []string{"c"}},
		}},
		{"duplicate keeps the earlier time (later second)", []step{
			{adds: []delayedAdd{{"a", 50 * time.Millisecond}, {"a", 70 * time.Millisecond}}, advance: 60 * time.Millisecond, want: []string{"a"}},
			{advance: 20 * time.Millisecond},
		}},
		{"duplicate keeps the earlier time (earlier second)", []step{
			{adds: []delayedAdd{{"a", 50 * time.Millisecond}, {"a", 30 * time.Millisecond}}, advance: 40 * time.Millisecond, want: []string{"a"}},
			{advance: 20 * time.Millisecond},
		}},
		{"non-positive delay adds at once", []step{
			{adds: []delayedAdd{{"x", time.Hour}, {"a", 0}, {"b", -time.Second}}, want: []string{"a", "b"}},
		}},
		{"delayed add of a waiting item collapses", []step{
			{adds: []delayedAdd{{"a", 0}, {"a", 10 * time.Millisecond}}, want: []string{"a"}},
			{adds: []delayedAdd{{"a", 0}}, advance: 10 * time.Millisecond, want: []string{"a"}},
		}},
		{"many items, one timer", []step{
			{adds: []delayedAdd{{"e", 5 * time.Second}, {"d", 4 * time.Second}, {"c", 3 * time.Second}, {"b", 2 * time.Second}, {"a", time.Second}},
				advance: 2 * time.Second, want: []string{"a", "b"}},
			{advance: 3 * time.Second, want: []string{"c", "d", "e"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			q := NewDelaying[string](WithClock(clock))
			defer q.ShutDown()
			for _, s := range tt.steps {
				for _, a := range s.adds {
					q.AddAfter(a.item, a.d)
				}
				settle(t, q, clock)
				clock.step(s.advance)
				takeAll(t, q, clock, s.want)
			}
		})
	}
}

func TestAddAfterRealClock(t *testing.T) {
	q := NewDelaying[string]()
	defer q.ShutDown()
	start := time.Now()
	q.AddAfter("a", 20*time.Millisecond)
	q.AddAfter("b", 10*time.Millisecond)
	for _, want := range []string{"b", "a"} {
		if item, _ := q.Get(); item != want {
			t.Fatalf("Get() = %q, want %q", item, want)
		}
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("a added after %v, before its 20ms delay", waited)
	}
}

func TestAddAfterShutDown(t *testing.T) {
	clock := newFakeClock()
	q := NewDelaying[string](WithClock(clock))
	q.AddAfter("pending", time.Second)
	q.ShutDown()
	q.AddAfter("late", 0)
	q.AddAfter("later", time.Millisecond)
	clock.step(time.Hour)
	if item, shutdown := q.Get(); !shutdown {
		t.Fatalf("Get() = %q after ShutDown, want shutdown", item)
	}
}
