package node

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// openPTY opens a new pseudo-terminal: the master, which the agent reads the process's output
// from and writes its input to, and the terminal itself (the "slave"), which becomes the
// process's stdin, stdout, stderr and controlling terminal. The master is non-blocking and
// in Go's poller, so a read of it can be given a deadline and ends when it is closed.
func openPTY() (master, tty *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	var n uint32
	if err := control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlock the terminal
			return err
		}
		n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN)
		return err
	}); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("setting up a pseudo-terminal: %w", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	return master, tty, nil
}

// setTerminalSize sets the window size of the terminal whose master is f (the process gets
// SIGWINCH). A zero size is left alone.
func setTerminalSize(master *os.File, width, height uint16) error {
	if width == 0 || height == 0 {
		return nil
	}
	return control(master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: width, Row: height})
	})
}

// firstSizeWait bounds how long an exec on a terminal waits for the client's first size.
const firstSizeWait = time.Second

// applyFirstTerminalSize waits for the first size the client sends and sets it on the
// terminal whose master is master, so that the process starts on a terminal of the client's
// size: kubectl sends its size as soon as the session opens, but a shell started before it
// arrives reads 0x0 (stty size, the first screen of a full-screen program). A client that
// asks for a terminal and sends no size starts after firstSizeWait. It returns the channel of
// the sizes still to come (nil once the client has closed it).
func applyFirstTerminalSize(ctx context.Context, master *os.File, resize <-chan remotecommand.TerminalSize) <-chan remotecommand.TerminalSize {
	wait := time.NewTimer(firstSizeWait)
	defer wait.Stop()
	select {
	case size, ok := <-resize:
		if !ok {
			return nil
		}
		_ = setTerminalSize(master, size.Width, size.Height)
	case <-wait.C:
	case <-ctx.Done():
	}
	return resize
}

// resizeTerminal applies the sizes a client sends to the terminal whose master is master,
// until resize is closed or done is.
func resizeTerminal(master *os.File, resize <-chan remotecommand.TerminalSize, done <-chan struct{}) {
	for {
		select {
		case size, ok := <-resize:
			if !ok {
				return
			}
			_ = setTerminalSize(master, size.Width, size.Height)
		case <-done:
			return
		}
	}
}

// control runs f with f's descriptor without taking it out of non-blocking mode (as Fd would).
func control(f *os.File, op func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = op(int(fd)) }); err != nil {
		return err
	}
	return opErr
}
