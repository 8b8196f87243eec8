// Package userspace is the proxy's data path that needs no privileges: it listens on each
// service port's addresses (ClusterIP, external IPs, load-balancer ingress IPs in VIP mode,
// NodePorts) with ordinary sockets and forwards every TCP connection and UDP session to an
// endpoint it chooses itself.
//
// Without root, ClusterIPs and load-balancer IPs from 127.0.0.0/8 work on Linux with no setup,
// since the kernel routes all of that range to the loopback interface; other addresses must be
// the node's.
//
// TCP data moves between the two sockets in large reads and writes from pooled buffers sized to
// the traffic (see copyStream): Go code never touches the bytes, and idle connections hold no
// buffer.
package userspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proxy"
)

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("userspace proxier is closed")

// Proxier is the userspace data path: a proxy.DataPath.
type Proxier struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics

	// ctx lives as long as the Proxier, not any one call: it ends on Close, and every goroutine
	// the Proxier starts (accept loops, TCP relays, UDP sessions, dials) ends with it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu serialises Apply and Close, and guards what follows.
	mu        sync.Mutex
	closed    bool
	services  map[proxy.ServicePortName]*servicePort
	listeners map[listenerKey]*boundListener
	// failing remembers the listeners that could not be opened, so that each failure is logged
	// once rather than at every sync that retries it.
	failing map[listenerKey]listenFailure
	// socketsOf indexes listeners and failing by the service port that owns each entry, so
	// that a partial sync looks at the sockets of the changed service ports only, whatever
	// the number of services (see syncListeners).
	socketsOf map[proxy.ServicePortName]map[listenerKey]bool
	// problems is what the Apply under way found wrong with single service ports.
	problems problems
}

var _ proxy.DataPath = (*Proxier)(nil)

// New returns a Proxier with no service ports. Call Close (or Run) to stop it.
func New(opts Options) *Proxier {
	opts = opts.withDefaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		opts.Logger.Warn("userspace proxy: some metrics are not registered", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxier{
		opts:      opts,
		log:       opts.Logger,
		metrics:   m,
		ctx:       ctx,
		cancel:    cancel,
		services:  make(map[proxy.ServicePortName]*servicePort),
		listeners: make(map[listenerKey]*boundListener),
		failing:   make(map[listenerKey]listenFailure),
		socketsOf: make(map[proxy.ServicePortName]map[listenerKey]bool),
	}
}

// Apply makes the listeners and endpoint choices match s: for the service ports in s.Changed,
// or for all of them when s.Changed is nil. Listeners that cannot be opened (a port in use, an
// address not on this node) and protocols the proxy cannot serve are not errors: they are
// counted, passed to s.Report (one report per service port, at every Apply that covers it) or
// logged when s has no Problems callback, and the rest of the state is applied. Full syncs
// retry the listeners that failed.
func (p *Proxier) Apply(ctx context.Context, s proxy.State) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.problems = problems{reporting: s.Problems != nil}
	p.apply(ctx, s)
	found := p.problems
	p.problems = problems{}
	p.mu.Unlock()
	// Outside the lock: the callback is the proxy's code, which may take its own locks.
	found.reportTo(s)
	return nil
}

// apply does Apply's work. Callers hold p.mu.
func (p *Proxier) apply(ctx context.Context, s proxy.State) {
	todo := make(map[proxy.ServicePortName]bool)
	if s.Changed == nil {
		for name := range s.Services {
			todo[name] = true
		}
		for name := range p.services {
			todo[name] = true
		}
	} else {
		maps.Copy(todo, s.Changed)
	}

	for _, name := range sortedNames(todo) {
		spec := s.Services[name]
		if spec == nil {
			delete(p.services, name)
			continue
		}
		sp := p.services[name]
		if sp == nil {
			sp = newServicePort(name)
			p.services[name] = sp
		}
		previous := sp.specCopy().Protocol
		sp.update(spec, s.Endpoints[name], s.NodeName, s.Zone)
		if !supported(spec.Protocol) {
			p.problems.add(name, reasonUnsupportedProtocol, fmt.Errorf("protocol %q is not supported by the userspace proxy", spec.Protocol))
			if previous != spec.Protocol {
				p.log.Log(ctx, p.problems.logLevel(), "userspace proxy: protocol not supported, service port not served",
					"servicePort", name.String(), "protocol", spec.Protocol)
				p.metrics.skipped.WithLabelValues(skipUnsupportedProtocol).Inc()
			}
		}
	}
	p.syncListeners(todo)
}

// Run blocks until ctx ends (or Close is called), then closes the Proxier.
func (p *Proxier) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-p.ctx.Done():
	}
	return p.Close()
}

// Close stops listening, ends every forwarded connection and UDP session, and returns once
// every goroutine of the Proxier has ended. It may be called more than once.
func (p *Proxier) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.cancel()
		for key, l := range p.listeners {
			p.closeListener(key, l)
		}
		clear(p.services)
		clear(p.failing)
		clear(p.socketsOf)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// supported reports whether the proxy can serve a protocol.
func supported(protocol corev1.Protocol) bool {
	return protocol == corev1.ProtocolTCP || protocol == corev1.ProtocolUDP
}

// sortedNames returns the names in a fixed order, so that when two service ports claim one
// address the same one wins at every sync.
func sortedNames[V any](names map[proxy.ServicePortName]V) []proxy.ServicePortName {
	return slices.SortedFunc(maps.Keys(names), func(a, b proxy.ServicePortName) int {
		return cmp.Or(
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Port, b.Port),
			cmp.Compare(a.Protocol, b.Protocol),
		)
	})
}
