package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	proxyapp "github.com/kplane/kplane/proxy/app"
	"github.com/kplane/kplane/proxy/nftables"
	"github.com/kplane/kplane/proxy/userspace"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

func newProxyCommand() *cobra.Command {
	o := proxyapp.DefaultOptions()
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
func runProxy(ctx context.Context, o proxyapp.Options) error {
	_, wait, err := startProxy(ctx, o)
	if err != nil {
		return err
	}
	return wait()
}

// startProxy builds the data path the options ask for and starts the proxy on it. It returns
// once the proxy listens (the Server has the addresses bound); wait blocks until ctx has ended
// and the proxy and its data path have stopped.
func startProxy(ctx context.Context, o proxyapp.Options) (s *proxyapp.Server, wait func() error, err error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	o.Registry = prometheus.NewRegistry()
	switch o.ProxyMode {
	case proxyapp.ProxyModeNFTables, proxyapp.ProxyModeAuto:
		dp, err := nftables.New(nftables.Options{Registerer: o.Registry})
		if err == nil {
			// As kube-proxy does, the rules stay when the proxy stops, so that traffic keeps
			// flowing across a restart; the next start replaces them with a full sync.
			slog.Info("proxy mode nftables")
			s, err := proxyapp.Start(ctx, o, nil, dp)
			if err != nil {
				return nil, nil, err
			}
			return s, s.Wait, nil
		}
		if o.ProxyMode == proxyapp.ProxyModeNFTables || !errors.Is(err, nftables.ErrUnavailable) {
			return nil, nil, err
		}
		slog.Info("nftables cannot be used here, proxying in userspace", "reason", err)
		fallthrough
	case proxyapp.ProxyModeUserspace:
		dp := userspace.New(userspace.Options{Registerer: o.Registry})
		done := make(chan error, 1)
		go func() { done <- dp.Run(ctx) }()
		slog.Info("proxy mode userspace")
		stop := func() {
			_ = dp.Close()
			<-done
		}
		s, err := proxyapp.Start(ctx, o, nil, dp)
		if err != nil {
			stop()
			return nil, nil, err
		}
		return s, func() error {
			err := s.Wait()
			stop()
			return err
		}, nil
	}
	return nil, nil, fmt.Errorf("--proxy-mode: unknown mode %q (want userspace or nftables)", o.ProxyMode)
}
