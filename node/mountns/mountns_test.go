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
	"time"
)

func needRoot(t *testing.T) {
	t.Helper()
	if !Privileged() {
		t.Skip("not root: the user-namespace path is tested by TestUnprivileged")
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
			script: "cat /" + id + "/data/hello; test -d /usr/bin && echo usr; test -r /proc/self/status && echo proc; touch /" + id + "/new && echo written",
			want:   "hiusr\nproc\nwritten\n", ownRoot: true, notThere: []string{"/" + id}},
		{name: "a missing directory under one with mounts under it", mounts: []Mount{{Source: vol, Target: "/dev/" + id + "/data"}},
			script: "cat /dev/" + id + "/data/hello; echo; stat -f -c %T /dev/shm; echo x > /dev/null && echo null", want: "hi\ntmpfs\nnull\n",
			notThere: []string{"/dev/" + id}},
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

// unprivilegedEnv makes the test binary run unprivilegedScenario instead of its tests.
const unprivilegedEnv = "KPLANE_MOUNTNS_TEST_SCENARIO"

func TestMain(m *testing.M) {
	if dir := os.Getenv(unprivilegedEnv); dir != "" {
		unprivilegedScenario(dir)
		return
	}
	os.Exit(m.Run())
}

// unprivilegedScenario runs as a user that is not root: a process with a volume at a path
// missing on the host, a second process entering its namespaces, and a bad mount.
func unprivilegedScenario(dir string) {
	fail := func(format string, args ...any) {
		fmt.Printf("FAIL "+format+"\n", args...)
		os.Exit(1)
	}
	cmd := exec.Command("/bin/sh", "-c", "cat /kplane-unprivileged/data/hello; echo; id -u; echo > ready; exec sleep 30")
	cmd.Dir = filepath.Join(dir, "out") // writable by this user
	outPath := filepath.Join(dir, "out", "out")
	out, err := os.Create(outPath)
	if err != nil {
		fail("%v", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p, _, err := Start(cmd, []Mount{{Source: filepath.Join(dir, "vol"), Target: "/kplane-unprivileged/data", ReadOnly: true}}, filepath.Join(dir, "work"), Hooks{})
	if err != nil {
		fail("start: %v", err)
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "out", "ready")); err == nil {
			break
		}
		if i == 500 {
			fail("the process did not get going")
		}
		time.Sleep(10 * time.Millisecond)
	}
	enter := exec.Command("/bin/sh", "-c", "cat hello; touch x 2>/dev/null || echo read-only")
	enter.Dir = "/kplane-unprivileged/data"
	var entered bytes.Buffer
	enter.Stdout, enter.Stderr = &entered, &entered
	q, err := Enter(enter, cmd.Process.Pid, "", Hooks{})
	if err == nil {
		err = q.Wait()
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = p.Wait()
	bad := exec.Command("/bin/true")
	bad.SysProcAttr = &syscall.SysProcAttr{}
	_, _, badErr := Start(bad, []Mount{{Source: filepath.Join(dir, "missing"), Target: "/x"}}, filepath.Join(dir, "work2"), Hooks{})
	started, _ := os.ReadFile(outPath)
	fmt.Printf("started: %q\nentered: %q %v\nbad: %v\n", started, entered.String(), err, badErr)
}

// TestUnprivileged runs the scenario as nobody (uid 65534), in a user namespace.
func TestUnprivileged(t *testing.T) {
	if !Privileged() {
		t.Skip("needs root to become another user")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kplane-mountns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{dir, filepath.Join(dir, "vol")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"work", "work2", "out"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o777); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(filepath.Join(dir, d), 0o777)
	}
	if err := os.WriteFile(filepath.Join(dir, "vol", "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "mountns.test")
	if err := os.WriteFile(copyPath, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copyPath, "-test.run=^$")
	cmd.Env = []string{unprivilegedEnv + "=" + dir, "PATH=" + os.Getenv("PATH")}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "operation not permitted") && strings.Contains(string(out), "start:") {
			t.Skipf("this machine allows no user namespace to nobody: %s", out)
		}
		t.Fatalf("%v: %s", err, out)
	}
	want := "started: \"hi\\n0\\n\"\nentered: \"hiread-only\\n\" <nil>\nbad: setting up the container's mounts in a user namespace: mounting "
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("scenario output:\n%s\nwant prefix:\n%s", out, want)
	}
}
