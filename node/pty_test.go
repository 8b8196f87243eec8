package node

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// TestApplyFirstTerminalSize: the first size a client sends is on the terminal before the
// process would start; a client that closes its sizes, or a session that ends, does not
// wait out firstSizeWait.
func TestApplyFirstTerminalSize(t *testing.T) {
	master, tty, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer master.Close()
	defer tty.Close()
	sizeOf := func() (uint16, uint16) {
		ws, err := unix.IoctlGetWinsize(int(tty.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			t.Fatal(err)
		}
		return ws.Col, ws.Row
	}

	sizes := make(chan remotecommand.TerminalSize, 2)
	sizes <- remotecommand.TerminalSize{Width: 101, Height: 33}
	sizes <- remotecommand.TerminalSize{Width: 80, Height: 24}
	if rest := applyFirstTerminalSize(context.Background(), master, sizes); rest == nil || len(rest) != 1 {
		t.Errorf("the sizes after the first were not handed on")
	}
	if w, h := sizeOf(); w != 101 || h != 33 {
		t.Errorf("terminal %dx%d, want 101x33", w, h)
	}

	closed := make(chan remotecommand.TerminalSize)
	close(closed)
	if rest := applyFirstTerminalSize(context.Background(), master, closed); rest != nil {
		t.Error("a closed channel of sizes was handed on")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	applyFirstTerminalSize(ctx, master, make(chan remotecommand.TerminalSize))
	if waited := time.Since(began); waited >= firstSizeWait {
		t.Errorf("an ended session waited %v for a size", waited)
	}
}
