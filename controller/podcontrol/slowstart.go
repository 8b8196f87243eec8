package podcontrol

import "sync"

// slowStartInitialBatch is the size of the first batch of creations.
const slowStartInitialBatch = 1

// batchSizes returns the batch sizes slowStart uses for n calls: initial, then doubling,
// the last one cut to what remains.
func batchSizes(n, initial int) []int {
	var out []int
	size := min(n, max(initial, 1))
	for n > 0 {
		out = append(out, size)
		n -= size
		size = min(2*size, n)
	}
	return out
}

// SlowStart calls fn n times in batches of growing size (1, 2, 4, ...), the calls of one
// batch concurrently. A batch with any failure ends it: a template the server rejects then
// costs one failed request, not n. It returns how many calls succeeded and the first error.
func SlowStart(n int, fn func() error) (int, error) {
	done := 0
	for _, size := range batchSizes(n, slowStartInitialBatch) {
		errs := make(chan error, size)
		var wg sync.WaitGroup
		for range size {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		done += size - len(errs)
		if err, failed := <-errs; failed {
			return done, err
		}
	}
	return done, nil
}
