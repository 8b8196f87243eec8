// Package workqueue holds the queues that sit between informer event handlers and controller
// workers.
//
// A Queue hands out keys to workers with three guarantees: a key is never held by two workers at
// once, a key added again while it is held is handed out once more after Done (never before), and
// a key added many times while it waits is handed out once. Apart from that, keys come out in the
// order they went in.
//
// DelayingQueue adds AddAfter (one goroutine and one timer for all delayed keys), and
// RateLimitingQueue adds AddRateLimited, Forget and NumRequeues on top of a RateLimiter. Each type
// embeds the one before it, so a *RateLimitingQueue has every method of the other two.
//
// The usual worker loop:
//
//	q := workqueue.NewRateLimited[string](workqueue.DefaultControllerRateLimiter[string](),
//		workqueue.WithName("endpoints"))
//	defer q.ShutDown()
//	for {
//		key, shutdown := q.Get()
//		if shutdown {
//			return
//		}
//		if err := sync(key); err != nil {
//			q.AddRateLimited(key) // retry later, slower each time
//		} else {
//			q.Forget(key) // success: reset the key's backoff
//		}
//		q.Done(key)
//	}
//
// Every goroutine a queue starts has ended by the time ShutDown or ShutDownWithDrain returns.
//
// Metrics: a queue given a name (WithName) reports the Kubernetes workqueue_* metrics labelled
// name=<name>; see Metrics. Unnamed queues report nothing and start no metrics goroutine.
package workqueue
