package workqueue

// RateLimitingQueue is a DelayingQueue whose retries are paced by a RateLimiter. It has every
// method of Queue and DelayingQueue too.
type RateLimitingQueue[T comparable] struct {
	*DelayingQueue[T]
	limiter RateLimiter[T]
}

// NewRateLimited returns an empty queue that paces AddRateLimited with limiter. Options are those
// of New.
func NewRateLimited[T comparable](limiter RateLimiter[T], opts ...Option) *RateLimitingQueue[T] {
	return &RateLimitingQueue[T]{
		DelayingQueue: newDelaying[T](buildOptions(opts)),
		limiter:       limiter,
	}
}

// AddRateLimited adds item after the wait the limiter gives it (see AddAfter), recording one more
// retry of item.
func (q *RateLimitingQueue[T]) AddRateLimited(item T) {
	q.AddAfter(item, q.limiter.When(item))
}

// Forget tells the limiter that item is done being retried, for success or for good, so its next
// failure starts from the shortest wait. It does not replace Done.
func (q *RateLimitingQueue[T]) Forget(item T) {
	q.limiter.Forget(item)
}

// NumRequeues returns how many times item has been rate-limited since it was last forgotten.
func (q *RateLimitingQueue[T]) NumRequeues(item T) int {
	return q.limiter.NumRequeues(item)
}
