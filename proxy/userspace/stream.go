package userspace

import (
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Bulk TCP data moves through the proxy in large reads and writes: the kernel copies it into a
// buffer and out again, and Go code never looks at the bytes. Measured on loopback, this moves
// more than splice(2) through a pipe did (0.89–1.08× of a direct connection, against 0.71–0.80×
// for splice; bench/README.md), because each read drains what the socket holds in one call.
// The buffers come from pools and are held only while data is in hand: a connection waiting for
// data holds none (one whose writes are stuck, on a peer that does not read, keeps its buffer
// meanwhile). Each direction of a connection picks its buffer size from what its reads return:
// it grows while reads fill the buffer and shrinks when they come back far from full, so small
// request/response traffic stays on small buffers.
var bufferSizes = [...]int{64 << 10, 256 << 10, 1 << 20, 4 << 20}

// largeBudget bounds the bytes in buffers in use at once, over all connections, beyond which a
// direction that wants one of the two largest sizes makes do with a smaller one.
const largeBudget = 64 << 20

const firstLarge = 2 // index in bufferSizes of the first size that largeBudget limits

var (
	bufferPools [len(bufferSizes)]sync.Pool
	inUse       atomic.Int64 // bytes in buffers taken and not yet put back
)

// getBuffer returns a buffer of size bufferSizes[class], or of a smaller class when a large one
// would go over largeBudget; it says which class it is.
func getBuffer(class int) (*[]byte, int) {
	for class >= firstLarge && !reserve(bufferSizes[class], largeBudget) {
		class--
	}
	if class < firstLarge {
		inUse.Add(int64(bufferSizes[class]))
	}
	if b, ok := bufferPools[class].Get().(*[]byte); ok {
		return b, class
	}
	b := make([]byte, bufferSizes[class])
	return &b, class
}

// reserve adds size to inUse if that stays within budget.
func reserve(size int, budget int64) bool {
	for {
		cur := inUse.Load()
		if cur+int64(size) > budget {
			return false
		}
		if inUse.CompareAndSwap(cur, cur+int64(size)) {
			return true
		}
	}
}

func putBuffer(b *[]byte, class int) {
	inUse.Add(-int64(bufferSizes[class]))
	bufferPools[class].Put(b)
}

// copyStream copies src to dst until src ends (nil) or either fails (the error).
func copyStream(dst, src *net.TCPConn) error {
	rc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	class := 0
	for {
		var (
			buf  *[]byte
			got  int
			n    int
			rerr error
		)
		// The read is tried in the poller's callback, so that the buffer is taken only when
		// data is there: on EAGAIN it goes back to the pool and the wait holds none.
		err := rc.Read(func(fd uintptr) bool {
			buf, got = getBuffer(class)
			for {
				n, rerr = unix.Read(int(fd), *buf)
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				putBuffer(buf, got)
				buf = nil
				return false
			}
			return true
		})
		if err == nil {
			err = rerr
		}
		if err != nil || n <= 0 {
			if buf != nil {
				putBuffer(buf, got)
			}
			if errno, ok := err.(unix.Errno); ok {
				err = os.NewSyscallError("read", errno)
			}
			return err // nil: the end of the stream
		}
		_, err = dst.Write((*buf)[:n])
		full := n == len(*buf)
		putBuffer(buf, got)
		if err != nil {
			return err
		}
		class = nextClass(got, n, full)
	}
}

// nextClass is the buffer size to read into next, after a read of n bytes into a buffer of
// class got (full: n filled it): one size up after a full read, one down after a read of a
// sixteenth or less.
func nextClass(got, n int, full bool) int {
	switch {
	case full && got < len(bufferSizes)-1:
		return got + 1
	case n <= bufferSizes[got]/16 && got > 0:
		return got - 1
	}
	return got
}
