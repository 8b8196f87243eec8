package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// startProcess starts cmd (Args set; Stdin, Stdout, Stderr as the caller wants) as a process
// of the container's run, as `kubectl exec` runs one: cmd.Args[0] looked up in the
// container's PATH, in the container's environment (then what cmd.Env adds) and working
// directory, in a process group of its own (a session of its own when cmd.SysProcAttr asks for
// Setsid, for a terminal), killed if the agent dies. It returns how to wait for the process:
// call that, never cmd.Wait.
//
// Every process exec'd into a container is started here and only here, so that this is the one
// place that puts it into the container's mount namespace and cgroup.
func (r *containerRun) startProcess(cmd *exec.Cmd) (wait func() error, err error) {
	path, err := lookPath(cmd.Args[0], r.env, r.dir)
	if err != nil {
		return nil, err
	}
	cmd.Path, cmd.Dir = path, r.dir
	cmd.Env = append(slices.Clone(r.env), cmd.Env...)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = !cmd.SysProcAttr.Setsid
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd.Wait, nil
}

// lookPath finds the program name as the container sees it: a name with a slash is a path
// (relative to dir), any other is searched in the PATH of env (relative entries against dir).
// Not found is an *exec.Error wrapping exec.ErrNotFound.
func lookPath(name string, env []string, dir string) (string, error) {
	resolve := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if strings.Contains(name, "/") {
		p := resolve(name)
		if err := executable(p); err != nil {
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
		if p := filepath.Join(resolve(d), name); executable(p) == nil {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// executable reports why p cannot be executed (nil: it can, as far as its mode tells).
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return os.ErrPermission
	}
	return nil
}
