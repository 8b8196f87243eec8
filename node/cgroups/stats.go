package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// Usage is what a container, pod or node has used, read at Time.
type Usage struct {
	Time time.Time
	// CPU is the CPU time used since the start, in nanoseconds.
	CPU uint64
	// Memory is all memory charged, page cache included; WorkingSet is Memory less the
	// inactive file pages, the figure limits, eviction and kubectl top go by; RSS is
	// anonymous memory.
	Memory, WorkingSet, RSS uint64
	// PageFaults and MajorPageFaults count faults since the start.
	PageFaults, MajorPageFaults uint64
}

// ErrRemoved is returned for the usage of a container whose cgroup was removed.
var ErrRemoved = errors.New("container cgroup removed")

// Snapshot reads usage at one moment: under kind None it scans /proc once for all the
// containers asked about, so take one per collection of many.
type Snapshot struct {
	m      *Manager
	at     time.Time
	groups map[int]procUsage // kind None: by process group
	files  fileReader
}

// Snapshot starts a collection of usage.
func (m *Manager) Snapshot() *Snapshot {
	s := &Snapshot{m: m, at: time.Now()}
	if m.kind == None {
		s.groups = scanProc("/proc")
	}
	return s
}

// Container is the usage of c.
func (s *Snapshot) Container(c *Container) (Usage, error) {
	if c.removed.Load() {
		return Usage{}, ErrRemoved
	}
	if s.m.kind == None {
		pid := c.PID()
		g, ok := s.groups[pid]
		if pid == 0 || !ok {
			return Usage{}, fmt.Errorf("no process of group %d in /proc", pid)
		}
		u := g.usage(s.at)
		// Monotonic: what exited without being waited for took its CPU time with it.
		for {
			high := c.cpuHigh.Load()
			if u.CPU <= high {
				u.CPU = high
				break
			}
			if c.cpuHigh.CompareAndSwap(high, u.CPU) {
				break
			}
		}
		return u, nil
	}
	return s.files.cgroup(s.m.kind, c.dirs, s.at)
}

// Pod is the usage of the pod uid: its cgroup's, which includes its containers' past runs;
// under kind None the sum of its running containers'.
func (s *Snapshot) Pod(uid types.UID, running []*Container) (Usage, error) {
	if s.m.kind != None {
		return s.files.cgroup(s.m.kind, s.m.node.join("pod"+string(uid)), s.at)
	}
	total := Usage{Time: s.at}
	for _, c := range running {
		u, err := s.Container(c)
		if err != nil {
			continue
		}
		total.CPU += u.CPU
		total.Memory += u.Memory
		total.WorkingSet += u.WorkingSet
		total.RSS += u.RSS
		total.PageFaults += u.PageFaults
		total.MajorPageFaults += u.MajorPageFaults
	}
	return total, nil
}

// cgroup reads the usage of the cgroup l.
func (r *fileReader) cgroup(kind Kind, l layout, at time.Time) (Usage, error) {
	u := Usage{Time: at}
	var err error
	if kind == V2 {
		if err = r.read(filepath.Join(l.cpu, "cpu.stat")); err != nil {
			return u, err
		}
		u.CPU = r.field("usage_usec") * 1000
		if err = r.read(filepath.Join(l.memory, "memory.current")); err != nil {
			return u, err
		}
		u.Memory = r.number()
		if err = r.read(filepath.Join(l.memory, "memory.stat")); err != nil {
			return u, err
		}
		u.WorkingSet = u.Memory - min(r.field("inactive_file"), u.Memory)
		u.RSS, u.PageFaults, u.MajorPageFaults = r.field("anon"), r.field("pgfault"), r.field("pgmajfault")
		return u, nil
	}
	if err = r.read(filepath.Join(l.cpuacct, "cpuacct.usage")); err != nil {
		return u, err
	}
	u.CPU = r.number()
	if err = r.read(filepath.Join(l.memory, "memory.usage_in_bytes")); err != nil {
		return u, err
	}
	u.Memory = r.number()
	if err = r.read(filepath.Join(l.memory, "memory.stat")); err != nil {
		return u, err
	}
	// The total_ figures include the cgroup's descendants (a pod's containers).
	u.WorkingSet = u.Memory - min(r.field("total_inactive_file"), u.Memory)
	u.RSS, u.PageFaults, u.MajorPageFaults = r.field("total_rss"), r.field("total_pgfault"), r.field("total_pgmajfault")
	return u, nil
}

// procUsage sums the /proc figures of one process group.
type procUsage struct {
	ticks            uint64 // utime+stime of the members, cutime+cstime of the leader
	rssPages         uint64
	minflt, majflt   uint64
	leaderChildTicks uint64
}

// userHZ is the unit of /proc's CPU times: fixed at 100 by the Linux ABI.
const userHZ = 100

func (p procUsage) usage(at time.Time) Usage {
	rss := p.rssPages * uint64(os.Getpagesize())
	return Usage{Time: at, CPU: (p.ticks + p.leaderChildTicks) * uint64(time.Second/userHZ),
		Memory: rss, WorkingSet: rss, RSS: rss, PageFaults: p.minflt, MajorPageFaults: p.majflt}
}

// scanProc reads every process's stat file under root and sums them by process group.
func scanProc(root string) map[int]procUsage {
	out := map[int]procUsage{}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		st, ok := parseStat(b)
		if !ok {
			continue
		}
		g := out[st.pgrp]
		g.ticks += st.utime + st.stime
		g.rssPages += st.rss
		g.minflt += st.minflt
		g.majflt += st.majflt
		if pid == st.pgrp {
			// The leader's waited-for children: their time stays counted after they exit.
			g.leaderChildTicks = st.cutime + st.cstime
		}
		out[st.pgrp] = g
	}
	return out
}

type procStat struct {
	pgrp                              int
	minflt, majflt                    uint64
	utime, stime, cutime, cstime, rss uint64
}

// parseStat parses /proc/<pid>/stat; the command, in parentheses, may hold spaces and
// parentheses itself, so the fields are counted from its last ")".
func parseStat(b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 {
		return procStat{}, false
	}
	num := func(n int) uint64 {
		v, _ := strconv.ParseUint(f[n-3], 10, 64)
		return v
	}
	pgrp, err := strconv.Atoi(f[5-3])
	if err != nil {
		return procStat{}, false
	}
	return procStat{pgrp: pgrp, minflt: num(10), majflt: num(12), utime: num(14), stime: num(15),
		cutime: num(16), cstime: num(17), rss: num(24)}, true
}

// NodeUsage is the whole machine's usage from /proc/stat and /proc/meminfo, and when it
// booted.
func NodeUsage() (Usage, time.Time, error) {
	return nodeUsage("/proc")
}

func nodeUsage(root string) (Usage, time.Time, error) {
	u := Usage{Time: time.Now()}
	var boot time.Time
	f, err := os.Open(filepath.Join(root, "stat"))
	if err != nil {
		return u, boot, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		switch {
		case len(fields) > 8 && fields[0] == "cpu":
			// user nice system idle iowait irq softirq steal: all but idle and iowait is use.
			var ticks uint64
			for i, v := range fields[1:9] {
				if i == 3 || i == 4 {
					continue
				}
				n, _ := strconv.ParseUint(v, 10, 64)
				ticks += n
			}
			u.CPU = ticks * uint64(time.Second/userHZ)
		case len(fields) == 2 && fields[0] == "btime":
			secs, _ := strconv.ParseInt(fields[1], 10, 64)
			boot = time.Unix(secs, 0)
		}
	}
	var r fileReader
	if err := r.read(filepath.Join(root, "meminfo")); err != nil {
		return u, boot, err
	}
	kb := func(k string) uint64 { return r.field(k+":") * 1024 }
	// As the kubelet reads the root cgroup: all memory in use, page cache included, and the
	// working set without the inactive file pages.
	u.Memory = kb("MemTotal") - min(kb("MemFree"), kb("MemTotal"))
	u.WorkingSet = u.Memory - min(kb("Inactive(file)"), u.Memory)
	u.RSS = kb("AnonPages")
	return u, boot, nil
}

// fileReader reads the small files of cgroupfs and /proc into one buffer. A collection reads
// hundreds of them, so it uses three system calls a file (open, read until the end, close)
// where os.ReadFile makes six, and allocates nothing.
type fileReader struct {
	buf  []byte
	data []byte // the last file read
}

func (r *fileReader) read(path string) error {
	if r.buf == nil {
		r.buf = make([]byte, 16<<10)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(r.buf) {
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := unix.Read(fd, r.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	r.data = r.buf[:n]
	return nil
}

// number is the last file read as one number (0 if it is not one).
func (r *fileReader) number() uint64 {
	v, _ := strconv.ParseUint(string(bytes.TrimSpace(r.data)), 10, 64)
	return v
}

// field is the value of key in the last file read, a file of "key value" lines (memory.stat,
// cpu.stat, meminfo; a unit after the value is ignored); 0 if absent.
func (r *fileReader) field(key string) uint64 {
	for rest := r.data; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(line) > len(key) && string(line[:len(key)]) == key && (line[len(key)] == ' ' || line[len(key)] == '\t') {
			f := bytes.Fields(line[len(key):])
			if len(f) > 0 {
				v, _ := strconv.ParseUint(string(f[0]), 10, 64)
				return v
			}
		}
	}
	return 0
}
