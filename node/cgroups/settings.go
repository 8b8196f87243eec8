package cgroups

import (
	"strconv"

	"github.com/kplane/kplane/internal/podresources"
	corev1 "k8s.io/api/core/v1"
)

// The kernel's and the kubelet's CFS constants.
const (
	minShares   = 2
	maxShares   = 262144
	quotaPeriod = 100000 // µs: 100 ms
	minQuota    = 1000   // µs: the kernel's smallest quota
)

// Settings are the values written into one cgroup. Zero means none (no limit, or for
// CPUShares the kernel's default).
type Settings struct {
	// CPUShares is the relative CPU weight from requests.cpu (v1 cpu.shares; v2 converts).
	CPUShares uint64
	// CPUQuota is the µs of CPU time per CPUPeriod from limits.cpu.
	CPUQuota, CPUPeriod int64
	// MemoryLimit is limits.memory in bytes.
	MemoryLimit int64
	// MemoryRequest is requests.memory in bytes: recorded, not enforced (as the kubelet
	// without MemoryQoS).
	MemoryRequest int64
}

// ForContainer is what a container's cgroup gets from its resources.
func ForContainer(c *corev1.Container) Settings {
	s := Settings{
		CPUShares:     sharesFor(c.Resources.Requests.Cpu().MilliValue()),
		MemoryLimit:   c.Resources.Limits.Memory().Value(),
		MemoryRequest: c.Resources.Requests.Memory().Value(),
	}
	s.CPUQuota, s.CPUPeriod = quotaFor(c.Resources.Limits.Cpu().MilliValue())
	return s
}

// ForPod is what a pod's cgroup gets: the shares of all its requests, and a quota and a
// memory limit only when every container (or the pod itself) sets one.
func ForPod(pod *corev1.Pod) Settings {
	reqs := podresources.Requests(pod)
	limits, cpuLimited, memoryLimited := podresources.Limits(pod)
	s := Settings{CPUShares: sharesFor(reqs.Cpu().MilliValue()), MemoryRequest: reqs.Memory().Value()}
	if cpuLimited {
		s.CPUQuota, s.CPUPeriod = quotaFor(limits.Cpu().MilliValue())
	}
	if memoryLimited {
		s.MemoryLimit = limits.Memory().Value()
	}
	return s
}

// sharesFor converts milli-CPUs to cpu.shares: 1024 per CPU, at least 2 (also for no request,
// so that a best-effort container yields to every other), at most the kernel's maximum.
func sharesFor(milli int64) uint64 {
	return uint64(min(max(milli*1024/1000, minShares), maxShares))
}

// quotaFor converts a milli-CPU limit to a CFS quota per 100 ms period (0, 0: no limit).
func quotaFor(milli int64) (quota, period int64) {
	if milli <= 0 {
		return 0, 0
	}
	return max(milli*quotaPeriod/1000, minQuota), quotaPeriod
}

// v2Weight converts cpu.shares (2..262144) to cpu.weight (1..10000) linearly, as the OCI
// runtimes do, so that the same requests weigh the same under both versions.
func v2Weight(shares uint64) uint64 {
	if shares == 0 {
		return 100 // the kernel's default weight, as 1024 shares
	}
	return 1 + (shares-2)*9999/262142
}

// v2CPUMax is cpu.max: "<quota> <period>" or "max <period>".
func v2CPUMax(s Settings) string {
	if s.CPUQuota <= 0 {
		return "max " + strconv.Itoa(quotaPeriod)
	}
	return strconv.FormatInt(s.CPUQuota, 10) + " " + strconv.FormatInt(s.CPUPeriod, 10)
}

// v2MemoryMax is memory.max: bytes or "max".
func v2MemoryMax(s Settings) string {
	if s.MemoryLimit <= 0 {
		return "max"
	}
	return strconv.FormatInt(s.MemoryLimit, 10)
}
