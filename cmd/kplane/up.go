package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/manager"
	"github.com/kplane/kplane/controller/serviceaccounttoken"
	"github.com/kplane/kplane/node"
	"github.com/kplane/kplane/proxy"
	"github.com/kplane/kplane/scheduler"
	"github.com/spf13/cobra"
)

func newUpCommand() *cobra.Command {
	o := apiserver.DefaultOptions()
	// Loopback ClusterIPs: the userspace proxy can listen on every one of them without root,
	// so services answer on this machine with no setup. This is the first choice; see
	// claimLoopbackRanges.
	o.ServiceClusterIPRange = defaultServiceRange
	proxyMode := proxy.ProxyModeUserspace
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
			return runUp(ctx, o, proxyMode)
		},
	}
	addAPIServerFlags(cmd.Flags(), &o)
	cmd.Flags().StringVar(&proxyMode, "proxy-mode", proxyMode, "the proxy's data path: userspace (no root) or nftables (root)")
	return cmd
}

// runUp starts the apiserver, then every other role in this process against it, and runs
// until ctx is cancelled or one of them fails (which stops the others). An empty
// o.ServiceClusterIPRange means the one recorded in the data dir, or a free one.
func runUp(ctx context.Context, o apiserver.Options, proxyMode string) error {
	if o.WriteKubeconfig == "" {
		o.WriteKubeconfig = filepath.Join(o.DataDir, "kubeconfig")
	}
	ranges, release, err := claimLoopbackRanges(o.DataDir, o.ServiceClusterIPRange)
	if err != nil {
		return err
	}
	defer release()
	o.ServiceClusterIPRange = ranges.ServiceClusterIPRange
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	api, err := apiserver.Start(ctx, o)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !api.Server.Ready() {
		if time.Now().After(deadline) {
			cancel()
			_ = api.Wait()
			return errors.New("up: the apiserver did not become ready within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}

	cm := manager.DefaultOptions()
	cm.Kubeconfig, cm.LeaderElect, cm.SecurePort = o.WriteKubeconfig, false, 0
	// The same reasoning as for the node agent and the scheduler below: kube-controller-manager's
	// 20 QPS would hold a Job of 1000 pods (a create and a finalizer removal each) to ~100 s
	// against an apiserver that is in this process.
	cm.KubeAPIQPS, cm.KubeAPIBurst = 1000, 2000
	// The token controller signs with the apiserver's own key, and kube-root-ca.crt publishes
	// the certificate the apiserver answers TLS with (to in-cluster clients, through the
	// kubernetes service), as kube-controller-manager is set up beside kube-apiserver.
	cm.RootCAFile = api.CAFile
	if tokens, ok := manager.OptionsOf[*serviceaccounttoken.Options](cm, serviceaccounttoken.Name); ok {
		tokens.ServiceAccountKeyFile = api.ServiceAccountKeyFile
	}
	sched := scheduler.DefaultOptions()
	sched.Kubeconfig, sched.LeaderElect = o.WriteKubeconfig, false
	px := proxy.DefaultOptions()
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
	nd := node.DefaultOptions()
	nd.Kubeconfig, nd.DataDir = o.WriteKubeconfig, filepath.Join(o.DataDir, "node")
	nd.PodCIDR = ranges.PodCIDR
	// A free port rather than the kubelet's 10250, which a real kubelet or a second `kplane up`
	// may hold; the apiserver finds the port in the Node's status.
	nd.Port = 0
	// The node agent and the scheduler write a few times per pod; their usual client limits
	// (50 QPS, as kubelet and kube-scheduler) would make a burst of 100 pods wait seconds for
	// an apiserver that is in this very process and idle.
	local, err := client.FromKubeconfig(o.WriteKubeconfig, 1000, 2000)
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
			"serviceClusterIPRange", ranges.ServiceClusterIPRange, "podCIDR", ranges.PodCIDR,
			"proxyHealthz", pxServer.HealthzAddr, "proxyMetrics", pxServer.MetricsAddr,
			"nodeAgent", net.JoinHostPort(nd.Address, strconv.Itoa(agent.Port())))
	}
	wg.Wait()
	return first
}
