// Package osthread runs functions on OS threads of their own that end with them, so that what
// such a function changes about its thread (a namespace entered, a cgroup joined, a working
// directory unshared) never reaches another goroutine.
package osthread

import (
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Go runs f on a new goroutine locked to an OS thread that is not the process's main thread;
// the thread ends when f returns. Go's runtime ends the thread of a goroutine that exits
// locked, except the main thread, which it parks for ever instead: in whatever namespace f
// left it, and /proc/self shows the main thread's view to the whole process.
func Go(f func()) {
	go run(f, nil)
}

// movedOffMain counts the starts that found themselves on the main thread (for tests).
var movedOffMain atomic.Int64

// run locks the calling goroutine to its thread and runs f there, unless that is the main
// thread: then it starts again on a new goroutine and closes moved once it holds a thread.
func run(f func(), moved chan<- struct{}) {
	runtime.LockOSThread() // never unlocked once f may run: the thread ends with the goroutine
	if unix.Gettid() == unix.Getpid() {
		// Nothing is changed yet. The main thread is held until the new goroutine is locked
		// to another thread: let go at once, it could pick that goroutine up itself, again
		// and again.
		movedOffMain.Add(1)
		next := make(chan struct{})
		go run(f, next)
		<-next
		runtime.UnlockOSThread()
		return
	}
	if moved != nil {
		close(moved)
	}
	f()
}
