package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/profiling"
	"github.com/kplane/kplane/leaderelection"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Manager is a running controller manager.
type Manager struct {
	// Addr is where the health and metrics server listens ("" when it is off).
	Addr string

	opts    Options
	entries []controller.Entry
	client  *client.Client
	ctx     *controller.Context
	elector *leaderelection.Elector
	server  *http.Server
	leading prometheus.Gauge

	mu     sync.Mutex
	states map[string]error // per started controller: nil while running well
	done   chan struct{}
	err    error
}

// errNotStarted is the health of a controller this replica has not started (yet).
var errNotStarted = errors.New("not started")

// Run runs a controller manager until ctx is cancelled (nil) or it fails.
func Run(ctx context.Context, o Options) error {
	m, err := Start(ctx, o)
	if err != nil {
		return err
	}
	return m.Wait()
}

// Start validates o, waits for the API server, starts the health server and the leader
// election (or the controllers at once without it), and returns while they run.
func Start(ctx context.Context, o Options) (*Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	entries, _ := o.enabled()
	c, err := client.FromKubeconfigAndMaster(o.Kubeconfig, o.Master, o.KubeAPIQPS, o.KubeAPIBurst)
	if err != nil {
		return nil, err
	}
	return start(ctx, o, entries, c)
}

// StartWithClient is Start with a client made by the caller (kplane up, tests); the
// Kubeconfig, Master and QPS options are not used.
func StartWithClient(ctx context.Context, o Options, c *client.Client) (*Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	entries, _ := o.enabled()
	return start(ctx, o, entries, c)
}

func start(ctx context.Context, o Options, entries []controller.Entry, c *client.Client) (*Manager, error) {
	if err := waitForAPIServer(ctx, c, o.APIServerWait); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cctx, err := controller.NewContext(c, reg)
	if err != nil {
		return nil, err
	}
	cctx.MinResyncPeriod, cctx.RootCAFile = o.MinResyncPeriod, o.RootCAFile
	m := &Manager{opts: o, entries: entries, client: c, ctx: cctx, states: map[string]error{}, done: make(chan struct{}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leader_election_master_status", Help: "1 while this replica leads, 0 otherwise.",
			ConstLabels: prometheus.Labels{"name": o.Election.ResourceName},
		})}
	reg.MustRegister(m.leading)
	if o.LeaderElect {
		m.elector, err = leaderelection.New(o.Election.Config(c))
		if err != nil {
			return nil, err
		}
	}
	if o.SecurePort != 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(o.BindAddress, fmt.Sprint(o.SecurePort)))
		if err != nil {
			return nil, fmt.Errorf("health and metrics server: %w", err)
		}
		m.Addr = ln.Addr().String()
		m.server = &http.Server{Handler: m.handler(reg), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = m.server.Serve(ln) }()
		slog.Info("controller manager serving health and metrics", "addr", "http://"+m.Addr)
	}
	go m.run(ctx)
	return m, nil
}

// Wait blocks until the manager has stopped and returns why.
func (m *Manager) Wait() error {
	<-m.done
	return m.err
}

func (m *Manager) run(ctx context.Context) {
	var err error
	if m.elector != nil {
		err = m.elector.Run(ctx, m.lead)
	} else {
		m.lead(ctx)
	}
	if m.server != nil {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = m.server.Shutdown(shutdown)
		cancel()
	}
	m.err = err
	close(m.done)
}

// lead builds and runs every enabled controller until ctx is cancelled, then waits for all
// of them and the informers to stop.
func (m *Manager) lead(ctx context.Context) {
	m.leading.Set(1)
	defer m.leading.Set(0)
	type running struct {
		entry controller.Entry
		c     controller.Controller
	}
	var started []running
	for _, e := range m.entries {
		// Each controller writes through its own client and rate limiter, as in Kubernetes;
		// the informers share one.
		cctx := *m.ctx
		cctx.Client = m.client.WithUserAgent("kplane-controller-manager/" + e.Name)
		c, err := e.New(&cctx, m.opts.options(e))
		if err != nil {
			slog.Error("could not build controller", "controller", e.Name, "err", err)
			m.setState(e.Name, fmt.Errorf("could not build: %w", err))
			continue
		}
		if c == nil {
			slog.Info("controller turned off by its configuration", "controller", e.Name)
			continue
		}
		started = append(started, running{e, c})
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.ctx.Recorder.Run(ctx)
	}()
	m.ctx.Informers.Start(ctx)
	for _, r := range started {
		m.setState(r.entry.Name, nil)
		slog.Info("starting controller", "controller", r.entry.Name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.c.Run(ctx); err != nil && ctx.Err() == nil {
				slog.Error("controller stopped", "controller", r.entry.Name, "err", err)
				m.setState(r.entry.Name, err)
			}
		}()
	}
	<-ctx.Done()
	wg.Wait()
	m.ctx.Informers.Shutdown()
	for _, r := range started {
		m.setState(r.entry.Name, errNotStarted)
	}
	slog.Info("controllers stopped")
}

func (m *Manager) setState(name string, err error) {
	m.mu.Lock()
	m.states[name] = err
	m.mu.Unlock()
}

// waitForAPIServer polls /healthz until it answers ok or wait passes.
func waitForAPIServer(ctx context.Context, c *client.Client, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var lastLog time.Time
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Healthz(attempt)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server did not become healthy within %v: %w", wait, err)
		}
		if time.Since(lastLog) > 5*time.Second {
			slog.Info("waiting for the API server", "err", err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// handler serves /healthz (all checks, or one at /healthz/<name>), /metrics and, with
// profiling on, /debug/pprof.
func (m *Manager) handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", m.serveHealth)
	mux.HandleFunc("/healthz/", m.serveHealth)
	if m.opts.Profiling {
		mux.Handle("/debug/pprof/", profiling.Handler)
	}
	return mux
}

// checks returns each health check's result by name. A controller this replica does not run
// (it is not the leader) is healthy: standing by is its job.
func (m *Manager) checks() map[string]error {
	out := map[string]error{}
	if m.elector != nil {
		// As Kubernetes does: tolerate a renewal late by up to 20 s before failing.
		out["leaderElection"] = m.elector.Healthy(20 * time.Second)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		err := m.states[e.Name]
		if errors.Is(err, errNotStarted) {
			err = nil
		}
		out[e.Name] = err
	}
	return out
}

func (m *Manager) serveHealth(w http.ResponseWriter, r *http.Request) {
	checks := m.checks()
	names := make([]string, 0, len(checks))
	for name := range checks {
		names = append(names, name)
	}
	sort.Strings(names)
	if one := strings.TrimPrefix(r.URL.Path, "/healthz/"); one != r.URL.Path && one != "" {
		err, ok := checks[one]
		switch {
		case !ok:
			http.NotFound(w, r)
		case err != nil:
			http.Error(w, fmt.Sprintf("[-]%s failed: %v", one, err), http.StatusInternalServerError)
		default:
			fmt.Fprint(w, "ok")
		}
		return
	}
	var b strings.Builder
	failed := false
	for _, name := range names {
		if err := checks[name]; err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", name, err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch {
	case failed:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, b.String()+"healthz check failed\n")
	case r.URL.Query().Has("verbose"):
		fmt.Fprint(w, b.String()+"healthz check passed\n")
	default:
		fmt.Fprint(w, "ok")
	}
}
