package cgroups

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// machineManager is a Manager on this machine's cgroups, skipping the test where the
// machine cannot give one (not root, no usable controllers).
func machineManager(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroups need root: run the tests as root to cover them")
	}
	m := New(Config{Node: fmt.Sprintf("cgtest-%d-%s", os.Getpid(), strings.ToLower(t.Name()))})
	if ok, why := m.Enforced(); !ok {
		t.Skipf("this machine gives no cgroups: %s", why)
	}
	t.Cleanup(m.Close)
	return m
}

func testPod(name string, res corev1.ResourceRequirements) (*corev1.Pod, *corev1.Container) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("uid-%s-%d", name, time.Now().UnixNano()))},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: res}}}}
	return pod, &pod.Spec.Containers[0]
}

// start runs script in c's cgroup as the node agent does: its own process group, started
// inside the cgroup (v2) or moved in right after (v1).
func start(t *testing.T, c *Container, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	release := c.StartInside(cmd.SysProcAttr)
	err := cmd.Start()
	release()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Join(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

// hasSleep reports whether one of pids is a sleep process (gone a moment later).
func hasSleep(pids []int) bool {
	for _, pid := range pids {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) == "sleep" {
			return true
		}
	}
	return false
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestCgroupLifecycle(t *testing.T) {
	m := machineManager(t)
	pod, ctr := testPod("life", resources("250m", "500m", "64Mi"))
	c, err := m.Create(pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	// Limits written, in the container's and (all containers being limited) the pod's cgroup.
	podDirs := m.node.join("pod" + string(pod.UID))
	for _, l := range []layout{c.dirs, podDirs} {
		if m.kind == V1 {
			for file, want := range map[string]string{"cpu.shares": "256", "cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"} {
				if got := readFile(t, filepath.Join(l.cpu, file)); got != want {
					t.Errorf("%s/%s = %s, want %s", l.cpu, file, got, want)
				}
			}
			if got := readFile(t, filepath.Join(l.memory, "memory.limit_in_bytes")); got != fmt.Sprint(64<<20) {
				t.Errorf("memory limit = %s", got)
			}
		} else {
			if got := readFile(t, filepath.Join(l.cpu, "cpu.max")); got != "50000 100000" {
				t.Errorf("cpu.max = %s", got)
			}
			if got := readFile(t, filepath.Join(l.memory, "memory.max")); got != fmt.Sprint(64<<20) {
				t.Errorf("memory.max = %s", got)
			}
		}
	}

	// Placement: the process and what it starts (once it is placed: under v1 it joins right
	// after its start) are in every controller's cgroup.
	cmd := start(t, c, `sleep 0.1; sh -c 'while :; do :; done' & while :; do :; done`)
	var inside []int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if inside = procs(c.dirs.memory); len(inside) >= 2 && !hasSleep(inside) {
			break
		}
	}
	for _, d := range c.dirs.dirs() {
		if got := procs(d); !slices.Contains(got, cmd.Process.Pid) || len(got) < 2 {
			t.Errorf("cgroup %s holds %v, want %d and its child", d, got, cmd.Process.Pid)
		}
	}

	// Stats: CPU grows while the loops spin (the quota allows half a CPU), memory is charged.
	s1, err := m.Snapshot().Container(c)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	s2, err := m.Snapshot().Container(c)
	if err != nil {
		t.Fatal(err)
	}
	if s2.CPU <= s1.CPU || s2.WorkingSet == 0 || s2.Memory < s2.WorkingSet {
		t.Errorf("usage %+v then %+v: want CPU growing and a working set", s1, s2)
	}
	// The quota holds: 300 ms at half a CPU is about 150 ms of CPU time, far from 2 × 300.
	if used := time.Duration(s2.CPU - s1.CPU); used > 400*time.Millisecond {
		t.Errorf("used %v of CPU in 300 ms under a 500m quota", used)
	}
	if ps, err := m.Snapshot().Pod(pod.UID, []*Container{c}); err != nil || ps.CPU < s2.CPU {
		t.Errorf("pod usage %+v (%v) below its container's %d", ps, err, s2.CPU)
	}
	if c.OOMKilled() {
		t.Error("OOMKilled without an OOM kill")
	}

	// Removal kills what is left (the background loop) and removes the cgroups.
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	if err := c.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.dirs.dirs() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s still there: %v", d, err)
		}
	}
	for _, pid := range inside {
		if err := syscall.Kill(pid, 0); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(b), ") Z") {
				t.Errorf("process %d of the removed cgroup still runs", pid)
			}
		}
	}
	if _, err := m.Snapshot().Container(c); err != ErrRemoved {
		t.Errorf("usage after removal: %v", err)
	}
	if err := m.RemovePod(pod.UID); err != nil {
		t.Fatal(err)
	}
	for _, d := range podDirs.dirs() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("pod cgroup %s still there: %v", d, err)
		}
	}
}

func TestOOMKilled(t *testing.T) {
	m := machineManager(t)
	pod, ctr := testPod("oom", resources("", "", "16Mi"))
	c, err := m.Create(pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.RemovePod(pod.UID) }()
	// The shell doubles a string until the limit stops it.
	cmd := start(t, c, `x=0123456789abcdef; while :; do x="$x$x"; done`)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the shell outgrew 16Mi without being killed")
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("exit %v, want killed by SIGKILL", cmd.ProcessState)
	}
	if !c.OOMKilled() {
		t.Error("OOMKilled = false after the OOM killer ran")
	}
	if err := c.Remove(); err != nil {
		t.Fatal(err)
	}
}

// TestThreadHooks: under cgroup v1, a process forked from a thread the hooks moved into the
// container's cgroup is born there; the thread goes back where it was.
func TestThreadHooks(t *testing.T) {
	m := machineManager(t)
	if m.kind != V1 {
		t.Skipf("the thread hooks act under cgroup v1 only; this machine uses %s", m.kind)
	}
	pod, ctr := testPod("hooks", resources("", "", "64Mi"))
	c, err := m.Create(pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.RemovePod(pod.UID) }()
	home, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	before, after := c.ThreadHooks()
	type result struct {
		cmd      *exec.Cmd
		err      error
		threadAt string
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := before(); err != nil {
			done <- result{err: err}
			return
		}
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err := cmd.Start()
		after()
		b, _ := os.ReadFile("/proc/thread-self/cgroup")
		done <- result{cmd: cmd, err: err, threadAt: string(b)}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() }()
	if r.threadAt != string(home) {
		t.Errorf("thread after the start is in\n%s\nwant\n%s", r.threadAt, home)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", r.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	want := "/kplane/" + filepath.Base(filepath.Dir(filepath.Dir(c.dirs.memory))) + "/pod" + string(pod.UID) + "/main"
	for _, ctrl := range []string{":memory:", ":cpu:", ":cpuacct:"} {
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, ctrl) && strings.HasSuffix(line, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("process %s not in ...%s:\n%s", ctrl, want, b)
		}
	}
	if err := c.Join(r.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
}

// TestFallback: without cgroups, a container is accounted by its process group from /proc
// and nothing is enforced.
func TestFallback(t *testing.T) {
	m := New(Config{Node: "fallback", Disabled: true})
	if ok, why := m.Enforced(); ok || why == "" || m.Kind() != None {
		t.Fatalf("Enforced = %v %q, kind %s", ok, why, m.Kind())
	}
	pod, ctr := testPod("fb", resources("", "1", "1Mi"))
	c, err := m.Create(pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if c.Settings().MemoryLimit != 1<<20 {
		t.Errorf("settings not recorded: %+v", c.Settings())
	}
	cmd := start(t, c, `sh -c 'while :; do :; done' & while :; do :; done`)
	// The spinning processes' CPU time shows (in 10 ms ticks, on a machine that may be busy),
	// and more memory than 1Mi, which is not enforced.
	var snap *Snapshot
	var u Usage
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		snap = m.Snapshot()
		var err error
		if u, err = snap.Container(c); err != nil {
			t.Fatal(err)
		}
		if u.CPU >= uint64(50*time.Millisecond) && u.WorkingSet >= 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage %+v", u)
		}
	}
	if p, err := snap.Pod(pod.UID, []*Container{c}); err != nil || p.CPU != u.CPU {
		t.Errorf("pod usage %+v %v", p, err)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	if err := c.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Snapshot().Container(c); err != ErrRemoved {
		t.Errorf("usage after removal: %v", err)
	}
}

func TestNodeUsage(t *testing.T) {
	u, boot, err := NodeUsage()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU == 0 || u.WorkingSet == 0 || u.Memory < u.WorkingSet || boot.IsZero() || boot.After(time.Now()) {
		t.Errorf("node usage %+v, boot %v", u, boot)
	}
}
