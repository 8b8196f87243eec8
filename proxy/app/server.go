package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/profiling"
	"github.com/kplane/kplane/proxy"
	"github.com/kplane/kplane/proxy/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
)

// Server is a running proxy: informers, configs, the Proxier and its sync loop, and the health
// and metrics servers.
type Server struct {
	// HealthzAddr and MetricsAddr are where /healthz+/livez and /metrics listen ("" when off).
	HealthzAddr, MetricsAddr string
	// NodeName and IPFamily are what the proxy serves.
	NodeName string
	IPFamily corev1.IPFamily
	Proxier  *proxy.Proxier

	done chan struct{}
}

// Run runs a proxy until ctx is cancelled; see Start.
func Run(ctx context.Context, o Options, c *client.Client, dp proxy.DataPath) error {
	s, err := Start(ctx, o, c, dp)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Start validates o, listens on the health and metrics addresses, and starts following the API
// server through c (nil: a client from o.Kubeconfig and o.Master) to program dp. It returns
// while the proxy runs; every goroutine it started ends after ctx is cancelled (Wait waits for
// that). The caller owns dp (and stops whatever it runs) and chooses it from o.ProxyMode.
func Start(ctx context.Context, o Options, c *client.Client, dp proxy.DataPath) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if dp == nil {
		return nil, errors.New("proxy: no data path")
	}
	nodeName, _ := o.NodeName()
	if c == nil {
		var err error
		if c, err = client.FromKubeconfigAndMaster(o.Kubeconfig, o.Master, o.KubeAPIQPS, o.KubeAPIBurst); err != nil {
			return nil, err
		}
	}
	family := o.IPFamily
	if family == "" {
		family = detectIPFamily(ctx, c, nodeName)
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := proxy.NewProxier(proxy.ProxierConfig{
		DataPath: dp, NodeName: nodeName, IPFamily: family,
		MinSyncPeriod: o.MinSyncPeriod, SyncPeriod: o.SyncPeriod, FullSyncPeriod: o.FullSyncPeriod,
		Registerer: reg,
	})
	if err != nil {
		return nil, err
	}

	s := &Server{NodeName: nodeName, IPFamily: family, Proxier: p, done: make(chan struct{})}
	var servers []*http.Server
	var listeners []net.Listener
	listen := func(what, addr string, h http.Handler) (string, error) {
		if addr == "" {
			return "", nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return "", fmt.Errorf("proxy %s server: %w", what, err)
		}
		listeners = append(listeners, ln)
		servers = append(servers, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second})
		return ln.Addr().String(), nil
	}
	healthMux := http.NewServeMux()
	healthMux.Handle("/healthz", p.HealthzHandler())
	healthMux.Handle("/livez", p.LivezHandler())
	if s.HealthzAddr, err = listen("health", o.HealthzBindAddress, healthMux); err != nil {
		return nil, err
	}
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if o.Profiling {
		metricsMux.Handle("/debug/pprof/", profiling.Handler)
	}
	if s.MetricsAddr, err = listen("metrics", o.MetricsBindAddress, metricsMux); err != nil {
		return nil, err
	}

	factory := cache.NewFactory(c, "")
	services := config.NewServiceConfig(factory, o.ConfigSyncPeriod)
	services.RegisterEventHandler(p)
	slices := config.NewEndpointSliceConfig(factory, o.ConfigSyncPeriod)
	slices.RegisterEventHandler(p)
	nodes := config.NewNodeConfig(factory, nodeName, o.ConfigSyncPeriod)
	nodes.RegisterEventHandler(p)

	var wg sync.WaitGroup
	goes := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	for i, srv := range servers {
		goes(func() {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				slog.Error("proxy: HTTP server stopped", "addr", listeners[i].Addr(), "err", err)
			}
		})
	}
	factory.Start(ctx)
	goes(func() { services.Run(ctx) })
	goes(func() { slices.Run(ctx) })
	goes(func() { nodes.Run(ctx) })
	goes(func() { p.Run(ctx) })
	slog.Info("proxy started", "node", nodeName, "ipFamily", family, "healthz", s.HealthzAddr, "metrics", s.MetricsAddr,
		"minSyncPeriod", o.MinSyncPeriod, "syncPeriod", o.SyncPeriod)
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, srv := range servers {
			_ = srv.Shutdown(shutdown)
		}
		cancel()
		wg.Wait()
		factory.Shutdown()
		slog.Info("proxy stopped")
		close(s.done)
	}()
	return s, nil
}

// Wait blocks until the proxy has stopped (after its context was cancelled).
func (s *Server) Wait() error {
	<-s.done
	return nil
}

// detectIPFamily is the family of the node's first InternalIP (else ExternalIP) if the Node can
// be read now, else IPv4.
func detectIPFamily(ctx context.Context, c *client.Client, nodeName string) corev1.IPFamily {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	node, err := client.Resource[*corev1.Node](c, "nodes").Get(ctx, nodeName)
	if err != nil {
		slog.Info("proxy: cannot read this node to choose the IP family; serving IPv4", "node", nodeName, "err", err)
		return corev1.IPv4Protocol
	}
	return proxy.NodeIPFamily(node)
}
