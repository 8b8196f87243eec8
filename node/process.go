package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/kplane/kplane/node/mountns"
	"golang.org/x/sys/unix"
)

// startProcess starts cmd (Args set; Stdin, Stdout, Stderr as the caller wants) as a process
// of the container's run, as `kubectl exec` and exec probes run one: cmd.Args[0] looked up in
// the container's PATH as the container sees its file system, in the container's environment
// (then what cmd.Env adds) and working directory, in a process group of its own (a session of
// its own when cmd.SysProcAttr asks for Setsid, for a terminal), in the run's mount namespace
// and cgroup, killed if the agent dies. Wait for it with the returned Process, never cmd.Wait.
//
// Every process exec'd into a container is started here and only here, so that this is the
// one place that puts it into the container's mount namespace and cgroup.
func (r *containerRun) startProcess(cmd *exec.Cmd) (*mountns.Process, error) {
	// The container's view of the file system, from the host: its process's root.
	view := ""
	if r.namespaced {
		view = fmt.Sprintf("/proc/%d/root", r.cmd.Process.Pid)
	}
	path, err := lookPath(cmd.Args[0], r.env, r.dir, view)
	if err != nil {
		return nil, err
	}
	// exec.Command's own lookup (in the host's PATH) is replaced, error and all.
	cmd.Path, cmd.Err, cmd.Dir = path, nil, r.dir
	cmd.Env = append(slices.Clone(r.env), cmd.Env...)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = !cmd.SysProcAttr.Setsid
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	release := r.cg.StartInside(cmd.SysProcAttr)
	defer release()
	hooks := cgroupHooks(r.cg)
	if r.namespaced {
		return mountns.Enter(cmd, r.cmd.Process.Pid, r.root, hooks)
	}
	p, _, err := mountns.Start(cmd, nil, "", hooks)
	return p, err
}

// lookPath finds the program name as the container sees it: a name with a slash is a path
// (relative to dir), any other is searched in the PATH of env (relative entries against dir).
// The files are looked at under view, where the host sees the container's root ("": the
// host's own); the path returned is the container's. Not found is an *exec.Error wrapping
// exec.ErrNotFound.
func lookPath(name string, env []string, dir, view string) (string, error) {
	resolve := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if strings.Contains(name, "/") {
		p := resolve(name)
		if err := executable(view, p); err != nil {
			return "", &exec.Error{Name: name, Err: err}
		}
		return p, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v // the last one wins, as in the process's environment
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if p := filepath.Join(resolve(d), name); executable(view, p) == nil {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// executable reports why p cannot be executed (nil: it can, as far as its mode tells), p
// seen under view ("": the host's root). Under a view, symbolic links resolve inside it, an
// absolute one against the view's root (openat2's RESOLVE_IN_ROOT), as the container resolves
// them; kernels without openat2 (before 5.6) resolve them on the host.
func executable(view, p string) error {
	var fi os.FileInfo
	var err error
	if view == "" {
		fi, err = os.Stat(p)
	} else if fi, err = statInRoot(view, p); errors.Is(err, unix.ENOSYS) {
		fi, err = os.Stat(view + p)
	}
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return os.ErrPermission
	}
	return nil
}

// statInRoot stats p as if root were "/".
func statInRoot(root, p string) (os.FileInfo, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return f.Stat()
}
