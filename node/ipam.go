package node

import (
	"errors"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ipam hands out one address per pod from a range, skipping its first (network) and last
// (broadcast) address.
type ipam struct {
	mu     sync.Mutex
	prefix netip.Prefix
	used   map[netip.Addr]types.UID
	next   netip.Addr
}

func newIPAM(cidr string) (*ipam, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, err
	}
	p = p.Masked()
	return &ipam{prefix: p, used: map[netip.Addr]types.UID{}, next: p.Addr().Next()}, nil
}

func (a *ipam) usable(ip netip.Addr) bool {
	if !a.prefix.Contains(ip) || ip == a.prefix.Addr() {
		return false
	}
	return a.prefix.Contains(ip.Next()) // not the last address
}

// allocate returns uid's address: preferred when it is in range and free (a pod that already
// had an IP keeps it across agent restarts), else the next free one.
func (a *ipam) allocate(uid types.UID, preferred string) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ip, owner := range a.used {
		if owner == uid {
			return ip, nil
		}
	}
	if ip, err := netip.ParseAddr(preferred); err == nil && a.usable(ip) {
		if _, taken := a.used[ip]; !taken {
			a.used[ip] = uid
			return ip, nil
		}
	}
	first := a.prefix.Addr().Next()
	ip := a.next
	if !a.usable(ip) {
		ip = first
	}
	start := ip
	for {
		if _, taken := a.used[ip]; !taken {
			a.used[ip] = uid
			a.next = ip.Next()
			return ip, nil
		}
		if ip = ip.Next(); !a.usable(ip) {
			ip = first
		}
		if ip == start {
			return netip.Addr{}, errors.New("pod range exhausted")
		}
	}
}

func (a *ipam) release(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ip, owner := range a.used {
		if owner == uid {
			delete(a.used, ip)
		}
	}
}
