package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kplane/kplane/proxy/config"
	"github.com/kplane/kplane/proxy/runner"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// DefaultFullSyncPeriod is how often a full sync happens when nothing forces one, as in
// kube-proxy's nftables and iptables modes.
const DefaultFullSyncPeriod = time.Hour

// ProxierConfig configures a Proxier.
type ProxierConfig struct {
	DataPath DataPath
	// NodeName is this proxy's node: endpoints on it are local.
	NodeName string
	// IPFamily is the family served (IPv4 when empty).
	IPFamily corev1.IPFamily
	// MinSyncPeriod: syncs are at least this far apart (0: as soon as a change comes).
	MinSyncPeriod time.Duration
	// SyncPeriod: a failed sync is retried after it; a queued change not applied within
	// twice it makes /healthz fail. Must be positive.
	SyncPeriod time.Duration
	// FullSyncPeriod: a sync after this long without a full one is full (0: DefaultFullSyncPeriod).
	FullSyncPeriod time.Duration
	// Registerer takes the proxy's metrics (nil: they are not exported).
	Registerer prometheus.Registerer
}

// Proxier is the shared part of the proxy: it is the handler of the Service, EndpointSlice and
// Node configs, keeps the change trackers, and applies the accumulated state to a DataPath at a
// bounded frequency, from one goroutine (Run).
//
// Nothing is applied before both Services and EndpointSlices have synced. Syncs are partial
// (State.Changed set) except the first one, the one after a failure or a change of this node's
// zone, and one every FullSyncPeriod.
type Proxier struct {
	dp             DataPath
	nodeName       string
	family         corev1.IPFamily
	fullSyncPeriod time.Duration
	healthTimeout  time.Duration
	services       *ServiceChangeTracker
	endpoints      *EndpointsChangeTracker
	runner         *runner.Runner
	m              *metrics
	initialized    atomic.Bool

	mu             sync.Mutex // guards the fields below
	servicesSynced bool
	slicesSynced   bool
	node           *corev1.Node
	zone           string
	needFullSync   bool
	lastUpdated    time.Time // last successful sync (or the start of Run)
	oldestQueued   time.Time // oldest Sync request no sync has picked up yet
	inFlight       time.Time // oldest request the running sync covers

	// Only the sync goroutine touches these.
	svcMap          ServicePortMap
	epMap           EndpointsMap
	lastFullSync    time.Time
	pendingChanged  map[ServicePortName]bool
	pendingTriggers []time.Time

	problemsMu sync.Mutex
	reported   map[ServicePortName]string // data path problems logged, until the port changes
}

var (
	_ config.ServiceHandler       = (*Proxier)(nil)
	_ config.EndpointSliceHandler = (*Proxier)(nil)
	_ config.NodeHandler          = (*Proxier)(nil)
)

// NewProxier makes a Proxier; Run drives it.
func NewProxier(cfg ProxierConfig) (*Proxier, error) {
	if cfg.DataPath == nil {
		return nil, errors.New("proxy: no data path")
	}
	if cfg.SyncPeriod <= 0 {
		return nil, errors.New("proxy: the sync period must be positive")
	}
	if cfg.MinSyncPeriod < 0 {
		return nil, errors.New("proxy: the min sync period must not be negative")
	}
	if cfg.IPFamily == "" {
		cfg.IPFamily = corev1.IPv4Protocol
	}
	if cfg.IPFamily != corev1.IPv4Protocol && cfg.IPFamily != corev1.IPv6Protocol {
		return nil, fmt.Errorf("proxy: unknown IP family %q", cfg.IPFamily)
	}
	if cfg.FullSyncPeriod <= 0 {
		cfg.FullSyncPeriod = DefaultFullSyncPeriod
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg, string(cfg.IPFamily))
	if err != nil {
		return nil, fmt.Errorf("proxy metrics: %w", err)
	}
	p := &Proxier{
		dp:             cfg.DataPath,
		nodeName:       cfg.NodeName,
		family:         cfg.IPFamily,
		fullSyncPeriod: cfg.FullSyncPeriod,
		healthTimeout:  2 * cfg.SyncPeriod,
		services:       NewServiceChangeTracker(cfg.IPFamily),
		endpoints:      NewEndpointsChangeTracker(cfg.IPFamily, cfg.NodeName, time.Now()),
		m:              m,
		needFullSync:   true,
		svcMap:         ServicePortMap{},
		epMap:          EndpointsMap{},
		pendingChanged: map[ServicePortName]bool{},
		reported:       map[ServicePortName]string{},
	}
	p.services.OnProblem = p.problem
	p.endpoints.OnProblem = p.problem
	// As kube-proxy's nftables mode: changes at most every MinSyncPeriod, a retry after
	// SyncPeriod, and a sync (a full one) at least every FullSyncPeriod.
	p.runner = runner.New("proxy sync", p.sync, cfg.MinSyncPeriod, cfg.SyncPeriod, cfg.FullSyncPeriod)
	return p, nil
}

// Run syncs the data path as changes come until ctx is cancelled.
func (p *Proxier) Run(ctx context.Context) {
	p.mu.Lock()
	p.lastUpdated = time.Now() // healthy from the start, as long as nothing waits too long
	p.mu.Unlock()
	p.runner.Loop(ctx)
}

// Sync requests a sync (soon, at most every MinSyncPeriod).
func (p *Proxier) Sync() {
	p.mu.Lock()
	if p.oldestQueued.IsZero() {
		p.oldestQueued = time.Now()
	}
	p.mu.Unlock()
	p.m.lastQueued.SetToCurrentTime()
	p.runner.Run()
}

// OnServiceAdd implements config.ServiceHandler.
func (p *Proxier) OnServiceAdd(s *corev1.Service) { p.OnServiceUpdate(nil, s) }

// OnServiceUpdate implements config.ServiceHandler.
func (p *Proxier) OnServiceUpdate(old, s *corev1.Service) {
	p.m.serviceChanges.Inc()
	pending := p.services.Update(old, s)
	p.m.serviceChangesPending.Set(float64(p.services.Pending()))
	if pending && p.initialized.Load() {
		p.Sync()
	}
}

// OnServiceDelete implements config.ServiceHandler.
func (p *Proxier) OnServiceDelete(s *corev1.Service) { p.OnServiceUpdate(s, nil) }

// OnServiceSynced implements config.ServiceHandler.
func (p *Proxier) OnServiceSynced() {
	p.mu.Lock()
	p.servicesSynced = true
	p.mu.Unlock()
	p.maybeInitialized()
}

// OnEndpointSliceAdd implements config.EndpointSliceHandler.
func (p *Proxier) OnEndpointSliceAdd(s *discoveryv1.EndpointSlice) { p.sliceChanged(s, false) }

// OnEndpointSliceUpdate implements config.EndpointSliceHandler.
func (p *Proxier) OnEndpointSliceUpdate(_, s *discoveryv1.EndpointSlice) { p.sliceChanged(s, false) }

// OnEndpointSliceDelete implements config.EndpointSliceHandler.
func (p *Proxier) OnEndpointSliceDelete(s *discoveryv1.EndpointSlice) { p.sliceChanged(s, true) }

// OnEndpointSliceSynced implements config.EndpointSliceHandler.
func (p *Proxier) OnEndpointSliceSynced() {
	p.mu.Lock()
	p.slicesSynced = true
	p.mu.Unlock()
	p.maybeInitialized()
}

func (p *Proxier) sliceChanged(s *discoveryv1.EndpointSlice, removed bool) {
	if s.AddressType != addressTypeOf(p.family) {
		return
	}
	p.m.endpointChanges.Inc()
	changed := p.endpoints.Update(s, removed)
	p.m.endpointChangesPending.Set(float64(p.endpoints.Pending()))
	if changed && p.initialized.Load() {
		p.Sync()
	}
}

// maybeInitialized starts syncing once both Services and EndpointSlices have synced.
func (p *Proxier) maybeInitialized() {
	p.mu.Lock()
	ready := p.servicesSynced && p.slicesSynced
	p.mu.Unlock()
	if ready && !p.initialized.Swap(true) {
		slog.Info("proxy: services and endpoint slices synced; programming the data path", "ipFamily", p.family, "node", p.nodeName)
		p.Sync()
	}
}

// OnNodeAdd implements config.NodeHandler.
func (p *Proxier) OnNodeAdd(n *corev1.Node) { p.OnNodeUpdate(nil, n) }

// OnNodeUpdate implements config.NodeHandler: a change of this node's zone makes the next sync
// full, since topology hints choose endpoints by zone.
func (p *Proxier) OnNodeUpdate(_, n *corev1.Node) {
	zone := n.Labels[corev1.LabelTopologyZone]
	p.mu.Lock()
	p.node = n
	changed := zone != p.zone
	if changed {
		p.zone = zone
		p.needFullSync = true
	}
	p.mu.Unlock()
	if changed && p.initialized.Load() {
		slog.Info("proxy: this node's zone changed", "node", n.Name, "zone", zone)
		p.Sync()
	}
}

// OnNodeDelete implements config.NodeHandler.
func (p *Proxier) OnNodeDelete(*corev1.Node) {
	p.mu.Lock()
	p.node = nil
	p.mu.Unlock()
}

// OnNodeSynced implements config.NodeHandler.
func (p *Proxier) OnNodeSynced() {}

// sync applies the accumulated changes to the data path; the runner calls it.
func (p *Proxier) sync(ctx context.Context) error {
	if !p.initialized.Load() {
		return nil
	}
	now := time.Now()
	p.mu.Lock()
	full := p.needFullSync || now.Sub(p.lastFullSync) >= p.fullSyncPeriod
	p.needFullSync = false
	zone := p.zone
	p.inFlight, p.oldestQueued = p.oldestQueued, time.Time{}
	p.mu.Unlock()

	start := time.Now()
	svcChanged := p.services.Apply(p.svcMap)
	epUpdate := p.endpoints.Apply(p.epMap)
	p.m.serviceChangesPending.Set(float64(p.services.Pending()))
	p.m.endpointChangesPending.Set(float64(p.endpoints.Pending()))
	maps.Copy(p.pendingChanged, svcChanged)
	maps.Copy(p.pendingChanged, epUpdate.Changed)
	for _, times := range epUpdate.TriggerTimes {
		p.pendingTriggers = append(p.pendingTriggers, times...)
	}
	p.forgetProblems(p.pendingChanged)
	for name := range epUpdate.Changed {
		if _, ok := p.svcMap[name]; !ok && len(p.epMap[name]) > 0 {
			p.report(name, "endpoints-without-service", errors.New("EndpointSlices name a service (port) this proxy does not know"))
		}
	}
	state := State{Services: p.svcMap, Endpoints: p.epMap, NodeName: p.nodeName, Zone: zone, Problems: p.report}
	if !full {
		state.Changed = p.pendingChanged
	}
	for name := range p.pendingChanged {
		if name.Protocol == corev1.ProtocolUDP {
			if state.UDPChanged == nil {
				state.UDPChanged = map[ServicePortName]bool{}
			}
			state.UDPChanged[name] = true
		}
	}

	err := p.apply(ctx, state)
	elapsed := time.Since(start).Seconds()
	p.m.syncDuration.Observe(elapsed)
	if full {
		p.m.syncFullDuration.Observe(elapsed)
	} else {
		p.m.syncPartialDuration.Observe(elapsed)
	}
	if err != nil {
		p.mu.Lock()
		p.needFullSync = true
		if p.oldestQueued.IsZero() || (!p.inFlight.IsZero() && p.inFlight.Before(p.oldestQueued)) {
			p.oldestQueued = p.inFlight
		}
		p.inFlight = time.Time{}
		p.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.m.syncFailures.Inc()
		slog.Error("proxy: data path sync failed; retrying with a full sync", "full", full, "changed", len(p.pendingChanged), "err", err)
		return err
	}
	done := time.Now()
	if full {
		p.lastFullSync = now
	}
	for _, at := range p.pendingTriggers {
		p.m.networkProgramming.Observe(done.Sub(at).Seconds())
	}
	slog.Debug("proxy: data path synced", "full", full, "changed", len(p.pendingChanged), "services", len(p.svcMap), "seconds", elapsed)
	p.pendingTriggers = p.pendingTriggers[:0]
	clear(p.pendingChanged)
	p.mu.Lock()
	p.lastUpdated = done
	p.inFlight = time.Time{}
	p.mu.Unlock()
	p.m.lastSynced.Set(float64(done.UnixNano()) / 1e9)
	return nil
}

// apply calls the data path; a panic in it is a failed sync (the next one is full).
func (p *Proxier) apply(ctx context.Context, s State) (err error) {
	defer func() {
		if r := recover(); r != nil {
			slog.Error("proxy: data path panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("data path panicked: %v", r)
		}
	}()
	return p.dp.Apply(ctx, s)
}

// problem logs and counts a problem found by a tracker (which reports each once per change).
func (p *Proxier) problem(pr Problem) {
	slog.Warn("proxy: cannot serve as asked", "subject", pr.Subject, "reason", pr.Reason, "err", pr.Err)
	p.m.problems.WithLabelValues(pr.Reason).Inc()
}

// report logs and counts a service port's problem once, until the port changes.
func (p *Proxier) report(name ServicePortName, reason string, err error) {
	msg := reason
	if err != nil {
		msg += ": " + err.Error()
	}
	p.problemsMu.Lock()
	seen := p.reported[name] == msg
	p.reported[name] = msg
	p.problemsMu.Unlock()
	if !seen {
		p.problem(Problem{Subject: name.String(), Reason: reason, Err: err})
	}
}

func (p *Proxier) forgetProblems(changed map[ServicePortName]bool) {
	p.problemsMu.Lock()
	defer p.problemsMu.Unlock()
	for name := range changed {
		delete(p.reported, name)
	}
}

// Health is the proxy's health, as /healthz and /livez show it (kube-proxy's JSON).
type Health struct {
	LastUpdated  time.Time `json:"lastUpdated"`
	CurrentTime  time.Time `json:"currentTime"`
	NodeEligible *bool     `json:"nodeEligible,omitempty"`
	Healthy      bool      `json:"healthy"`
	// Status has the health of each IP family served.
	Status map[corev1.IPFamily]FamilyHealth `json:"status,omitempty"`
}

// FamilyHealth is the health of one IP family's proxying.
type FamilyHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// ToBeDeletedTaint marks a node the cluster autoscaler is about to delete; load balancers
// should drain it, so /healthz fails on it.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// Health reports whether queued changes are applied in time: the proxy is unhealthy when a
// change has waited longer than twice the sync period (a sync failing or stuck). NodeEligible
// is left nil; see NodeEligible.
func (p *Proxier) Health() Health {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	oldest := p.oldestQueued
	if !p.inFlight.IsZero() && (oldest.IsZero() || p.inFlight.Before(oldest)) {
		oldest = p.inFlight
	}
	healthy := oldest.IsZero() || now.Sub(oldest) < p.healthTimeout
	return Health{
		LastUpdated: p.lastUpdated, CurrentTime: now, Healthy: healthy,
		Status: map[corev1.IPFamily]FamilyHealth{p.family: {LastUpdated: p.lastUpdated, Healthy: healthy}},
	}
}

// NodeEligible reports whether this node should get load-balanced traffic: its Node exists,
// is not being deleted and is not about to be removed by the cluster autoscaler.
func (p *Proxier) NodeEligible() bool {
	p.mu.Lock()
	n := p.node
	p.mu.Unlock()
	if n == nil || n.DeletionTimestamp != nil {
		return false
	}
	return !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ToBeDeletedTaint })
}

// IPFamily is the family the proxier serves.
func (p *Proxier) IPFamily() corev1.IPFamily { return p.family }
