package nftables

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// conntracker deletes the conntrack entries a filter matches; netlink in production, a
// recorder in unit tests.
type conntracker interface {
	deleteFlows(f *staleFlows) (int, error)
}

type netlinkConntrack struct{}

// deleteFlows dumps the IPv4 conntrack table and deletes what f matches, through netlink
// sockets opened on the calling thread (hence in its network namespace).
func (netlinkConntrack) deleteFlows(f *staleFlows) (int, error) {
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f)
	return int(n), err
}

// staleFlows matches UDP conntrack entries that were sent to a service (a VIP and port, or a
// NodePort) and DNATed to an address that is no longer one of its serving endpoints. Such an
// entry would keep steering a client's datagrams to a dead or removed endpoint for as long as
// the client keeps sending.
type staleFlows struct {
	vips      map[netip.AddrPort]map[netip.AddrPort]bool // frontend → serving endpoints
	nodePorts map[uint16]map[netip.AddrPort]bool
}

func newStaleFlows() *staleFlows {
	return &staleFlows{vips: map[netip.AddrPort]map[netip.AddrPort]bool{}, nodePorts: map[uint16]map[netip.AddrPort]bool{}}
}

// add registers a UDP service port's frontends with its serving endpoints (nil: none, so
// every DNATed flow to it is stale).
func (s *staleFlows) add(u *udpFrontends, serving map[netip.AddrPort]bool) {
	if serving == nil {
		serving = map[netip.AddrPort]bool{}
	}
	for _, v := range u.vips {
		if _, ok := s.vips[v]; !ok {
			s.vips[v] = serving
		}
	}
	if u.nodePort != 0 {
		if _, ok := s.nodePorts[u.nodePort]; !ok {
			s.nodePorts[u.nodePort] = serving
		}
	}
}

func (s *staleFlows) empty() bool { return len(s.vips) == 0 && len(s.nodePorts) == 0 }

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (s *staleFlows) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	if f.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	dst := addrPort(f.Forward.DstIP, f.Forward.DstPort)
	backend := addrPort(f.Reverse.SrcIP, f.Reverse.SrcPort)
	if backend == dst {
		return false // not DNATed: not service traffic
	}
	if serving, ok := s.vips[dst]; ok {
		return !serving[backend]
	}
	if serving, ok := s.nodePorts[dst.Port()]; ok {
		return !serving[backend]
	}
	return false
}
