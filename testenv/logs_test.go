package testenv_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/kplane/kplane/testenv"
)

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WithLogs gets kplane's lines while its Env runs, and none once it is stopped. (That the
// lines are hidden by default, and the test's own are not, TestSeveralTestBinaries checks
// on the output of whole processes.) Not parallel: another Env's lines would reach the buffer.
func TestWithLogs(t *testing.T) {
	var logs lockedBuffer
	t.Run("with", func(t *testing.T) {
		testenv.Start(t, testenv.WithLogs(&logs))
	})
	got := logs.String()
	if !strings.Contains(got, `level=INFO msg="kplane apiserver listening"`) || !strings.Contains(got, "msg=\"starting controller\" controller=namespace-controller") {
		t.Errorf("WithLogs got:\n%s", got)
	}
	t.Run("without", func(t *testing.T) {
		testenv.Start(t)
	})
	if now := logs.String(); now != got {
		t.Errorf("lines of a later Env reached a stopped Env's writer:\n%s", strings.TrimPrefix(now, got))
	}
}
