package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/utils/exec"
)

// TestFanout: attached clients get what the copier reads, each stream to its writer, partial
// lines as they come; a client attached later gets only what follows; close ends the clients
// after the last output; a closed fanout takes no client.
func TestFanout(t *testing.T) {
	var f fanout
	var out1, err1, out2 bytes.Buffer
	c1, err := f.attach(&out1, &err1)
	if err != nil {
		t.Fatal(err)
	}
	stdout := f.tee(strings.NewReader("prompt$ "), "stdout")
	if _, err := io.ReadAll(stdout); err != nil {
		t.Fatal(err)
	}
	c2, _ := f.attach(&out2, nil) // no stderr asked for
	if _, err := io.ReadAll(f.tee(strings.NewReader("oops\n"), "stderr")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(f.tee(strings.NewReader("line\n"), "stdout")); err != nil {
		t.Fatal(err)
	}
	f.close()
	for _, c := range []*attachClient{c1, c2} {
		if err := c.pump(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if out1.String() != "prompt$ line\n" || err1.String() != "oops\n" || out2.String() != "line\n" {
		t.Errorf("client 1 got %q and %q, client 2 %q", out1.String(), err1.String(), out2.String())
	}
	if _, err := f.attach(&out1, nil); !errors.Is(err, errRunEnded) {
		t.Errorf("attach after close: %v", err)
	}
	// Without clients the tee passes everything through untouched.
	var none fanout
	if got, _ := io.ReadAll(none.tee(strings.NewReader("x"), "stdout")); string(got) != "x" {
		t.Errorf("tee without clients: %q", got)
	}
}

// TestFanoutDetach: a detached client's pump ends, and writes do not wait for it.
func TestFanoutDetach(t *testing.T) {
	var f fanout
	c, _ := f.attach(io.Discard, nil)
	f.detach(c)
	for range 100 { // more than the client's buffer holds
		if _, err := io.ReadAll(f.tee(strings.NewReader("x\n"), "stdout")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.pump(context.Background()); err != nil {
		t.Errorf("pump of a detached client: %v", err)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{"bin/prog", 0o755}, {"bin/data", 0o644}, {"local/tool", 0o755}} {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=/nowhere", "HOME=/", "PATH=" + filepath.Join(dir, "bin") + ":local"} // the last PATH counts
	cases := []struct {
		name, want string
		err        error
	}{
		{"prog", filepath.Join(dir, "bin/prog"), nil},
		{"tool", filepath.Join(dir, "local/tool"), nil}, // a relative PATH entry is in the working directory
		{"./local/tool", filepath.Join(dir, "local/tool"), nil},
		{filepath.Join(dir, "bin/prog"), filepath.Join(dir, "bin/prog"), nil},
		{"data", "", exec.ErrNotFound}, // not executable: not a match in PATH
		{"nope", "", exec.ErrNotFound},
		{"bin/data", "", os.ErrPermission},
		{"bin/nope", "", os.ErrNotExist},
		{"bin", "", exec.ErrNotFound}, // not in any of PATH's directories
		{"./bin", "", os.ErrPermission},
	}
	for _, tc := range cases {
		got, err := lookPath(tc.name, env, dir, "")
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("lookPath(%q) = %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
	// Seen through view (the container's root from the host), found at the container's path.
	if got, err := lookPath("prog", []string{"PATH=/bin"}, "/", dir); got != "/bin/prog" || err != nil {
		t.Errorf("lookPath through a view = %q, %v; want /bin/prog", got, err)
	}
	// An absolute symbolic link resolves in the view, as in the container: /bin/prog here
	// does not exist on the host.
	if err := os.Symlink("/bin/prog", filepath.Join(dir, "local", "linked")); err != nil {
		t.Fatal(err)
	}
	if got, err := lookPath("linked", []string{"PATH=/local"}, "/", dir); got != "/local/linked" || err != nil {
		t.Errorf("lookPath of an absolute link through a view = %q, %v; want /local/linked", got, err)
	}
	if _, err := lookPath("/bin/data", nil, "/", dir); !errors.Is(err, os.ErrPermission) {
		t.Errorf("lookPath of a file that is not executable in the view: %v", err)
	}
}

func TestSessionStatus(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want metav1.Status
	}{
		{"success", nil, metav1.Status{Status: metav1.StatusSuccess}},
		{"exit code", utilexec.CodeExitError{Err: errors.New("exit 3"), Code: 3}, metav1.Status{
			Status: metav1.StatusFailure, Reason: "NonZeroExitCode", Message: "command terminated with non-zero exit code: exit 3",
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "ExitCode", Message: "3"}}}}},
		{"other", errors.New("boom"), metav1.Status{
			Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: "Internal error occurred: failed: boom",
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Message: "failed: boom"}}}}},
	}
	for _, tc := range cases {
		if got := sessionStatus(tc.err, "failed"); !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
