package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/controller/manager"
	"github.com/kplane/kplane/controller/servicelb"
	"github.com/kplane/kplane/internal/inprocess"
	"github.com/kplane/kplane/node"
	proxyapp "github.com/kplane/kplane/proxy/app"
	"github.com/kplane/kplane/scheduler"
	"github.com/spf13/cobra"
)

func newUpCommand() *cobra.Command {
	o := apiserver.DefaultOptions()
	// Loopback ClusterIPs: the userspace proxy can listen on every one of them without root,
	// so services answer on this machine with no setup. This is the first choice; see
	// claimLoopbackRanges.
	o.ServiceClusterIPRange = defaultServiceRange
	proxyMode := proxyapp.ProxyModeUserspace
	var lb lbRangeChoice
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole system on this machine: apiserver, controller manager, scheduler, proxy and node agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			if !cmd.Flags().Changed("service-cluster-ip-range") {
				o.ServiceClusterIPRange = "" // recorded in the data dir, or a free one
			}
			lb.given = cmd.Flags().Changed("load-balancer-ip-range")
			return runUp(ctx, o, proxyMode, lb)
		},
	}
	addAPIServerFlags(cmd.Flags(), &o)
	cmd.Flags().StringVar(&proxyMode, "proxy-mode", proxyMode, "the proxy's data path: userspace (no root) or nftables (root)")
	cmd.Flags().StringVar(&lb.value, "load-balancer-ip-range", "",
		"addresses for Services of type LoadBalancer: a CIDR or a first-last range of IPv4 addresses (default: a free /24 of loopback addresses from "+
			defaultLoadBalancerRange+" on, recorded in the data dir); empty turns the service-lb-controller off")
	return cmd
}

// lbRangeChoice is what --load-balancer-ip-range asked for: given, value (empty: no pool);
// not given, the recorded or a free loopback block.
type lbRangeChoice struct {
	given bool
	value string
}

// The load-balancer pool's first choice, and where the search for a free /24 block starts:
// in 127.0.0.0/16, which the searches of claimLoopbackRanges (/16 blocks from 127.64.0.0 up)
// never take, and clear of 127.0.0.1. Loopback addresses answer on this machine with no setup,
// as ClusterIPs do: the proxy serves a Service's address like its ClusterIP.
const defaultLoadBalancerRange = "127.0.100.0/24"

// lbRangeFile, in the data dir, records the pool of the first start, so that a restart keeps
// the Services' addresses (restored from their status, which must fall in the pool).
const lbRangeFile = "load-balancer-range"

// claimLoadBalancerRange decides the pool of the `kplane up` using dataDir and claims it for
// as long as it runs, as claimLoopbackRanges does the other ranges: the flag's value when
// given (empty: none); else the recorded one (refused, like the others, if another `up` holds
// it); else the first /24 block from defaultLoadBalancerRange up that no other `up` claims
// and no socket is bound in. record writes the choice into dataDir: the caller calls it once
// the other ranges are claimed too, so that a start that fails leaves no choice behind.
func claimLoadBalancerRange(dataDir string, lb lbRangeChoice) (cidr string, release func(), record func() error, err error) {
	release = func() {}
	hold := func(l net.Listener) func() {
		if l == nil {
			return release
		}
		return func() { l.Close() }
	}
	if lb.given && lb.value == "" {
		return "", release, func() error { return nil }, nil
	}
	path := filepath.Join(dataDir, lbRangeFile)
	want := lb.value
	if !lb.given {
		data, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", nil, nil, err
		}
		want = strings.TrimSpace(string(data))
		if _, err := servicelb.ParsePool(want); want != "" && err != nil {
			return "", nil, nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if want != "" {
		l, err := claimRange(want)
		if err != nil {
			return "", nil, nil, fmt.Errorf("up: the load-balancer range (--load-balancer-ip-range) %s: %w", want, err)
		}
		cidr, release = want, hold(l)
	} else {
		from := int(netip.MustParsePrefix(defaultLoadBalancerRange).Addr().As4()[2])
		var last error
		for b := from; b <= 255 && cidr == ""; b++ {
			block := netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 0, byte(b), 0}), 24).String()
			if rangeBound(block) {
				last = errRangeBound
				continue
			}
			l, err := claimRange(block)
			if err != nil {
				last = err
				continue
			}
			cidr, release = block, hold(l)
		}
		if cidr == "" {
			return "", nil, nil, fmt.Errorf("up: no free /24 block of 127.0.%d.0-127.0.255.255 for the load-balancer range: %w", from, last)
		}
	}
	record = func() error {
		if data, _ := os.ReadFile(path); strings.TrimSpace(string(data)) == cidr {
			return nil
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(cidr+"\n"), 0o600); err != nil {
			return fmt.Errorf("record the load-balancer range: %w", err)
		}
		return nil
	}
	return cidr, release, record, nil
}

// runUp starts the apiserver, then every other role in this process against it, and runs
// until ctx is cancelled or one of them fails (which stops the others). An empty
// o.ServiceClusterIPRange means the one recorded in the data dir, or a free one.
func runUp(ctx context.Context, o apiserver.Options, proxyMode string, lb lbRangeChoice) error {
	if o.WriteKubeconfig == "" {
		o.WriteKubeconfig = filepath.Join(o.DataDir, "kubeconfig")
	}
	// Checked before anything is claimed or started: bad input changes nothing.
	if lb.value != "" {
		if _, err := servicelb.ParsePool(lb.value); err != nil {
			return fmt.Errorf("up: --load-balancer-ip-range: %w", err)
		}
	}
	lbRange, releaseLB, recordLB, err := claimLoadBalancerRange(o.DataDir, lb)
	if err != nil {
		return err
	}
	defer releaseLB()
	ranges, release, err := claimLoopbackRanges(o.DataDir, o.ServiceClusterIPRange)
	if err != nil {
		return err
	}
	defer release()
	if err := recordLB(); err != nil {
		return err
	}
	o.ServiceClusterIPRange = ranges.ServiceClusterIPRange
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	api, err := apiserver.Start(ctx, o)
	if err != nil {
		return err
	}
	if err := inprocess.WaitReady(ctx, api, 30*time.Second); err != nil {
		cancel()
		_ = api.Wait()
		return fmt.Errorf("up: %w", err)
	}

	cm := inprocess.ControllerManager(api, o.WriteKubeconfig)
	if lbOpts, ok := manager.OptionsOf[*servicelb.Options](cm, servicelb.Name); ok {
		lbOpts.LoadBalancerIPRange = lbRange
	}
	sched := inprocess.Scheduler(o.WriteKubeconfig)
	px := proxyapp.DefaultOptions()
	px.Kubeconfig, px.ProxyMode = o.WriteKubeconfig, proxyMode
	// On one machine a change should reach the data path at once, not after kube-proxy's
	// second: partial syncs cost O(changes), and at 10k services syncing on every change
	// costs ~1 ms of CPU per change against ~0.5 ms batched (bench/README.md, proxy).
	px.MinSyncPeriod = 0
	// kube-proxy's well-known ports, unless every port is to be free (a second `kplane up`
	// must not collide with the first).
	px.HealthzBindAddress, px.MetricsBindAddress = "127.0.0.1:10256", "127.0.0.1:10249"
	if o.SecurePort == 0 {
		px.HealthzBindAddress, px.MetricsBindAddress = "127.0.0.1:0", "127.0.0.1:0"
	}
	nd := inprocess.Node(o.WriteKubeconfig, filepath.Join(o.DataDir, "node"), ranges.PodCIDR)
	local, err := inprocess.Client(o.WriteKubeconfig)
	if err != nil {
		cancel()
		_ = api.Wait()
		return err
	}
	agent, err := node.New(local, nd)
	if err != nil {
		cancel()
		_ = api.Wait()
		return err
	}
	// Started here, not with the other roles, for the addresses it bound.
	pxServer, pxWait, err := startProxy(ctx, px)
	if err != nil {
		cancel()
		_ = api.Wait()
		return err
	}
	roles := map[string]func(context.Context) error{
		"node":               agent.Run,
		"controller-manager": func(ctx context.Context) error { return manager.Run(ctx, cm) },
		"scheduler":          func(ctx context.Context) error { return scheduler.RunWithClient(ctx, sched, local) },
		"proxy":              func(context.Context) error { return pxWait() },
		"apiserver":          func(context.Context) error { return api.Wait() },
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for name, run := range roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := run(ctx)
			if ctx.Err() == nil {
				// A role that stops on its own takes the system down with it.
				if err == nil {
					err = errors.New("stopped")
				}
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("up: %s: %w", name, err)
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	// Every port is bound once the node agent has its own.
	for agent.Port() == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if ctx.Err() == nil {
		slog.Info("kplane is up; use it with", "KUBECONFIG", o.WriteKubeconfig, "apiserver", api.URL,
			"serviceClusterIPRange", ranges.ServiceClusterIPRange, "podCIDR", ranges.PodCIDR, "loadBalancerIPRange", lbRange,
			"proxyHealthz", pxServer.HealthzAddr, "proxyMetrics", pxServer.MetricsAddr,
			"nodeAgent", net.JoinHostPort(nd.Address, strconv.Itoa(agent.Port())))
	}
	wg.Wait()
	return first
}
