package nftables

import (
	"fmt"

	"github.com/kplane/kplane/internal/osthread"
	"golang.org/x/sys/unix"
)

// inNetNS runs fn on an OS thread that has entered the network namespace at path (for
// example /run/netns/node1): sockets fn opens and processes it starts (the nft binary)
// belong to that namespace. With path "", fn runs on the calling goroutine.
//
// The thread is never handed back to the runtime: it ends with fn (osthread.Go), so no other
// goroutine ever runs in the namespace by accident.
func inNetNS(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	done := make(chan error, 1)
	osthread.Go(func() {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("network namespace %s: %w", path, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			done <- fmt.Errorf("entering network namespace %s: %w", path, err)
			return
		}
		done <- fn()
	})
	return <-done
}
