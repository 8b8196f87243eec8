package testenv_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// asCopy, set in the environment, makes TestEnvsOfOneCopy run: TestSeveralTestBinaries runs
// this test binary again with it.
const asCopy = "KPLANE_TESTENV_COPY"

// `go test ./...` runs the test binaries of several packages at once, each of which may start
// Envs: three processes of this binary, each starting four Envs at once, all work, and no two
// of the twelve share a port or a data dir. Processes of one binary stand for several
// binaries: what they could collide on (free ports, temporary directories) is the machine's,
// not the binary's.
func TestSeveralTestBinaries(t *testing.T) {
	t.Parallel()
	const copies = 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outputs := make([][]byte, copies)
	errs := make([]error, copies)
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEnvsOfOneCopy$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), asCopy+"=1")
			outputs[i], errs[i] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	urls, dirs := map[string]bool{}, map[string]bool{}
	for i := range copies {
		if errs[i] != nil {
			t.Errorf("copy %d: %v\n%s", i, errs[i], outputs[i])
			continue
		}
		lines := bufio.NewScanner(bytes.NewReader(outputs[i]))
		for lines.Scan() {
			if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "instance" {
				urls[f[1]], dirs[f[2]] = true, true
			}
		}
	}
	if t.Failed() {
		return
	}
	// kplane's log lines are hidden; the test's own, through slog and the log package, are
	// not, and keep their format.
	for i, out := range outputs {
		if bytes.Contains(out, []byte("apiserver listening")) {
			t.Errorf("kplane's logs in the output of copy %d:\n%s", i, out)
		}
		if !regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d INFO the test's own line instance=\d$`).Match(out) ||
			!regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d the test's log line$`).Match(out) {
			t.Errorf("the test's own log lines are missing from the output of copy %d:\n%s", i, out)
		}
	}
	if len(urls) != copies*4 || len(dirs) != copies*4 {
		t.Errorf("%d apiserver URLs and %d data dirs, want %d of each:\n%s%s%s", len(urls), len(dirs), copies*4, outputs[0], outputs[1], outputs[2])
	}
}

// TestEnvsOfOneCopy is one process of TestSeveralTestBinaries: four Envs at once, each
// writing and reading an object (as TestManyInParallel). It prints each Env's URL and data dir, and logs lines of
// its own.
func TestEnvsOfOneCopy(t *testing.T) {
	if os.Getenv(asCopy) == "" {
		t.Skip("run by TestSeveralTestBinaries in a process of its own")
	}
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			env := startOwnInstance(t, i)
			fmt.Println("instance", env.Config.Host, env.Dir)
			slog.Info("the test's own line", "instance", i)
			log.Print("the test's log line")
		})
	}
}
