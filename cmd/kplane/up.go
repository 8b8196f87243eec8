package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/manager"
	"github.com/kplane/kplane/node"
	"github.com/kplane/kplane/proxy"
	"github.com/kplane/kplane/scheduler"
	"github.com/spf13/cobra"
)

func newUpCommand() *cobra.Command {
	o := apiserver.DefaultOptions()
	// Loopback ClusterIPs: the userspace proxy can listen on every one of them without root,
	// so services answer on this machine with no setup.
	o.ServiceClusterIPRange = "127.64.0.0/16"
	proxyMode := proxy.ProxyModeUserspace
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole system on this machine: apiserver, controller manager, scheduler, proxy and node agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			return runUp(ctx, o, proxyMode)
		},
	}
	addAPIServerFlags(cmd.Flags(), &o)
	cmd.Flags().StringVar(&proxyMode, "proxy-mode", proxyMode, "the proxy's data path: userspace (no root) or nftables (root)")
	return cmd
}

// runUp starts the apiserver, then every other role in this process against it, and runs
// until ctx is cancelled or one of them fails (which stops the others).
func runUp(ctx context.Context, o apiserver.Options, proxyMode string) error {
	if o.WriteKubeconfig == "" {
		o.WriteKubeconfig = filepath.Join(o.DataDir, "kubeconfig")
	}
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
	slog.Info("kplane is up; use it with", "KUBECONFIG", o.WriteKubeconfig)

	cm := manager.DefaultOptions()
	cm.Kubeconfig, cm.LeaderElect, cm.SecurePort = o.WriteKubeconfig, false, 0
	// The token controller signs with the apiserver's own key, and kube-root-ca.crt publishes
	// the certificate the apiserver answers TLS with (to in-cluster clients, through the
	// kubernetes service), as kube-controller-manager is set up beside kube-apiserver.
	cm.Config.ServiceAccountKeyFile, cm.Config.RootCAFile = api.ServiceAccountKeyFile, api.CAFile
	sched := scheduler.DefaultOptions()
	sched.Kubeconfig, sched.LeaderElect = o.WriteKubeconfig, false
	px := proxy.DefaultOptions()
	px.Kubeconfig, px.ProxyMode = o.WriteKubeconfig, proxyMode
	px.HealthzBindAddress = "127.0.0.1:10256"
	nd := node.DefaultOptions()
	nd.Kubeconfig, nd.DataDir = o.WriteKubeconfig, filepath.Join(o.DataDir, "node")
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
	roles := map[string]func(context.Context) error{
		"node":               agent.Run,
		"controller-manager": func(ctx context.Context) error { return manager.Run(ctx, cm) },
		"scheduler":          func(ctx context.Context) error { return scheduler.RunWithClient(ctx, sched, local) },
		"proxy":              func(ctx context.Context) error { return runProxy(ctx, px) },
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
	wg.Wait()
	return first
}
