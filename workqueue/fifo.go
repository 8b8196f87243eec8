package workqueue

// fifo is a growable ring buffer. A plain slice that is appended to and resliced from the front
// keeps reallocating under a steady add/get load; the ring reuses its array instead.
type fifo[T any] struct {
	buf  []T // len(buf) is zero or a power of two, so an index wraps with a mask
	head int
	n    int
}

func (f *fifo[T]) len() int { return f.n }

func (f *fifo[T]) push(x T) {
	if f.n == len(f.buf) {
		f.resize(max(8, 2*len(f.buf)))
	}
	f.buf[(f.head+f.n)&(len(f.buf)-1)] = x
	f.n++
}

// pop removes the oldest item; the caller checks len first.
func (f *fifo[T]) pop() T {
	var zero T
	x := f.buf[f.head]
	f.buf[f.head] = zero // let the garbage collector have what the item points to
	f.head = (f.head + 1) & (len(f.buf) - 1)
	f.n--
	// Give memory back after a burst, but not so eagerly that a queue hovering around one size
	// keeps reallocating.
	if len(f.buf) > 1024 && f.n < len(f.buf)/4 {
		f.resize(len(f.buf) / 2)
	}
	return x
}

func (f *fifo[T]) resize(size int) {
	buf := make([]T, size)
	for i := range f.n {
		buf[i] = f.buf[(f.head+i)&(len(f.buf)-1)]
	}
	f.buf, f.head = buf, 0
}
