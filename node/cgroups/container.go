package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Container is the cgroup of one run of a container (under kind None, the process group it
// is accounted by). Create makes it, StartInside and Join put the run's process into it,
// Remove ends it.
type Container struct {
	m        *Manager
	dirs     layout
	settings Settings

	mu      sync.Mutex
	pid     int // the run's process, leader of its process group
	started time.Time
	inside  bool // the process was started inside the cgroup (v2)
	// cpuHigh keeps the CPU time reported under kind None from going down when a process of
	// the group that its leader did not wait for exits (its time leaves /proc with it).
	cpuHigh atomic.Uint64
	removed atomic.Bool
}

// Settings are the values the container's cgroup was given.
func (c *Container) Settings() Settings { return c.settings }

// StartInside makes a process started with attr begin life in the container's cgroup
// (cgroup v2: clone3 with CLONE_INTO_CGROUP), so that nothing it does escapes the limits.
// Call release once the process has started (or failed to). Elsewhere it changes nothing
// and Join does the placing.
func (c *Container) StartInside(attr *syscall.SysProcAttr) (release func()) {
	if c.m.kind != V2 {
		return func() {}
	}
	fd, err := unix.Open(c.dirs.cpu, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return func() {} // Join writes the pid instead
	}
	attr.UseCgroupFD, attr.CgroupFD = true, fd
	c.mu.Lock()
	c.inside = true
	c.mu.Unlock()
	return func() { unix.Close(fd) }
}

// Join records the run's process pid (which leads its own process group) and, where it did
// not start inside the cgroup (cgroup v1), moves it in: it and what it starts from now on
// are accounted and limited. On an error the process is outside its cgroup; the caller
// should kill it.
func (c *Container) Join(pid int) error {
	c.mu.Lock()
	c.pid, c.started = pid, time.Now()
	inside := c.inside
	c.mu.Unlock()
	if c.m.kind == None || inside {
		return nil
	}
	dirs := c.dirs.dirs()
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("moving process %d into cgroup %s: %w", pid, d, err)
		}
	}
	// Each hierarchy is joined on its own: a process forked between two of the writes is in
	// the first ones only. Move what the first holds into the others too. (What was forked
	// before the first write stays outside; its process group is still killed at the end.)
	for _, other := range procs(dirs[0]) {
		if other != pid {
			for _, d := range dirs[1:] {
				_ = os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(other)), 0)
			}
		}
	}
	return nil
}

// ThreadHooks are for a caller that forks the run's process from a locked OS thread (as
// node/mountns does, with its Hooks): before moves that thread, and only it, into the
// container's cgroup, so that the process is born there, with no moment outside it; after
// moves the thread back where it was. Join then has nothing left to move. Under cgroup v2
// (StartInside starts the process inside) and kind None both do nothing.
func (c *Container) ThreadHooks() (before func() error, after func()) {
	if c.m.kind != V1 {
		return func() error { return nil }, func() {}
	}
	var home []string // the thread's cgroup directories before the move
	before = func() error {
		tid := strconv.Itoa(unix.Gettid())
		own, err := ownCgroups("/proc/thread-self/cgroup")
		if err != nil {
			return err
		}
		home = home[:0]
		for _, ctrl := range []string{"memory", "cpu", "cpuacct"} {
			if mt, ok := c.m.v1[ctrl]; ok {
				if d := mt.dir(own[ctrl]); !contains(home, d) {
					home = append(home, d)
				}
			}
		}
		for _, d := range c.dirs.dirs() {
			if err := os.WriteFile(filepath.Join(d, "tasks"), []byte(tid), 0); err != nil {
				after() // nothing is started: the thread goes home
				return fmt.Errorf("moving the starting thread into cgroup %s: %w", d, err)
			}
		}
		c.mu.Lock()
		c.inside = true
		c.mu.Unlock()
		return nil
	}
	after = func() {
		tid := strconv.Itoa(unix.Gettid())
		for _, d := range home {
			_ = os.WriteFile(filepath.Join(d, "tasks"), []byte(tid), 0)
		}
	}
	return before, after
}

// Started is when the run's process started (zero before Join).
func (c *Container) Started() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// PID is the run's process (0 before Join).
func (c *Container) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid
}

// OOMKilled reports whether the kernel's OOM killer killed a process of the cgroup because
// it reached its memory limit. Call it before Remove.
func (c *Container) OOMKilled() bool {
	var file string
	switch c.m.kind {
	case V1:
		file = "memory.oom_control"
	case V2:
		file = "memory.events"
	default:
		return false
	}
	var r fileReader
	return r.read(filepath.Join(c.dirs.memory, file)) == nil && r.field("oom_kill") > 0
}

// Remove kills every process left in the cgroup and removes it. Usage cannot be read
// after it.
func (c *Container) Remove() error {
	c.removed.Store(true)
	if c.m.kind == None {
		return nil
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return removeCgroup(c.dirs)
}

// removeTimeout bounds how long removing a cgroup waits for its processes to die.
const removeTimeout = 5 * time.Second

// removeCgroup kills the processes in l's directories until none is left, then removes
// them. A directory already gone is not an error.
func removeCgroup(l layout) error {
	deadline := time.Now().Add(removeTimeout)
	var errs []error
	for _, d := range l.dirs() {
		for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
			err := os.Remove(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
				break
			}
			// cgroup.kill (v2, Linux 5.14) kills every process at once, forks included.
			if os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0) != nil {
				for _, pid := range procs(d) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(delay)
		}
	}
	return errors.Join(errs...)
}

// procs lists the processes in the cgroup d.
func procs(d string) []int {
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
