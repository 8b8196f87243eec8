package workqueue

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimiter decides how long an item waits before it is retried. Implementations are safe for
// concurrent use.
type RateLimiter[T comparable] interface {
	// When records one more retry of item and returns how long that retry should wait.
	When(item T) time.Duration
	// Forget drops what the limiter remembers about item, typically after it was processed
	// successfully, so its next failure starts from the shortest wait again.
	Forget(item T)
	// NumRequeues returns how many retries of item the limiter has recorded since the last Forget.
	NumRequeues(item T) int
}

// DefaultControllerRateLimiter returns the limiter Kubernetes controllers use: the longer of a
// per-item exponential backoff (5ms doubling up to 1000s) and an overall token bucket (10 retries
// per second, bursts of 100) that keeps a flood of failures from hammering the API server.
func DefaultControllerRateLimiter[T comparable]() RateLimiter[T] {
	return NewMaxOfRateLimiter(
		NewItemExponentialFailureRateLimiter[T](5*time.Millisecond, 1000*time.Second),
		NewBucketRateLimiter[T](10, 100),
	)
}

// ItemExponentialFailureRateLimiter makes the n-th retry of an item (counting from 0) wait
// base*2^n, capped at max. The count grows until Forget.
type ItemExponentialFailureRateLimiter[T comparable] struct {
	base, max time.Duration

	mu       sync.Mutex
	failures map[T]int
}

// NewItemExponentialFailureRateLimiter returns a limiter whose waits are base, 2*base, 4*base, …
// up to max per item.
func NewItemExponentialFailureRateLimiter[T comparable](base, max time.Duration) *ItemExponentialFailureRateLimiter[T] {
	return &ItemExponentialFailureRateLimiter[T]{base: base, max: max, failures: map[T]int{}}
}

// When counts a failure of item and returns base*2^(failures before this one), capped at max.
func (r *ItemExponentialFailureRateLimiter[T]) When(item T) time.Duration {
	r.mu.Lock()
	n := r.failures[item]
	r.failures[item] = n + 1
	r.mu.Unlock()
	return backoff(r.base, r.max, n)
}

// backoff returns base<<n capped at max, without overflowing: base<<n > max exactly when base
// exceeds max>>n, and a shift of 63 or more overflows any positive base.
func backoff(base, max time.Duration, n int) time.Duration {
	if base <= 0 {
		return min(base, max)
	}
	if n >= 63 || base > max>>n {
		return max
	}
	return base << n
}

// Forget resets item's failure count.
func (r *ItemExponentialFailureRateLimiter[T]) Forget(item T) {
	r.mu.Lock()
	delete(r.failures, item)
	r.mu.Unlock()
}

// NumRequeues returns item's failure count.
func (r *ItemExponentialFailureRateLimiter[T]) NumRequeues(item T) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[item]
}

// BucketRateLimiter is a token bucket shared by all items: a burst of retries goes through at
// once, after which retries are spaced to qps, whatever the item.
type BucketRateLimiter[T comparable] struct {
	limiter *rate.Limiter
	now     func() time.Time // replaced in tests
}

// NewBucketRateLimiter returns a bucket that holds burst tokens and refills at qps per second.
func NewBucketRateLimiter[T comparable](qps float64, burst int) *BucketRateLimiter[T] {
	return &BucketRateLimiter[T]{limiter: rate.NewLimiter(rate.Limit(qps), burst), now: time.Now}
}

// When takes a token (possibly one that is yet to be refilled) and returns how long until it is
// available. Every call reserves a token, so the caller should actually retry after the wait.
func (r *BucketRateLimiter[T]) When(T) time.Duration {
	now := r.now()
	return r.limiter.ReserveN(now, 1).DelayFrom(now)
}

// Forget does nothing: the bucket keeps no per-item state.
func (r *BucketRateLimiter[T]) Forget(T) {}

// NumRequeues returns 0: the bucket keeps no per-item state.
func (r *BucketRateLimiter[T]) NumRequeues(T) int { return 0 }

// MaxOfRateLimiter combines limiters: an item waits as long as the slowest of them says.
type MaxOfRateLimiter[T comparable] struct {
	limiters []RateLimiter[T]
}

// NewMaxOfRateLimiter returns a limiter that consults every one of limiters.
func NewMaxOfRateLimiter[T comparable](limiters ...RateLimiter[T]) *MaxOfRateLimiter[T] {
	return &MaxOfRateLimiter[T]{limiters: limiters}
}

// When asks every limiter (each one records the retry) and returns the longest wait.
func (r *MaxOfRateLimiter[T]) When(item T) time.Duration {
	var longest time.Duration
	for _, l := range r.limiters {
		longest = max(longest, l.When(item))
	}
	return longest
}

// Forget forgets item in every limiter.
func (r *MaxOfRateLimiter[T]) Forget(item T) {
	for _, l := range r.limiters {
		l.Forget(item)
	}
}

// NumRequeues returns the largest count any limiter reports.
func (r *MaxOfRateLimiter[T]) NumRequeues(item T) int {
	var n int
	for _, l := range r.limiters {
		n = max(n, l.NumRequeues(item))
	}
	return n
}
