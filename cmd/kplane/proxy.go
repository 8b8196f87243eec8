package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/kplane/kplane/proxy"
	"github.com/kplane/kplane/proxy/nftables"
	"github.com/kplane/kplane/proxy/userspace"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

func newProxyCommand() *cobra.Command {
	o := proxy.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Forward traffic for Services to their endpoints (kube-proxy)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			return runProxy(ctx, o)
		},
	}
	o.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&o.ProxyMode, "proxy-mode", o.ProxyMode,
		"data path: 'nftables' (root) or 'userspace' (no root; ClusterIPs must be local addresses, e.g. a 127.0.0.0/8 --service-cluster-ip-range on the apiserver); empty: nftables where it works, else userspace")
	return cmd
}

// runProxy builds the data path the options ask for and runs the proxy until ctx ends.
func runProxy(ctx context.Context, o proxy.Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o.Registry = prometheus.NewRegistry()
	switch o.ProxyMode {
	case proxy.ProxyModeNFTables, proxy.ProxyModeAuto:
		dp, err := nftables.New(nftables.Options{Registerer: o.Registry})
		if err == nil {
			// As kube-proxy does, the rules stay when the proxy stops, so that traffic keeps
			// flowing across a restart; the next start replaces them with a full sync.
			slog.Info("proxy mode nftables")
			return proxy.Run(ctx, o, nil, dp)
		}
		if o.ProxyMode == proxy.ProxyModeNFTables || !errors.Is(err, nftables.ErrUnavailable) {
			return err
		}
		slog.Info("nftables cannot be used here, proxying in userspace", "reason", err)
		fallthrough
	case proxy.ProxyModeUserspace:
		dp := userspace.New(userspace.Options{Registerer: o.Registry})
		done := make(chan error, 1)
		go func() { done <- dp.Run(ctx) }()
		slog.Info("proxy mode userspace")
		err := proxy.Run(ctx, o, nil, dp)
		_ = dp.Close()
		<-done
		return err
	}
	return fmt.Errorf("--proxy-mode: unknown mode %q (want userspace or nftables)", o.ProxyMode)
}
