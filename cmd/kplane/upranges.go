package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/kplane/kplane/node"
)

// loopbackRanges are the address ranges one `kplane up` hands out on the loopback interface:
// ClusterIPs and pod IPs. Linux routes all of 127.0.0.0/8 to lo, so both work with no setup;
// two `kplane up` on one machine must not share them, or their listeners collide.
type loopbackRanges struct {
	ServiceClusterIPRange string `json:"serviceClusterIPRange"`
	PodCIDR               string `json:"podCIDR"`
}

// rangesFile, in the data dir, records the ranges of the first start, so that a restart keeps
// its ClusterIPs and pod IPs (both are stored in objects).
const rangesFile = "loopback-ranges.json"

// The first choices, and where the search for a free /16 block of 127.0.0.0/8 starts.
const (
	defaultServiceRange = "127.64.0.0/16"
	defaultPodRange     = node.DefaultPodCIDR
)

// claimLoopbackRanges decides the ranges of the `kplane up` using dataDir, and claims them
// for as long as it runs (release gives them up): the ones recorded in the data dir; else,
// for a data dir that holds a cluster from before the ranges were recorded, the defaults it
// was given; else the first /16 blocks from the defaults upward that no other running
// `kplane up` claims. serviceRange, when not empty (the --service-cluster-ip-range flag), is
// used instead of the recorded service range. What is chosen is recorded.
func claimLoopbackRanges(dataDir, serviceRange string) (r loopbackRanges, release func(), err error) {
	path := filepath.Join(dataDir, rangesFile)
	recorded, err := readLoopbackRanges(path)
	if err != nil {
		return r, nil, err
	}
	want := recorded
	if want == (loopbackRanges{}) {
		if _, err := os.Stat(filepath.Join(dataDir, "etcd")); err == nil {
			want = loopbackRanges{ServiceClusterIPRange: defaultServiceRange, PodCIDR: defaultPodRange}
		}
	}
	if serviceRange != "" {
		want.ServiceClusterIPRange = serviceRange
	}
	var claims []net.Listener
	release = func() {
		for _, l := range claims {
			l.Close()
		}
	}
	r, err = chooseLoopbackRanges(want, func(cidr string) error {
		l, err := claimRange(cidr)
		if l != nil {
			claims = append(claims, l)
		}
		return err
	}, rangeBound)
	if err != nil {
		release()
		return r, nil, err
	}
	if r != recorded {
		data, _ := json.MarshalIndent(r, "", "  ")
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			release()
			return r, nil, err
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
			release()
			return r, nil, fmt.Errorf("record the loopback ranges: %w", err)
		}
	}
	return r, release, nil
}

// chooseLoopbackRanges keeps the ranges want names and fills the others with the first /16
// blocks, from the defaults upward, that no socket is bound in (bound) and that claim takes.
// claim takes a range for this process, or says why it cannot (errRangeInUse: another process
// holds it).
func chooseLoopbackRanges(want loopbackRanges, claim func(cidr string) error, bound func(cidr string) bool) (loopbackRanges, error) {
	r := want
	for _, f := range []struct {
		what  string
		value *string
		from  string
	}{
		{"service range (--service-cluster-ip-range)", &r.ServiceClusterIPRange, defaultServiceRange},
		{"pod range", &r.PodCIDR, defaultPodRange},
	} {
		if *f.value != "" {
			if err := claim(*f.value); err != nil {
				return r, fmt.Errorf("up: the %s %s: %w", f.what, *f.value, err)
			}
			continue
		}
		var err error
		for b := netip.MustParsePrefix(f.from).Addr().As4()[1]; b < 255; b++ {
			cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{127, b, 0, 0}), 16).String()
			if bound(cidr) {
				err = errRangeBound
				continue
			}
			if err = claim(cidr); err == nil {
				*f.value = cidr
				break
			}
		}
		if *f.value == "" {
			return r, fmt.Errorf("up: no free /16 block of 127.0.0.0/8 for the %s: %w", f.what, err)
		}
	}
	return r, nil
}

// errRangeInUse: another process claims the range. errRangeBound: a socket is bound in it.
var (
	errRangeInUse = errors.New("in use by another kplane up on this machine (stop that one, or use another --data-dir)")
	errRangeBound = errors.New("sockets are bound in it")
)

// rangeBound reports whether an IPv4 TCP listener or UDP socket of this network namespace is
// bound to an address in cidr: a block some other program (or a `kplane up` from before the
// claims) uses is not chosen. Connections are not counted: those of a `kplane up` that has
// stopped linger for a minute in TIME_WAIT. Where /proc/net cannot be read, nothing is bound.
func rangeBound(cidr string) bool {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	const tcpListen = "0A"
	for _, table := range []string{"/proc/net/tcp", "/proc/net/udp"} {
		tcp := table == "/proc/net/tcp"
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			// "sl local_address rem_address st ...": the local address is the IPv4 address's
			// four bytes read as one number in the machine's byte order, in hex, a colon and
			// the port; st is the socket's state.
			f := strings.Fields(line)
			if len(f) < 4 || len(f[1]) != 13 || tcp && f[3] != tcpListen {
				continue
			}
			n, err := strconv.ParseUint(f[1][:8], 16, 32)
			if err != nil {
				continue
			}
			var ip [4]byte
			binary.NativeEndian.PutUint32(ip[:], uint32(n))
			if prefix.Contains(netip.AddrFrom4(ip)) {
				return true
			}
		}
	}
	return false
}

// claimRange takes cidr for this process, machine-wide (strictly: for this network namespace,
// which is also the scope of the loopback addresses), by binding an abstract Unix socket named
// after it: the kernel refuses a second bind of the name and frees it when the process ends,
// however it ends, so a stopped `kplane up` holds nothing. Outside Linux there are no abstract
// sockets: every claim succeeds.
func claimRange(cidr string) (net.Listener, error) {
	if runtime.GOOS != "linux" {
		return nil, nil
	}
	l, err := net.Listen("unix", "@kplane-up/"+cidr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, errRangeInUse
	}
	return l, err
}

// readLoopbackRanges reads the ranges recorded in path (none when it does not exist).
func readLoopbackRanges(path string) (loopbackRanges, error) {
	var r loopbackRanges
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	for _, cidr := range []string{r.ServiceClusterIPRange, r.PodCIDR} {
		if _, err := netip.ParsePrefix(cidr); err != nil && cidr != "" {
			return r, fmt.Errorf("%s: %w", path, err)
		}
	}
	return r, nil
}
