// Package mountns starts processes that see the host's file system plus bind mounts of their
// own — a container's volumes at their mount paths — without changing the host: each
// container gets its own mount namespace, made on a locked OS thread of the calling process
// (no helper binary, no re-exec), in which the mounts are made before the process is forked
// from that thread.
//
// A mount path that does not exist on the host is made without creating anything on the
// host: the deepest directory on the path that does exist is covered, in the namespace only,
// by an overlay of itself whose upper layer is in a scratch tmpfs (what is mounted under it
// bound in again), and the missing directories are created in that overlay; what the process
// writes there stays in its namespace, as in a container's own file system. When that
// directory is the root itself, the process gets a root of its own instead (an overlay of
// the host's root) and runs chrooted there. Where the kernel refuses the overlay, a tmpfs
// holding bind mounts of everything the directory held stands in for it.
//
// The thread that forks a process stays with it until it exits (it waits for it): Linux
// sends the parent-death signal when the forking thread ends, not the process, and a thread
// in another namespace must never run other goroutines (Go starts no other thread from a
// locked one, and a goroutine that ends locked ends its thread; it is never the main thread,
// which Go would park instead: see internal/osthread).
//
// Without root, the process gets a user namespace too (the agent's user is root in it, as in
// rootless containers), and the mounts are made by the agent's own binary, started again in
// the new namespaces (see userns.go) before it executes the process; a second process
// enters those namespaces with nsenter(1) from util-linux. Where the machine allows no user
// namespace either, Start fails and says so.
package mountns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/kplane/kplane/internal/osthread"
	"golang.org/x/sys/unix"
)

// Mount is one bind mount into a process's view of the file system.
type Mount struct {
	// Source is a path on the host: a directory, or a file (then Target is a file too).
	Source string
	// Target is the absolute path at which the process sees Source.
	Target   string
	ReadOnly bool
}

// Process is a process started by Start or Enter. Use its Wait, never cmd.Wait: the thread
// that started the process waits for it.
type Process struct {
	done chan struct{}
	err  error
}

// Wait waits for the process to exit and returns what cmd.Wait returned; cmd.ProcessState
// is set.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Hooks run on the starting thread around the fork, in the namespace (may be nil): Before
// can move the thread into a cgroup so that the child starts there; After moves it back.
type Hooks struct {
	Before func() error
	After  func()
}

// Privileged says whether this process makes mount namespaces itself (root), rather than
// through a user namespace.
func Privileged() bool { return os.Geteuid() == 0 }

// Start starts cmd in a new mount namespace in which each mount's Source is seen at its
// Target. work is an existing directory on the host for the namespace's scratch mount points:
// in the namespace a tmpfs covers it, so it stays empty on the host and any number of
// namespaces may share it. It returns the root the process runs in ("" for the host's root),
// to give Enter. With no mounts, cmd starts in the host's namespace.
func Start(cmd *exec.Cmd, mounts []Mount, work string, h Hooks) (*Process, string, error) {
	var root string
	p, err := startLocked(cmd, h, func() (func() error, error) {
		if len(mounts) == 0 {
			return nil, nil
		}
		if !Privileged() {
			check, err := inUserNamespace(cmd, mounts, work)
			if err != nil {
				return nil, err
			}
			return func() error {
				if err := check(); err != nil {
					return fmt.Errorf("setting up the container's mounts in a user namespace: %w", err)
				}
				return nil
			}, nil
		}
		if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
			return nil, fmt.Errorf("new mount namespace: %w", err)
		}
		b := &builder{work: work}
		if err := b.prepare(mounts); err != nil {
			return nil, err
		}
		root = b.root
		if root != "" {
			cmd.SysProcAttr.Chroot = root
			if cmd.Dir == "" { // the same directory, seen from the new root
				wd, err := os.Getwd()
				if err != nil {
					return nil, err
				}
				cmd.Dir = wd
			}
		}
		return nil, nil
	})
	if err != nil {
		return nil, "", err
	}
	return p, root, nil
}

// Enter starts cmd in the mount namespace of the process pid (started by Start with the
// root it returned).
func Enter(cmd *exec.Cmd, pid int, root string, h Hooks) (*Process, error) {
	return startLocked(cmd, h, func() (func() error, error) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err != nil {
			return nil, fmt.Errorf("the container's mount namespace: %w", err)
		}
		if !Privileged() {
			return enterUserNamespace(cmd, pid)
		}
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil {
			return nil, fmt.Errorf("the container's mount namespace: %w", err)
		}
		defer ns.Close()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return nil, err
		}
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
			return nil, fmt.Errorf("entering the container's mount namespace: %w", err)
		}
		if root != "" {
			cmd.SysProcAttr.Chroot = root
		}
		return nil, nil
	})
}

// startLocked runs prepare and starts cmd on a thread of its own (osthread.Go: never the
// main thread), which then waits for the process and ends with it. A check prepare returns
// runs once the process has started; its error stops it.
func startLocked(cmd *exec.Cmd, h Hooks, prepare func() (check func() error, err error)) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	p := &Process{done: make(chan struct{})}
	started := make(chan error, 1)
	osthread.Go(func() {
		defer close(p.done)
		check, err := prepare()
		if err == nil && h.Before != nil {
			err = h.Before()
		}
		if err == nil {
			err = cmd.Start()
			if h.After != nil {
				h.After()
			}
		}
		if err == nil && check != nil {
			if err = check(); err != nil {
				_ = cmd.Wait()
			}
		}
		started <- err
		if err != nil {
			p.err = err
			return
		}
		p.err = cmd.Wait()
	})
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// builder makes the mounts of one namespace, on the locked thread that is in it.
type builder struct {
	work string
	// root is the process's own root when one was needed ("" while it sees the host's).
	root string
	// made are directories (in the process's view) on tmpfs mounts the builder made (their
	// roots and what it created in them; not what is bound into them), and mounted the
	// targets it bound: a missing directory in one of made, or anywhere under a mounted
	// target (in the volume, as Kubernetes' runtimes do), is created as it is.
	made, mounted []string
	shadows       int
}

// host is the path on the host, in this namespace, of the process's path p.
func (b *builder) host(p string) string {
	if b.root == "" {
		return p
	}
	return filepath.Join(b.root, p)
}

// prepare makes the namespace's mounts, on the thread (or in the process) that is in it.
func (b *builder) prepare(mounts []Mount) error {
	// Nothing mounted here may reach the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the mounts of the namespace private: %w", err)
	}
	// Scratch space in memory: the work directory is shared, and disks are slower.
	if err := unix.Mount("tmpfs", b.work, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=700"); err != nil {
		return fmt.Errorf("scratch space at %s: %w", b.work, err)
	}
	return b.mountAll(mounts)
}

func (b *builder) mountAll(mounts []Mount) error {
	// Parents first, so that a mount inside another one's target lands inside it.
	sorted := slices.Clone(mounts)
	slices.SortStableFunc(sorted, func(x, y Mount) int { return depth(x.Target) - depth(y.Target) })
	for _, m := range sorted {
		if err := b.mount(m); err != nil {
			return fmt.Errorf("mounting %s at %s: %w", m.Source, m.Target, err)
		}
	}
	return nil
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

func (b *builder) mount(m Mount) error {
	if !filepath.IsAbs(m.Target) {
		return fmt.Errorf("mount path %q is not absolute", m.Target)
	}
	src, err := os.Stat(m.Source)
	if err != nil {
		return err
	}
	target, err := b.ensure(m.Target, src.IsDir())
	if err != nil {
		return err
	}
	if err := unix.Mount(m.Source, b.host(target), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if m.ReadOnly {
		if err := unix.Mount("", b.host(target), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only: %w", err)
		}
	}
	b.mounted = append(b.mounted, target)
	return nil
}

// ensure makes path exist (a directory, or an empty file when dir is false) in the
// process's view without creating anything on the host outside volumes, and returns it
// with its symbolic links resolved.
func (b *builder) ensure(path string, dir bool) (string, error) {
	existing, rest, err := b.resolve(path)
	if err != nil {
		return "", err
	}
	if len(rest) == 0 {
		fi, err := os.Stat(b.host(existing))
		if err != nil {
			return "", err
		}
		if fi.IsDir() != dir {
			return "", fmt.Errorf("%s exists and is not a %s", path, map[bool]string{true: "directory", false: "file"}[dir])
		}
		return existing, nil
	}
	if !b.writable(existing) {
		if existing == "/" {
			if err := b.ownRoot(); err != nil {
				return "", err
			}
		} else if err := b.shadow(existing); err != nil {
			return "", err
		}
	}
	full := filepath.Join(existing, filepath.Join(rest...))
	if err := os.MkdirAll(b.host(filepath.Dir(full)), 0o755); err != nil {
		return "", err
	}
	for i := range rest[:len(rest)-1] {
		b.made = append(b.made, filepath.Join(existing, filepath.Join(rest[:i+1]...)))
	}
	if dir {
		if err = os.Mkdir(b.host(full), 0o755); err == nil {
			b.made = append(b.made, full)
		}
	} else {
		var f *os.File
		if f, err = os.OpenFile(b.host(full), os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			err = f.Close()
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return full, nil
}

// writable says whether directories may be created under p: it is inside a tmpfs the
// builder made or a volume it mounted.
func (b *builder) writable(p string) bool {
	if slices.Contains(b.made, p) {
		return true
	}
	for _, d := range b.mounted {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// resolve follows path's components in the process's view (symbolic links too, absolute
// ones from its root) and returns the longest part that exists and the components missing
// after it.
func (b *builder) resolve(path string) (string, []string, error) {
	todo := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	if len(todo) == 1 && todo[0] == "" {
		return "/", nil, nil
	}
	cur := "/"
	for hops := 0; len(todo) > 0; {
		next := filepath.Join(cur, todo[0])
		fi, err := os.Lstat(b.host(next))
		if errors.Is(err, os.ErrNotExist) {
			return cur, todo, nil
		}
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if hops++; hops > 40 {
				return "", nil, fmt.Errorf("%s: too many levels of symbolic links", path)
			}
			link, err := os.Readlink(b.host(next))
			if err != nil {
				return "", nil, err
			}
			if !filepath.IsAbs(link) {
				link = filepath.Join(cur, link)
			}
			rest := strings.Split(strings.Trim(filepath.Clean(link), "/"), "/")
			if len(rest) == 1 && rest[0] == "" {
				rest = nil
			}
			cur, todo = "/", append(rest, todo[1:]...)
			continue
		}
		if !fi.IsDir() && len(todo) > 1 {
			return "", nil, fmt.Errorf("%s: %s is not a directory", path, next)
		}
		cur, todo = next, todo[1:]
	}
	return cur, nil, nil
}

// shadow covers the directory dir (in the process's view) with an overlay whose lower layer
// is dir itself and whose upper layer is in the scratch tmpfs, so that directories can be
// added to it (and what the process writes there stays in its namespace) without touching
// the host. Where the kernel refuses the overlay, a tmpfs holding bind mounts of all dir held
// does the same (fill), with more mounts.
func (b *builder) shadow(dir string) error {
	b.shadows++
	if err := b.overlay(b.host(dir)); err != nil {
		stage := filepath.Join(b.work, fmt.Sprintf("shadow%d", b.shadows))
		if err := b.fill(stage, b.host(dir)); err != nil {
			return fmt.Errorf("covering %s: %w", dir, err)
		}
		if err := unix.Mount(stage, b.host(dir), "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("covering %s: %w", dir, err)
		}
	}
	b.made = append(b.made, dir)
	return nil
}

// ownRoot gives the process a root of its own: an overlay of the host's root (or a tmpfs
// holding its top-level entries).
func (b *builder) ownRoot() error {
	root := filepath.Join(b.work, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	if err := b.overlayAt(root, "/"); err != nil {
		if err := b.fill(root, "/"); err != nil {
			return fmt.Errorf("a root for the container: %w", err)
		}
	}
	// What was mounted before is under the host's root, and so under the new one too.
	b.root, b.made = root, append(b.made, "/")
	return nil
}

// overlay covers dir with an overlay of itself (see shadow).
func (b *builder) overlay(dir string) error { return b.overlayAt(dir, dir) }

// overlayAt mounts at an overlay whose lower layer is lower and whose upper layer is a new
// directory in the scratch tmpfs, then binds into it what is mounted under lower (an overlay
// shows only the lower file system itself), from lower as it was before the overlay covered it.
func (b *builder) overlayAt(at, lower string) error {
	base := filepath.Join(b.work, fmt.Sprintf("overlay%d", b.shadows))
	upper, wd := filepath.Join(base, "upper"), filepath.Join(base, "work")
	fi, err := os.Stat(lower)
	if err != nil {
		return err
	}
	for _, d := range []string{upper, wd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(upper, fi.Mode().Perm()); err != nil { // the root of the overlay
		return err
	}
	subs := b.submounts(lower)
	// The lower directory as it is now: the submounts are reached through it once the overlay
	// covers it.
	orig, err := os.Open(lower)
	if err != nil {
		return err
	}
	defer orig.Close()
	opts := "lowerdir=" + escapeOverlay(lower) + ",upperdir=" + escapeOverlay(upper) + ",workdir=" + escapeOverlay(wd)
	if err := unix.Mount("overlay", at, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	via := fmt.Sprintf("/proc/thread-self/fd/%d", orig.Fd())
	for _, sub := range subs {
		rel := strings.TrimPrefix(sub, strings.TrimSuffix(lower, "/"))
		if err := unix.Mount(via+rel, filepath.Join(at, rel), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			_ = unix.Unmount(at, unix.MNT_DETACH)
			return fmt.Errorf("bind mount of %s into the overlay: %w", sub, err)
		}
	}
	return nil
}

// submounts lists the mount points under dir in this namespace that are not under another
// one of them (binding those recursively brings the rest), but for the scratch space.
func (b *builder) submounts(dir string) []string {
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var all []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountinfo(fields[4])
		if strings.HasPrefix(p, prefix) && p != dir && p != b.work && !strings.HasPrefix(p, b.work+"/") {
			all = append(all, p)
		}
	}
	slices.Sort(all)
	var top []string
	for _, p := range all {
		if len(top) == 0 || (p != top[len(top)-1] && !strings.HasPrefix(p, top[len(top)-1]+"/")) {
			top = append(top, p)
		}
	}
	return top
}

// unescapeMountinfo undoes mountinfo's octal escapes of spaces, tabs, newlines, backslashes.
func unescapeMountinfo(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(p)
}

// escapeOverlay escapes what overlay's mount options give a meaning to in a path.
func escapeOverlay(p string) string {
	return strings.NewReplacer(`\`, `\\`, ",", `\,`, ":", `\:`).Replace(p)
}

// fill mounts a tmpfs at at (a new directory on the host, in the work directory) with the
// mode of from, and puts every entry of from into it: symbolic links copied, everything
// else bind-mounted onto an empty directory or file of the same name.
func (b *builder) fill(at, from string) error {
	fi, err := os.Stat(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(at, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", at, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=%o", fi.Mode().Perm())); err != nil {
		return fmt.Errorf("tmpfs: %w", err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		src, dst := filepath.Join(from, e.Name()), filepath.Join(at, e.Name())
		switch {
		case e.Type()&os.ModeSymlink != 0:
			link, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(link, dst)
			}
			if err != nil {
				return err
			}
			continue
		case e.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
		default:
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			f.Close()
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind mount of %s: %w", src, err)
		}
	}
	return nil
}
