package mountns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The path without root: the agent's binary is started again (/proc/self/exe) in a new user
// and mount namespace, with initEnv holding the plan; this package's init function sees it
// before main runs, makes the mounts, and executes the container's process in its place. It
// reports a failure on the pipe at file descriptor 3, which closes unwritten on a
// successful exec. A second process enters through nsenter(1) (setns into a user namespace
// needs a single-threaded process), which starts the binary again to go to the process's
// working directory inside and execute it.

// initEnv is the environment variable that carries an initPlan to the re-executed binary.
const initEnv = "KPLANE_MOUNTNS_PLAN"

// initPlan is what the re-executed binary does: the mounts, then the process.
type initPlan struct {
	Mounts []Mount
	Work   string
	Path   string
	Args   []string
	Env    []string
	Dir    string
}

func init() {
	if plan := os.Getenv(initEnv); plan != "" {
		runInit(plan)
	}
}

// runInit makes the plan's mounts and executes its process; it returns only by exiting.
func runInit(planJSON string) {
	report := os.NewFile(3, "setup-result")
	fail := func(err error) {
		_, _ = io.WriteString(report, err.Error())
		os.Exit(127)
	}
	var plan initPlan
	if err := json.Unmarshal([]byte(planJSON), &plan); err != nil {
		fail(fmt.Errorf("reading the mount plan: %w", err))
	}
	b := &builder{work: plan.Work}
	if len(plan.Mounts) > 0 {
		if err := b.prepare(plan.Mounts); err != nil {
			fail(err)
		}
	}
	if b.root != "" {
		if err := unix.Chroot(b.root); err != nil {
			fail(fmt.Errorf("chroot: %w", err))
		}
	}
	if err := unix.Chdir(plan.Dir); err != nil {
		fail(fmt.Errorf("working directory %s: %w", plan.Dir, err))
	}
	unix.CloseOnExec(3)
	err := syscall.Exec(plan.Path, plan.Args, plan.Env)
	fail(fmt.Errorf("exec %s: %w", plan.Path, err))
}

// inUserNamespace turns cmd into the re-execution of this binary that makes the mounts in
// a new user and mount namespace, then runs cmd's process. The returned check, called once
// cmd has started, reads what the re-executed binary reported (nil: the process runs).
func inUserNamespace(cmd *exec.Cmd, mounts []Mount, work string) (func() error, error) {
	check, err := reexec(cmd, mounts, work, "/proc/self/exe", []string{initName})
	if err != nil {
		return nil, err
	}
	a := cmd.SysProcAttr
	a.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	a.GidMappingsEnableSetgroups = false
	return check, nil
}

// enterUserNamespace turns cmd into nsenter(1) entering the user and mount namespaces of the
// process pid, as root in there and at its root, then this binary, which goes to cmd's
// directory there and runs cmd's process.
func enterUserNamespace(cmd *exec.Cmd, pid int) (func() error, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("entering a container's namespaces without root needs nsenter (util-linux): %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return reexec(cmd, nil, "", nsenter, []string{"nsenter", "--target", strconv.Itoa(pid), "--user", "--preserve-credentials", "--mount", "--root", "--", self, initName})
}

// initName is the name the re-executed binary runs under (what ps shows until it execs).
const initName = "kplane-container-init"

// reexec makes cmd run path with args and a plan for this package's init: the mounts, then
// cmd's own process. The returned check reads the report of the re-executed binary.
func reexec(cmd *exec.Cmd, mounts []Mount, work, path string, args []string) (func() error, error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	if cmd.Dir == "" { // the agent's own, as exec would give it
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		cmd.Dir = wd
	}
	plan, err := json.Marshal(initPlan{Mounts: mounts, Work: work, Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir})
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Path, cmd.Args, cmd.Dir = path, args, "/"
	cmd.Env = []string{initEnv + "=" + string(plan)}
	cmd.ExtraFiles = []*os.File{w}
	return func() error {
		defer r.Close()
		w.Close() // the child has its copy; the read ends when it closes or execs
		msg, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if len(msg) > 0 {
			return errors.New(string(msg))
		}
		return nil
	}, nil
}
