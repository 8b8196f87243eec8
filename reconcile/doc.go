// Package reconcile runs a control loop's workers: goroutines that take keys from a
// rate-limited work queue and call a sync function for each, once the informers the loop reads
// have synced. A sync returns a Result and an error: an error retries the key with the queue's
// rate limiter (up to MaxRetries times); a Result with After > 0 looks at the key again after
// that long without counting as a failure. It also counts and times every sync (SyncMetrics).
//
// The controller manager's controllers build their loops with controller.NewLoop; the
// scheduler and the node agent's provisioner use Workers directly.
package reconcile
