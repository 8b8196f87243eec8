package node

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// maxPods is the pods capacity the node reports, the kubelet's default.
const maxPods = 110

// The kubelet's default hard eviction thresholds, which it keeps out of allocatable so that
// pods filling the node up to allocatable do not trigger evictions: memory.available<100Mi
// and nodefs.available<10%. kube-reserved and system-reserved are empty by default, as here.
const (
	evictionMemory      = 100 << 20
	evictionNodefsShare = 10 // percent
)

// machineResources are the node's capacity, from the machine (CPUs the agent may run on,
// memory, the filesystem of dataDir, the kubelet's 110 pods), and what pods may be given of
// it: capacity less the kubelet's default eviction reserve.
func machineResources(dataDir string) (capacity, allocatable corev1.ResourceList) {
	capacity = corev1.ResourceList{
		corev1.ResourceCPU:  *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourcePods: *resource.NewQuantity(maxPods, resource.DecimalSI),
	}
	allocatable = capacity.DeepCopy()
	if mem := memTotal(); mem > 0 {
		capacity[corev1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
		allocatable[corev1.ResourceMemory] = *resource.NewQuantity(max(mem-evictionMemory, 0), resource.BinarySI)
	}
	if fs := fsSize(dataDir); fs > 0 {
		capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(fs, resource.BinarySI)
		allocatable[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(fs-fs*evictionNodefsShare/100, resource.BinarySI)
	}
	return capacity, allocatable
}

// memTotal is the machine's memory in bytes from /proc/meminfo, 0 if unknown.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// fsSize is the size in bytes of the filesystem holding dir (or its nearest existing
// parent: the data dir may not exist yet), 0 if unknown.
func fsSize(dir string) int64 {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return 0
	}
	for {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err == nil {
			return int64(st.Blocks) * st.Bsize
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return 0
		}
		dir = parent
	}
}
