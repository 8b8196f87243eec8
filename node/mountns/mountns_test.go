package mountns

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func needRoot(t *testing.T) {
	t.Helper()
	if err := Supported(); err != nil {
		t.Skip(err)
	}
}

// run starts sh -c script with the mounts and returns its output.
func run(t *testing.T, mounts []Mount, script string) (string, string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p, root, err := Start(cmd, mounts, t.TempDir(), Hooks{})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out.String())
	}
	return out.String(), root
}

func volume(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestStart(t *testing.T) {
	needRoot(t)
	id := fmt.Sprintf("kplane-mountns-test-%d", rand.Int64())
	vol := volume(t, map[string]string{"hello": "hi"})
	file := filepath.Join(volume(t, map[string]string{"f": "one file"}), "f")
	existing := t.TempDir()
	if err := os.WriteFile(filepath.Join(existing, "host-only"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		mounts   []Mount
		script   string
		want     string
		ownRoot  bool
		notThere []string // must not exist on the host afterwards
	}{
		{name: "an existing directory is covered", mounts: []Mount{{Source: vol, Target: existing}},
			script: "cat " + existing + "/hello; ls " + existing, want: "hihello\n"},
		{name: "a missing directory under the root", mounts: []Mount{{Source: vol, Target: "/" + id + "/data"}},
			script: "cat /" + id + "/data/hello; test -d /usr/bin && echo usr", want: "hiusr\n", ownRoot: true, notThere: []string{"/" + id}},
		{name: "a missing directory under an existing one, through a symlink", mounts: []Mount{{Source: vol, Target: "/var/run/" + id + "/secrets"}},
			script: "cat /run/" + id + "/secrets/hello; test -d /run/lock && echo lock", want: "hilock\n", notThere: []string{"/run/" + id}},
		{name: "a file", mounts: []Mount{{Source: file, Target: "/etc/" + id + ".conf"}},
			script: "cat /etc/" + id + ".conf; test -s /etc/passwd && echo passwd", want: "one filepasswd\n", notThere: []string{"/etc/" + id + ".conf"}},
		{name: "read-only", mounts: []Mount{{Source: vol, Target: "/" + id, ReadOnly: true}},
			script: "touch /" + id + "/x 2>/dev/null || echo refused", want: "refused\n", ownRoot: true, notThere: []string{"/" + id}},
		{name: "a mount inside another is made in the volume", mounts: []Mount{{Source: vol, Target: "/" + id + "/a/b"}, {Source: vol, Target: "/" + id + "/a"}},
			script: "cat /" + id + "/a/b/hello", want: "hi", ownRoot: true, notThere: []string{"/" + id}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, root := run(t, tc.mounts, tc.script)
			if out != tc.want {
				t.Errorf("output %q, want %q", out, tc.want)
			}
			if (root != "") != tc.ownRoot {
				t.Errorf("own root %q, want %v", root, tc.ownRoot)
			}
			for _, p := range tc.notThere {
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Errorf("%s exists on the host: %v", p, err)
				}
			}
		})
	}
	// The nested case created b inside the volume, as a runtime does.
	if _, err := os.Stat(filepath.Join(vol, "b")); err != nil {
		t.Errorf("nested mount point not in the volume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(existing, "host-only")); err != nil {
		t.Errorf("the covered directory lost its file on the host: %v", err)
	}
}

// TestEnter: a second process started in a running one's namespace sees what it sees.
func TestEnter(t *testing.T) {
	needRoot(t)
	id := fmt.Sprintf("kplane-mountns-test-%d", rand.Int64())
	vol := volume(t, map[string]string{"hello": "hi"})
	for _, target := range []string{"/" + id, "/run/" + id} {
		sleeper := exec.Command("/bin/sleep", "30")
		sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		p, root, err := Start(sleeper, []Mount{{Source: vol, Target: target}}, t.TempDir(), Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/bin/cat", target+"/hello")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		q, err := Enter(cmd, sleeper.Process.Pid, root, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Wait(); err != nil || out.String() != "hi" {
			t.Errorf("%s: %v %q", target, err, out.String())
		}
		_ = sleeper.Process.Kill()
		_ = p.Wait()
		if _, err := Enter(exec.Command("/bin/true"), sleeper.Process.Pid, root, Hooks{}); err == nil || !strings.Contains(err.Error(), "mount namespace") {
			t.Errorf("entering an exited process: %v", err)
		}
	}
}

// TestStartErrors: bad mounts fail the start and start nothing.
func TestStartErrors(t *testing.T) {
	needRoot(t)
	vol := volume(t, map[string]string{"f": "x"})
	for _, m := range []Mount{
		{Source: filepath.Join(vol, "missing"), Target: "/x"},
		{Source: vol, Target: "relative/path"},
		{Source: vol, Target: "/etc/passwd"}, // a directory onto a file
		{Source: vol, Target: "/etc/passwd/sub"},
	} {
		cmd := exec.Command("/bin/true")
		if _, _, err := Start(cmd, []Mount{m}, t.TempDir(), Hooks{}); err == nil {
			t.Errorf("%+v: started", m)
		} else if cmd.Process != nil {
			t.Errorf("%+v: a process was started", m)
		}
	}
}
