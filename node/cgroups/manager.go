package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Kind is how a Manager accounts for containers.
type Kind string

const (
	// V1 and V2 are the cgroup versions.
	V1 Kind = "v1"
	V2 Kind = "v2"
	// None is the fallback without cgroups: usage from /proc by process group, no limits.
	None Kind = "none"
)

// Config chooses a node's hierarchy.
type Config struct {
	// Node names the hierarchy: kplane/<Node>.
	Node string
	// Disabled uses no cgroups, as on a machine where they cannot be created.
	Disabled bool
}

// Manager creates and removes the cgroups of one node's containers. Its methods may be
// called from any goroutine.
type Manager struct {
	kind Kind
	// why says why limits are not enforced (kind None).
	why string
	// node is the node's cgroup in each controller.
	node layout
	// v1 are the v1 hierarchies' mounts by controller (kind V1), to find a thread's cgroups.
	v1 map[string]mount
	// mu serialises creating and removing pod cgroups, so that a pod's last container
	// leaving cannot race its next one arriving.
	mu sync.Mutex
}

// layout is one cgroup's directory in each controller the Manager uses; under v2, and for
// controllers mounted together in v1, several are the same directory.
type layout struct {
	memory, cpu, cpuacct string
}

func (l layout) join(elem string) layout {
	return layout{filepath.Join(l.memory, elem), filepath.Join(l.cpu, elem), filepath.Join(l.cpuacct, elem)}
}

// dirs are l's distinct directories.
func (l layout) dirs() []string {
	out := []string{l.memory}
	for _, d := range []string{l.cpu, l.cpuacct} {
		if d != out[0] && (len(out) == 1 || d != out[1]) {
			out = append(out, d)
		}
	}
	return out
}

// New finds the machine's cgroups and creates the node's hierarchy. It never fails: where
// cgroups cannot be used it returns a Manager of kind None that says why.
func New(cfg Config) *Manager {
	if cfg.Disabled {
		return &Manager{kind: None, why: "cgroups are turned off for this node"}
	}
	kind, node, v1, err := locate(cfg.Node)
	if err == nil {
		m := &Manager{kind: kind, node: node, v1: v1}
		if err = m.mkdir(node); err == nil {
			m.removeStale()
			return m
		}
	}
	return &Manager{kind: None, why: err.Error()}
}

// Kind is the accounting in use.
func (m *Manager) Kind() Kind { return m.kind }

// Enforced reports whether limits are enforced, and if not, why.
func (m *Manager) Enforced() (bool, string) { return m.kind != None, m.why }

// NodeDirs are the node's cgroup directories (none for kind None).
func (m *Manager) NodeDirs() []string {
	if m.kind == None {
		return nil
	}
	return m.node.dirs()
}

// mount is one line of /proc/self/mountinfo that mounts a cgroup hierarchy.
type mount struct {
	root, point, fstype string
	options             []string // the super options: the v1 controllers
}

// locate picks the cgroup version and the node's directories from what the process sees,
// and returns the v1 mounts of the controllers used.
func locate(node string) (Kind, layout, map[string]mount, error) {
	mounts, err := cgroupMounts("/proc/self/mountinfo")
	if err != nil {
		return None, layout{}, nil, err
	}
	own, err := ownCgroups("/proc/self/cgroup")
	if err != nil {
		return None, layout{}, nil, err
	}
	kind, l, err := choose(mounts, own, node, func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		return string(b)
	})
	v1 := map[string]mount{}
	for _, c := range []string{"memory", "cpu", "cpuacct"} {
		if mt, ok := v1Mount(mounts, c); ok && kind == V1 {
			v1[c] = mt
		}
	}
	return kind, l, v1, err
}

// v1Mount is the v1 mount holding controller.
func v1Mount(mounts []mount, controller string) (mount, bool) {
	for _, mt := range mounts {
		if mt.fstype == "cgroup" && contains(mt.options, controller) {
			return mt, true
		}
	}
	return mount{}, false
}

// dir is the directory of the cgroup path (as /proc/<pid>/cgroup names it) in mt.
func (mt mount) dir(path string) string {
	rel, ok := strings.CutPrefix(path, mt.root)
	if !ok {
		rel = "/"
	}
	return filepath.Join(mt.point, rel)
}

// choose picks v2 when a cgroup2 mount has the cpu and memory controllers, else v1 when
// memory, cpu and cpuacct are mounted. own maps a v1 controller (and "" for v2) to this
// process's cgroup; controllers reads a v2 directory's cgroup.controllers.
func choose(mounts []mount, own map[string]string, node string, controllers func(dir string) string) (Kind, layout, error) {
	sub := filepath.Join("kplane", node)
	for _, mt := range mounts {
		if mt.fstype != "cgroup2" {
			continue
		}
		have := strings.Fields(controllers(mt.point))
		if contains(have, "cpu") && contains(have, "memory") {
			d := filepath.Join(mt.point, sub)
			return V2, layout{d, d, d}, nil
		}
	}
	var l layout
	for _, want := range []struct {
		controller string
		dst        *string
	}{{"memory", &l.memory}, {"cpu", &l.cpu}, {"cpuacct", &l.cpuacct}} {
		if mt, ok := v1Mount(mounts, want.controller); ok {
			// Below the agent's own cgroup, relative to what the mount shows of the hierarchy.
			*want.dst = filepath.Join(mt.dir(own[want.controller]), sub)
		}
		if *want.dst == "" {
			return None, layout{}, fmt.Errorf("no cgroup v2 mount with the cpu and memory controllers, and no cgroup v1 %s controller mounted", want.controller)
		}
	}
	return V1, l, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cgroupMounts reads the cgroup and cgroup2 mounts of a mountinfo file.
func cgroupMounts(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	s := bufio.NewScanner(f)
	for s.Scan() {
		// "<id> <parent> <dev> <root> <point> <options> [optional...] - <fstype> <source> <super options>"
		before, after, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		f1, f2 := strings.Fields(before), strings.Fields(after)
		if len(f1) < 5 || len(f2) < 3 || (f2[0] != "cgroup" && f2[0] != "cgroup2") {
			continue
		}
		out = append(out, mount{root: unescapeMount(f1[3]), point: unescapeMount(f1[4]), fstype: f2[0], options: strings.Split(f2[2], ",")})
	}
	return out, s.Err()
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// ownCgroups reads /proc/self/cgroup: each v1 controller's cgroup, and "" for v2's.
func ownCgroups(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// mkdir creates l's directories. Under v2 each new level first gets the cpu and memory
// controllers enabled in its parent's cgroup.subtree_control.
func (m *Manager) mkdir(l layout) error {
	for _, d := range l.dirs() {
		var err error
		if m.kind == V2 {
			err = mkdirV2(d)
		} else {
			err = os.MkdirAll(d, 0o755)
		}
		if err != nil {
			return fmt.Errorf("cannot create cgroup %s: %w", d, err)
		}
	}
	return nil
}

func mkdirV2(dir string) error {
	if exists(dir) {
		return nil
	}
	parent := filepath.Dir(dir)
	if err := mkdirV2(parent); err != nil { // ends at the mount point, which exists
		return err
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu +memory"), 0); err != nil {
		return fmt.Errorf("enabling the cpu and memory controllers in %s: %w", parent, err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// Create makes the cgroup of a run of container c of pod, below the pod's, and writes
// both's settings. Under kind None it only records the settings.
func (m *Manager) Create(pod *corev1.Pod, c *corev1.Container) (*Container, error) {
	ctr := &Container{m: m, settings: ForContainer(c)}
	if m.kind == None {
		return ctr, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	podDirs := m.node.join("pod" + string(pod.UID))
	ctr.dirs = podDirs.join(c.Name)
	if err := m.mkdir(podDirs); err != nil {
		return nil, err
	}
	if err := m.write(podDirs, ForPod(pod)); err != nil {
		return nil, err
	}
	if err := m.mkdir(ctr.dirs); err != nil {
		return nil, err
	}
	if err := m.write(ctr.dirs, ctr.settings); err != nil {
		_ = removeCgroup(ctr.dirs)
		return nil, err
	}
	return ctr, nil
}

// write writes s into the cgroup l.
func (m *Manager) write(l layout, s Settings) error {
	type setting struct{ dir, file, value string }
	var all []setting
	if m.kind == V2 {
		all = []setting{
			{l.cpu, "cpu.weight", fmt.Sprint(v2Weight(s.CPUShares))},
			{l.cpu, "cpu.max", v2CPUMax(s)},
			{l.memory, "memory.max", v2MemoryMax(s)},
		}
		if s.MemoryLimit > 0 && exists(filepath.Join(l.memory, "memory.swap.max")) {
			// A limited container may not swap instead (the kubelet's NoSwap).
			all = append(all, setting{l.memory, "memory.swap.max", "0"})
		}
	} else {
		quota, mem := int64(-1), int64(-1)
		if s.CPUQuota > 0 {
			quota = s.CPUQuota
		}
		if s.MemoryLimit > 0 {
			mem = s.MemoryLimit
		}
		all = []setting{
			{l.cpu, "cpu.shares", fmt.Sprint(max(s.CPUShares, minShares))},
			{l.cpu, "cpu.cfs_period_us", fmt.Sprint(quotaPeriod)},
			{l.cpu, "cpu.cfs_quota_us", fmt.Sprint(quota)},
			{l.memory, "memory.limit_in_bytes", fmt.Sprint(mem)},
		}
	}
	for _, st := range all {
		if err := os.WriteFile(filepath.Join(st.dir, st.file), []byte(st.value), 0); err != nil {
			return fmt.Errorf("writing cgroup %s: %w", filepath.Join(st.dir, st.file), err)
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// RemovePod removes the pod's cgroup, killing whatever still runs in it.
func (m *Manager) RemovePod(uid types.UID) error {
	if m.kind == None {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	podDirs := m.node.join("pod" + string(uid))
	var errs []error
	for _, d := range podDirs.dirs() {
		entries, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				errs = append(errs, removeCgroup(layout{filepath.Join(d, e.Name()), filepath.Join(d, e.Name()), filepath.Join(d, e.Name())}))
			}
		}
	}
	errs = append(errs, removeCgroup(podDirs))
	return errors.Join(errs...)
}

// Close removes the node's hierarchy where nothing is left in it (another agent of the same
// name, in another test binary say, may still use it).
func (m *Manager) Close() {
	if m.kind == None {
		return
	}
	for _, d := range m.node.dirs() {
		if os.Remove(d) == nil {
			_ = os.Remove(filepath.Dir(d)) // kplane/, if this was the last node
		}
	}
}

// removeStale removes empty pod cgroups a previous agent of this node left behind (its
// processes died with it, SIGKILL being their parent-death signal). Cgroups with processes
// are someone else's and stay.
func (m *Manager) removeStale() {
	for _, d := range m.node.dirs() {
		pods, _ := os.ReadDir(d)
		for _, p := range pods {
			if !p.IsDir() || !strings.HasPrefix(p.Name(), "pod") {
				continue
			}
			pd := filepath.Join(d, p.Name())
			ctrs, _ := os.ReadDir(pd)
			for _, c := range ctrs {
				if c.IsDir() {
					_ = os.Remove(filepath.Join(pd, c.Name()))
				}
			}
			_ = os.Remove(pd)
		}
	}
}
