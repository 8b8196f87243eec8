package servicelb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Pool is the range of IPv4 addresses the controller hands out, first to last inclusive.
type Pool struct {
	first, last uint32
	text        string // as configured, for messages
}

// ParsePool reads a pool: a CIDR ("127.0.100.0/24": every address but the network's and the
// broadcast address, which do not work as host addresses on a real subnet; all of a /31 or
// /32) or a range "first-last" ("192.0.2.10-192.0.2.20": exactly those). IPv4 only: kplane's
// Services are single-stack IPv4.
func ParsePool(s string) (Pool, error) {
	s = strings.TrimSpace(s)
	var first, last netip.Addr
	if strings.Contains(s, "/") {
		prefix, err := netip.ParsePrefix(s)
		if err != nil {
			return Pool{}, fmt.Errorf("%q is not a CIDR or a first-last range of IPv4 addresses", s)
		}
		if !prefix.Addr().Is4() {
			return Pool{}, fmt.Errorf("%q is not IPv4 (only IPv4 addresses are handed out)", s)
		}
		if prefix.Masked() != prefix {
			return Pool{}, fmt.Errorf("%q has host bits set (did you mean %s?)", s, prefix.Masked())
		}
		first, last = prefix.Addr(), lastOf(prefix)
		if prefix.Bits() <= 30 {
			first, last = first.Next(), last.Prev()
		}
	} else {
		a, b, ok := strings.Cut(s, "-")
		if !ok {
			return Pool{}, fmt.Errorf("%q is not a CIDR or a first-last range of IPv4 addresses", s)
		}
		var errA, errB error
		first, errA = netip.ParseAddr(strings.TrimSpace(a))
		last, errB = netip.ParseAddr(strings.TrimSpace(b))
		if errA != nil || errB != nil {
			return Pool{}, fmt.Errorf("%q is not a CIDR or a first-last range of IPv4 addresses", s)
		}
		if !first.Is4() || !last.Is4() {
			return Pool{}, fmt.Errorf("%q is not IPv4 (only IPv4 addresses are handed out)", s)
		}
		if last.Less(first) {
			return Pool{}, fmt.Errorf("%q ends before it starts", s)
		}
	}
	p := Pool{first: u32(first), last: u32(last), text: s}
	// Addresses that cannot stand for one host: 0.0.0.0/8 ("this network"), multicast and
	// the limited broadcast address.
	for _, bad := range []string{"0.0.0.0/8", "224.0.0.0/4", "255.255.255.255/32"} {
		b := netip.MustParsePrefix(bad)
		if p.first <= u32(lastOf(b)) && u32(b.Addr()) <= p.last {
			return Pool{}, fmt.Errorf("%q overlaps %s, whose addresses cannot be given to a Service", s, bad)
		}
	}
	return p, nil
}

func lastOf(p netip.Prefix) netip.Addr {
	return addrOf(u32(p.Addr()) | ^uint32(0)>>p.Bits())
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func addrOf(n uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	return netip.AddrFrom4(b)
}

// Contains reports whether a is one of the pool's addresses.
func (p Pool) Contains(a netip.Addr) bool {
	a = a.Unmap()
	return a.Is4() && p.first <= u32(a) && u32(a) <= p.last
}

// Size is how many addresses the pool has.
func (p Pool) Size() int { return int(p.last-p.first) + 1 }

// First and Last are the pool's first and last address.
func (p Pool) First() netip.Addr { return addrOf(p.first) }
func (p Pool) Last() netip.Addr  { return addrOf(p.last) }

func (p Pool) String() string { return p.text }

// Errors of the allocator, wrapped with the details.
var (
	ErrExhausted = errors.New("no free address")
	ErrNotInPool = errors.New("not in the pool")
	ErrInUse     = errors.New("in use")
)

// holding is the address one Service holds; the UID tells a Service from a later one of the
// same name.
type holding struct {
	addr netip.Addr
	uid  types.UID
}

// Allocator hands out the pool's addresses to Services, by key ("namespace/name"), one each.
// It is the controller's memory of who holds what: pure state, rebuilt from the Services'
// status when the controller starts. It is safe for concurrent use.
type Allocator struct {
	pool Pool

	mu     sync.Mutex
	byKey  map[string]holding
	byAddr map[netip.Addr]string
}

// NewAllocator returns an allocator of pool with every address free.
func NewAllocator(pool Pool) *Allocator {
	return &Allocator{pool: pool, byKey: map[string]holding{}, byAddr: map[netip.Addr]string{}}
}

// Pool is the allocator's pool.
func (a *Allocator) Pool() Pool { return a.pool }

// Lookup returns the address key holds and the UID of the Service it was given to.
func (a *Allocator) Lookup(key string) (netip.Addr, types.UID, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.byKey[key]
	return h.addr, h.uid, ok
}

// Holder returns the key holding addr, if any.
func (a *Allocator) Holder(addr netip.Addr) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key, ok := a.byAddr[addr.Unmap()]
	return key, ok
}

// Used is how many addresses are held.
func (a *Allocator) Used() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byAddr)
}

// Allocate gives key (the Service with uid) an address: the one it holds already, else the
// lowest free one; ErrExhausted when there is none.
func (a *Allocator) Allocate(key string, uid types.UID) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h, ok := a.byKey[key]; ok {
		h.uid = uid
		a.byKey[key] = h
		return h.addr, nil
	}
	if len(a.byAddr) >= a.pool.Size() {
		return netip.Addr{}, fmt.Errorf("%w in the pool %s: all %d addresses are in use", ErrExhausted, a.pool, a.pool.Size())
	}
	// The lowest free address: at most len(byAddr)+1 steps, since every held one is in the
	// pool.
	for n := uint64(a.pool.first); n <= uint64(a.pool.last); n++ {
		addr := addrOf(uint32(n))
		if _, taken := a.byAddr[addr]; !taken {
			a.hold(key, uid, addr)
			return addr, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w in the pool %s", ErrExhausted, a.pool)
}

// AllocateAt gives key (the Service with uid) the address addr, releasing the one it held
// before, if another: ErrNotInPool or ErrInUse (naming the holder) when it cannot, and then
// key keeps what it held.
func (a *Allocator) AllocateAt(key string, uid types.UID, addr netip.Addr) error {
	addr = addr.Unmap()
	if !a.pool.Contains(addr) {
		return fmt.Errorf("%s is %w %s", addr, ErrNotInPool, a.pool)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if holder, taken := a.byAddr[addr]; taken && holder != key {
		return fmt.Errorf("%s is %w by the Service %s", addr, ErrInUse, holder)
	}
	if h, ok := a.byKey[key]; ok {
		delete(a.byAddr, h.addr)
	}
	a.hold(key, uid, addr)
	return nil
}

func (a *Allocator) hold(key string, uid types.UID, addr netip.Addr) {
	a.byKey[key] = holding{addr: addr, uid: uid}
	a.byAddr[addr] = key
}

// Release frees the address key holds and returns it (false when it held none).
func (a *Allocator) Release(key string) (netip.Addr, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.byKey[key]
	if !ok {
		return netip.Addr{}, false
	}
	delete(a.byKey, key)
	delete(a.byAddr, h.addr)
	return h.addr, true
}
