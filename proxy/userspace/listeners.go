package userspace

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/kplane/kplane/proxy"
)

// listenerKey is one socket the proxy listens on.
type listenerKey struct {
	protocol corev1.Protocol
	// addr is the zero Addr for a NodePort on every address of the node.
	addr netip.Addr
	port int
}

func (k listenerKey) hostPort() string {
	if !k.addr.IsValid() {
		return ":" + strconv.Itoa(k.port)
	}
	return netip.AddrPortFrom(k.addr, uint16(k.port)).String()
}

func (k listenerKey) String() string { return string(k.protocol) + "/" + k.hostPort() }

func compareKeys(a, b listenerKey) int {
	return cmp.Or(cmp.Compare(a.protocol, b.protocol), a.addr.Compare(b.addr), cmp.Compare(a.port, b.port))
}

// route is where a listener's traffic goes: a service port, and whether the traffic counts as
// external (NodePort, external and load-balancer IPs), which decides the traffic policy.
type route struct {
	sp       *servicePort
	external bool
}

// boundListener is an open listener; close closes its socket, after which the goroutine
// serving it ends on its own.
type boundListener struct {
	route route
	close func()
}

type listenFailure struct {
	owner proxy.ServicePortName
	err   string
}

// listenerKeys returns the sockets a service port needs.
func (p *Proxier) listenerKeys(spec proxy.ServicePort) map[listenerKey]bool {
	if !supported(spec.Protocol) {
		return nil
	}
	keys := make(map[listenerKey]bool) // value: external
	add := func(addr netip.Addr, port int, external bool) {
		if port > 0 && port <= 65535 {
			keys[listenerKey{protocol: spec.Protocol, addr: addr.Unmap(), port: port}] = external
		}
	}
	if spec.ClusterIP.IsValid() {
		add(spec.ClusterIP, spec.Port, false)
	}
	for _, ip := range spec.ExternalIPs {
		add(ip, spec.Port, true)
	}
	for _, ip := range spec.LoadBalancerIPs {
		add(ip, spec.Port, true)
	}
	if spec.NodePort > 0 {
		if len(p.opts.NodeAddresses) == 0 {
			add(netip.Addr{}, spec.NodePort, true)
		}
		for _, ip := range p.opts.NodeAddresses {
			add(ip, spec.NodePort, true)
		}
	}
	return keys
}

// syncListeners makes the listeners of the named service ports match their specs: it closes
// the sockets they no longer need (first, so that an address moving from one service port to
// another within one sync is free again), then opens the missing ones. Callers hold p.mu.
func (p *Proxier) syncListeners(names map[proxy.ServicePortName]bool) {
	desired := make(map[listenerKey]route)
	wanted := make(map[listenerKey]map[proxy.ServicePortName]bool)
	for _, name := range sortedNames(names) {
		sp := p.services[name]
		if sp == nil {
			continue
		}
		for key, external := range p.listenerKeys(sp.specCopy()) {
			if wanted[key] == nil {
				wanted[key] = make(map[proxy.ServicePortName]bool)
			}
			wanted[key][name] = true
			if other, taken := desired[key]; taken {
				p.listenFailed(key, name, fmt.Errorf("%w: also wanted by %s", errAddressTaken, other.sp.name))
				continue
			}
			desired[key] = route{sp: sp, external: external}
		}
	}

	for name := range names {
		for key := range p.socketsOf[name] {
			if l, open := p.listeners[key]; open && l.route.sp.name == name && desired[key] != l.route {
				p.closeListener(key, l)
			}
			if f, failed := p.failing[key]; failed && f.owner == name && !wanted[key][name] {
				p.clearFailure(key)
			}
		}
	}

	for _, key := range slices.SortedFunc(maps.Keys(desired), compareKeys) {
		r := desired[key]
		if l, open := p.listeners[key]; open {
			if l.route != r {
				p.listenFailed(key, r.sp.name, fmt.Errorf("%w: served for %s", errAddressTaken, l.route.sp.name))
			}
			continue
		}
		p.openListener(key, r)
	}
}

func (p *Proxier) openListener(key listenerKey, r route) {
	var (
		l   *boundListener
		err error
	)
	switch key.protocol {
	case corev1.ProtocolTCP:
		l, err = p.listenTCP(key, r)
	case corev1.ProtocolUDP:
		l, err = p.listenUDP(key, r)
	default:
		err = fmt.Errorf("protocol %s not supported", key.protocol)
	}
	if err != nil {
		p.listenFailed(key, r.sp.name, err)
		return
	}
	p.listeners[key] = l
	p.indexSocket(r.sp.name, key)
	p.metrics.listeners.WithLabelValues(string(key.protocol)).Inc()
	if f, failed := p.failing[key]; failed {
		p.clearFailure(key)
		p.log.Info("userspace proxy: listening now", "servicePort", f.owner.String(), "address", key.String())
	} else {
		p.log.Debug("userspace proxy: listening", "servicePort", r.sp.name.String(), "address", key.String())
	}
}

func (p *Proxier) closeListener(key listenerKey, l *boundListener) {
	l.close()
	delete(p.listeners, key)
	p.unindexSocket(l.route.sp.name, key)
	p.metrics.listeners.WithLabelValues(string(key.protocol)).Dec()
	p.log.Debug("userspace proxy: stopped listening", "servicePort", l.route.sp.name.String(), "address", key.String())
}

// listenFailed counts a failure to listen and logs it unless the same failure was logged
// already: full syncs retry failed listeners, and each retry would otherwise log again.
func (p *Proxier) listenFailed(key listenerKey, owner proxy.ServicePortName, err error) {
	p.metrics.listenFailure.WithLabelValues(string(key.protocol)).Inc()
	p.problems.add(owner, listenReason(err), fmt.Errorf("cannot listen on %s: %w", key, err))
	f := listenFailure{owner: owner, err: err.Error()}
	previous, failed := p.failing[key]
	if previous == f {
		return
	}
	p.failing[key] = f
	p.indexSocket(owner, key)
	if failed {
		p.unindexSocket(previous.owner, key)
	}
	p.log.Log(context.Background(), p.problems.logLevel(),
		"userspace proxy: cannot listen, service port not served on this address (retried at full syncs)",
		"servicePort", owner.String(), "address", key.String(), "err", err)
}

// clearFailure forgets that key could not be opened.
func (p *Proxier) clearFailure(key listenerKey) {
	f := p.failing[key]
	delete(p.failing, key)
	p.unindexSocket(f.owner, key)
}

// indexSocket records that name owns key's listener or failure. Callers hold p.mu.
func (p *Proxier) indexSocket(name proxy.ServicePortName, key listenerKey) {
	keys := p.socketsOf[name]
	if keys == nil {
		keys = make(map[listenerKey]bool)
		p.socketsOf[name] = keys
	}
	keys[key] = true
}

// unindexSocket drops key from name's sockets unless name still owns its listener or its
// failure (one service port may hold a listener that another one failed to get). Callers hold
// p.mu.
func (p *Proxier) unindexSocket(name proxy.ServicePortName, key listenerKey) {
	if l, open := p.listeners[key]; open && l.route.sp.name == name {
		return
	}
	if f, failed := p.failing[key]; failed && f.owner == name {
		return
	}
	delete(p.socketsOf[name], key)
	if len(p.socketsOf[name]) == 0 {
		delete(p.socketsOf, name)
	}
}
