// Package nftables is kplane's nftables data path: a proxy.DataPath that programs one
// nftables table, "kplane" (family ip, IPv4 only), through sigs.k8s.io/knftables and the nft
// binary.
//
// Packets to a ClusterIP, external IP or load-balancer IP and port are looked up in the
// service-ips verdict map, NodePorts in service-nodeports, from the nat prerouting and output
// hooks. Most service ports have no chain of their own: the verdict jumps to a chain shared
// by all service ports with as many endpoints (pick-tcp-3), which DNATs through the
// endpoints-<protocol> map, keyed by destination address, port and a random number below 3,
// where each service port lists its endpoints (for NodePorts: nodeport-endpoints-<protocol>,
// keyed by port). A sync thus mostly adds and deletes map elements. ClientIP affinity and
// externalTrafficPolicy Local with external access need rules of their own: those service
// ports get chains as kube-proxy's nftables mode builds them (an anonymous numgen map; a
// timeout set and a chain per endpoint for affinity; short-circuits for this node's and its
// pods' traffic). External traffic under the Cluster policy, ClusterIP traffic from outside
// ClusterCIDR (or all of it with MasqueradeAll) and hairpin connections are masqueraded in
// postrouting. Service ports without usable endpoints are in the no-endpoint-* maps instead,
// looked up from the filter hooks: rejected (TCP reset, ICMP port unreachable), or dropped
// when only a Local policy leaves them without endpoints.
//
// The first sync (and the first after a failure or Cleanup) recreates the table in one
// transaction; later full syncs (State.Changed nil) rewrite every chain, map and set in one
// transaction, keeping the affinity sets' contents; a partial sync sends only the elements
// and chains of the changed service ports. Chains no longer used are flushed in the sync and
// deleted in a second transaction. A partial sync that only changes which endpoints ClusterIP
// ports pick, or how many (the common cases: pods replaced, an endpoint turning ready or not
// ready), deletes nothing: it inserts one rule per port at the head of service-overrides,
// DNATing through an inline map to the new endpoints and shadowing the maps, and adds the
// shared pick chain the new count needs, because a transaction that deletes anything waits
// for an RCU grace period in the kernel (10-20 ms here, against ~1 ms of work). The maps catch
// up, the overrides are flushed and the shared chains no longer used are deleted in
// transactions of their own 100 ms later. After a sync, UDP conntrack entries DNATed to
// addresses that no longer serve their service are deleted, through netlink.
package nftables

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/knftables"

	"github.com/kplane/kplane/proxy"
)

// ErrUnavailable wraps New's error when nftables cannot be used here (no nft binary, no
// permission, a kernel without the features the rules need): the caller may fall back to
// the userspace proxier.
var ErrUnavailable = errors.New("nftables proxier unavailable")

// Options configure a Proxier.
type Options struct {
	// NodePortAddresses are the IPv4 addresses accepting NodePort traffic (kube-proxy's
	// --nodeport-addresses); empty: every local address except 127.0.0.0/8.
	NodePortAddresses []netip.Addr
	// MasqueradeAll masquerades all traffic to ClusterIPs (--masquerade-all).
	MasqueradeAll bool
	// ClusterCIDR is the pods' IPv4 range (--cluster-cidr): ClusterIP traffic from outside
	// it is masqueraded, and traffic from inside it to an external IP of an
	// externalTrafficPolicy: Local service may go to any endpoint. Zero: unknown.
	ClusterCIDR netip.Prefix
	// MasqueradeMark is the one-bit packet mark that asks for masquerading; 0 means 0x4000
	// (kube-proxy's --iptables-masquerade-bit=14).
	MasqueradeMark uint32
	// NetNS, when set, is the path of the network namespace to program (for example
	// /run/netns/node1) instead of the proxy's own.
	NetNS string
	// Registerer receives the proxier's metrics; nil: none.
	Registerer prometheus.Registerer
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// Proxier is the nftables data path; it implements proxy.DataPath.
type Proxier struct {
	mu      sync.Mutex
	netns   string
	log     *slog.Logger
	nft     knftables.Interface
	ct      conntracker
	m       *metrics
	layout  *layout
	planner planner

	// What the last successful sync programmed, per service port (skipped ones too), and
	// how many service ports use each shared chain.
	records    map[proxy.ServicePortName]*plan
	sharedRefs map[string]int
	counts     counts
	elems      *elements
	// stale chains: flushed, waiting to be deleted.
	stale map[string]bool
	// idleShared are shared chains no service port uses since an add-only sync: service-ips
	// may still jump to them until the maps catch up, which flushes them.
	idleShared map[string]bool
	// needFull: the next sync is a full one (first, after a failure or a Cleanup, after
	// the node's name or zone changed). recreated: the table was recreated since the
	// last failure or Cleanup, so what it holds is known.
	needFull, recreated bool
	node, zone          string

	// overrides counts the rules in overridesChain; while there are any, the elements
	// they stand in for are not yet in the maps, and catchUp is scheduled to write them.
	overrides int
	catchUp   *time.Timer
	// ctx is the last Apply's, for catchUp: the runner's, which lives as long as the proxy.
	// Once it has ended the catch-up is skipped; the override rules still route correctly.
	ctx context.Context
}

// Partial syncs that only change endpoints add rules instead of replacing map elements,
// because on many kernels any nftables transaction that deletes something waits for an RCU
// grace period (~10-20 ms, against ~1 ms of work), while additions do not. The maps catch up
// in a transaction of their own, catchUpDelay after the first such sync (and at the latest
// when maxOverrides rules stand in for them). The delay is short, so that the catch-up
// (which holds the proxier like a sync) falls between syncs paced by --iptables-min-sync-period
// (1 s by default) instead of delaying the next one.
const (
	catchUpDelay = 100 * time.Millisecond
	maxOverrides = 64
)

var _ proxy.DataPath = (*Proxier)(nil)

// New returns a Proxier after checking that nftables works here, for the features the rules
// use; the error wraps ErrUnavailable when it does not. It changes nothing until Apply.
func New(opts Options) (*Proxier, error) {
	var p *Proxier
	err := inNetNS(opts.NetNS, func() error {
		nft, err := knftables.New(knftables.IPv4Family, TableName)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		// Metrics are registered once nftables proved usable: a caller falling back to
		// userspace keeps a clean registry.
		unregistered := opts
		unregistered.Registerer = nil
		if p, err = newProxier(unregistered, nft, netlinkConntrack{}); err != nil {
			return err
		}
		probe := []*proxy.ServicePort{
			{Port: 80, Protocol: "TCP", NodePort: 30000, AffinityTimeout: time.Minute, ExternalLocal: true},
			{Port: 80, Protocol: "UDP", NodePort: 30000, ExternalIPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}},
		}
		if err := nft.Check(context.Background(), p.probe(probe)); err != nil {
			return fmt.Errorf("%w: the kernel or nft rejects the rules this proxier needs: %w", ErrUnavailable, err)
		}
		// SCTP NAT may be missing from a kernel that has the rest.
		sctp := append(probe, &proxy.ServicePort{Port: 80, Protocol: "SCTP", NodePort: 30001})
		if err := nft.Check(context.Background(), p.probe(sctp)); err != nil {
			p.planner.noSCTP = true
			p.log.Warn("the kernel or nft cannot NAT SCTP: SCTP service ports will not be served", "err", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if opts.Registerer != nil {
		if p.m, err = newMetrics(opts.Registerer); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return p, nil
}

func newProxier(opts Options, nft knftables.Interface, ct conntracker) (*Proxier, error) {
	mark := opts.MasqueradeMark
	if mark == 0 {
		mark = 0x4000
	}
	if bits.OnesCount32(mark) != 1 {
		return nil, fmt.Errorf("masquerade mark %#x: must have exactly one bit set", mark)
	}
	if opts.ClusterCIDR.IsValid() && !opts.ClusterCIDR.Addr().Is4() {
		return nil, fmt.Errorf("cluster CIDR %s: only IPv4 is supported", opts.ClusterCIDR)
	}
	var nodeIPs []netip.Addr
	for _, ip := range opts.NodePortAddresses {
		if ip = ip.Unmap(); !ip.Is4() {
			return nil, fmt.Errorf("NodePort address %s: only IPv4 is supported", ip)
		}
		if ip.IsLoopback() {
			return nil, fmt.Errorf("NodePort address %s: loopback NodePorts are not supported", ip)
		}
		nodeIPs = append(nodeIPs, ip)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	markStr := fmt.Sprintf("%#08x", mark)
	l := newLayout(markStr, opts.MasqueradeAll, opts.ClusterCIDR.Masked(), nodeIPs)
	return &Proxier{
		netns:      opts.NetNS,
		log:        logger.With("component", "proxy-nftables"),
		nft:        nft,
		ct:         ct,
		m:          m,
		layout:     l,
		planner:    planner{masqRule: "mark set mark or " + markStr, clusterCIDR: opts.ClusterCIDR.Masked()},
		records:    map[proxy.ServicePortName]*plan{},
		sharedRefs: map[string]int{},
		elems:      newElements(),
		stale:      map[string]bool{},
		idleShared: map[string]bool{},
		needFull:   true,
	}, nil
}

// Apply programs s: a full sync when s.Changed is nil (or the last Apply failed), else only
// the changed service ports. See proxy.DataPath.
func (p *Proxier) Apply(ctx context.Context, s proxy.State) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx = ctx
	return inNetNS(p.netns, func() error { return p.apply(ctx, s) })
}

// Cleanup removes the table (and with it every rule of this proxier); the next Apply is a
// full sync. It is not an error when there is no table.
func (p *Proxier) Cleanup(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset()
	return inNetNS(p.netns, func() error {
		tx := p.nft.NewTransaction()
		tx.Delete(&knftables.Table{})
		if err := p.nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
			p.m.cleanupFailures.Inc()
			return fmt.Errorf("deleting nftables table %s: %w", TableName, err)
		}
		return nil
	})
}

func (p *Proxier) reset() {
	p.stopCatchUp()
	p.records = map[proxy.ServicePortName]*plan{}
	p.sharedRefs = map[string]int{}
	p.counts = counts{}
	p.elems = newElements()
	p.stale = map[string]bool{}
	p.idleShared = map[string]bool{}
	p.needFull, p.recreated = true, false
}

func (p *Proxier) apply(ctx context.Context, s proxy.State) error {
	start := time.Now()
	p.planner.nodeName, p.planner.zone = s.NodeName, s.Zone
	full := s.Changed == nil || p.needFull || s.NodeName != p.node || s.Zone != p.zone
	var flows *staleFlows
	var err error
	if full {
		flows, err = p.syncAll(ctx, s)
	} else {
		flows, err = p.syncChanged(ctx, s)
	}
	if err != nil {
		// What the kernel holds is uncertain now: start over with a full sync.
		p.reset()
		p.m.syncFailures.Inc()
		p.log.Error("nftables sync failed", "full", full, "err", err)
		return fmt.Errorf("nftables sync: %w", err)
	}
	p.needFull, p.node, p.zone = false, s.NodeName, s.Zone
	p.log.Debug("nftables synced", "full", full, "servicePorts", len(s.Services), "changed", len(s.Changed), "took", time.Since(start))
	p.deleteStale(ctx)
	p.counts.export(p.m)
	if flows != nil && !flows.empty() {
		p.cleanConntrack(flows)
	}
	return nil
}

// syncAll rewrites the whole table in one transaction.
func (p *Proxier) syncAll(ctx context.Context, s proxy.State) (*staleFlows, error) {
	p.stopCatchUp() // the maps are rewritten whole, overridesChain flushed
	names := slices.SortedFunc(maps.Keys(s.Services), compareNames)
	plans := make(map[proxy.ServicePortName]*plan, len(names))
	wanted := map[string]bool{}
	sharedRefs, shared := map[string]int{}, map[string]chain{}
	for _, n := range names {
		pl := p.planner.plan(n, s.Services[n], s.Endpoints[n])
		p.report(n, p.records[n], pl)
		plans[n] = pl
		for _, c := range pl.chains {
			wanted[c.name] = true
		}
		for _, set := range pl.sets {
			wanted[set.name] = true
		}
		for _, c := range pl.shared {
			wanted[c.name] = true
			sharedRefs[c.name]++
			shared[c.name] = c
		}
	}
	sharedNames := slices.Sorted(maps.Keys(shared))

	tx := p.nft.NewTransaction()
	table := &knftables.Table{Comment: knftables.PtrTo("kplane service proxy")}
	tx.Add(table)
	if !p.recreated {
		// Nothing is known of what the table holds (first sync, or after a failure or a
		// Cleanup): start from an empty one, in the same transaction. Affinity is
		// forgotten then.
		tx.Delete(&knftables.Table{})
		tx.Add(table)
	}
	for _, bc := range p.layout.baseChains {
		tx.Add(&knftables.Chain{Name: bc.name, Type: &bc.typ, Hook: &bc.hook, Priority: &bc.priority})
		tx.Flush(&knftables.Chain{Name: bc.name})
	}
	for _, c := range p.layout.chains {
		addChain(tx, c.name)
	}
	for _, name := range sharedNames {
		addChain(tx, name)
	}
	for _, n := range names {
		for _, c := range plans[n].chains {
			addChain(tx, c.name)
		}
	}
	// What the last sync made and this one does not want: chains are flushed now and
	// deleted after, affinity sets deleted (or recreated, when their timeout changed).
	stale := map[string]bool{}
	if p.recreated {
		var old []string
		for _, n := range slices.SortedFunc(maps.Keys(p.records), compareNames) {
			for _, c := range p.records[n].chains {
				old = append(old, c.name)
			}
		}
		old = append(old, slices.Sorted(maps.Keys(p.sharedRefs))...)
		old = append(old, slices.Sorted(maps.Keys(p.idleShared))...)
		for _, name := range old {
			if !wanted[name] {
				tx.Flush(&knftables.Chain{Name: name})
				stale[name] = true
			}
		}
		for name := range p.stale {
			if !wanted[name] {
				stale[name] = true
			}
		}
		for _, n := range slices.SortedFunc(maps.Keys(p.records), compareNames) {
			deleteChangedSets(tx, p.records[n], plans[n])
		}
	}
	for _, set := range p.layout.sets {
		tx.Add(set)
		tx.Flush(set)
	}
	for _, m := range p.layout.maps {
		tx.Add(m)
		tx.Flush(m)
	}
	for _, n := range names {
		addSets(tx, plans[n])
	}
	for _, bc := range p.layout.baseChains {
		addRules(tx, bc.name, bc.rules)
	}
	for _, c := range p.layout.chains {
		addRules(tx, c.name, c.rules)
	}
	for _, name := range sharedNames {
		addRules(tx, name, shared[name].rules)
	}
	for _, n := range names {
		for _, c := range plans[n].chains {
			addRules(tx, c.name, c.rules)
		}
	}
	for _, el := range p.layout.elements {
		tx.Add(el)
	}
	p.elems = newElements()
	for _, n := range names {
		p.elems.set(n, nil, plans[n].elems)
	}
	p.elems.addAll(tx)

	if err := p.nft.Run(ctx, tx); err != nil {
		return nil, err
	}

	flows := newStaleFlows()
	for _, n := range names {
		if u := plans[n].udp; u != nil {
			flows.add(u, u.serving)
		}
	}
	for n, old := range p.records {
		if _, ok := plans[n]; !ok && old.udp != nil {
			flows.add(old.udp, nil)
		}
	}
	p.records, p.sharedRefs, p.stale, p.recreated = plans, sharedRefs, stale, true
	clear(p.idleShared)
	p.counts = counts{}
	for _, pl := range plans {
		p.counts.add(pl.status, 1)
	}
	return flows, nil
}

// syncChanged rewrites the changed service ports' chains and elements only.
func (p *Proxier) syncChanged(ctx context.Context, s proxy.State) (*staleFlows, error) {
	names := slices.SortedFunc(maps.Keys(s.Changed), compareNames)
	plans := make(map[proxy.ServicePortName]*plan, len(names))
	for _, n := range names {
		if svc := s.Services[n]; svc != nil {
			plans[n] = p.planner.plan(n, svc, s.Endpoints[n])
		}
		p.report(n, p.records[n], plans[n])
	}

	// A change that only changes which endpoints ClusterIP ports pick goes through
	// override rules, and deletes nothing.
	overrideRules, addOnly := p.overrideChanges(names, plans, s)

	// Shared chains: created when first used, deleted when no longer used (after the maps
	// caught up, for an add-only sync).
	refs, shared := map[string]int{}, map[string]chain{}
	for _, n := range names {
		for _, c := range p.records[n].sharedOrNil() {
			refs[c.name]--
		}
		for _, c := range plans[n].sharedOrNil() {
			refs[c.name]++
			shared[c.name] = c
		}
	}
	var newShared []chain
	var stale []string
	tx := p.nft.NewTransaction()
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		before, after := p.sharedRefs[name], p.sharedRefs[name]+refs[name]
		switch {
		case before == 0 && after > 0 && p.idleShared[name]:
			delete(p.idleShared, name) // its rules are still there
		case before == 0 && after > 0:
			addChain(tx, name)
			delete(p.stale, name)
			newShared = append(newShared, shared[name])
		case before > 0 && after == 0 && addOnly:
			p.idleShared[name] = true
		case before > 0 && after == 0:
			tx.Flush(&knftables.Chain{Name: name})
			stale = append(stale, name)
		}
	}
	for _, n := range names {
		for _, c := range plans[n].chainsOrNil() {
			addChain(tx, c.name)
			delete(p.stale, c.name)
		}
	}
	for _, n := range names {
		for _, c := range p.records[n].chainsOrNil() {
			if !slices.ContainsFunc(plans[n].chainsOrNil(), func(nc chain) bool { return nc.name == c.name }) {
				tx.Flush(&knftables.Chain{Name: c.name})
				stale = append(stale, c.name)
			}
		}
	}
	for _, n := range names {
		deleteChangedSets(tx, p.records[n], plans[n])
	}
	for _, n := range names {
		addSets(tx, plans[n])
	}
	for _, c := range newShared {
		addRules(tx, c.name, c.rules)
	}
	for _, n := range names {
		for _, c := range plans[n].chainsOrNil() {
			addRules(tx, c.name, c.rules)
		}
	}
	for _, r := range overrideRules {
		tx.Insert(&knftables.Rule{Chain: overridesChain, Rule: r})
	}
	overrides := len(overrideRules)
	for _, n := range names {
		p.elems.set(n, p.records[n].elemsOrNil(), plans[n].elemsOrNil())
	}
	if !addOnly {
		p.elems.diff(tx)
		if p.overrides > 0 { // the maps are current again
			tx.Flush(&knftables.Chain{Name: overridesChain})
		}
		stale = append(stale, p.flushIdleShared(tx)...)
	}

	if tx.NumOperations() > 0 {
		if err := p.nft.Run(ctx, tx); err != nil {
			return nil, err
		}
	}

	flows := newStaleFlows()
	for _, n := range names {
		old, pl := p.records[n], plans[n]
		var serving map[netip.AddrPort]bool
		if pl != nil && pl.udp != nil {
			serving = pl.udp.serving
			flows.add(pl.udp, serving)
		}
		if old != nil && old.udp != nil {
			flows.add(old.udp, serving)
		}
		if old != nil {
			p.counts.add(old.status, -1)
		}
		if pl != nil {
			p.counts.add(pl.status, 1)
			p.records[n] = pl
		} else {
			delete(p.records, n)
		}
	}
	for _, c := range stale {
		p.stale[c] = true
	}
	if !addOnly {
		p.stopCatchUp()
	} else if overrides > 0 {
		p.overrides += overrides
		if p.catchUp == nil {
			p.catchUp = time.AfterFunc(catchUpDelay, p.catchUpMaps)
		}
	}
	for name, d := range refs {
		if p.sharedRefs[name] += d; p.sharedRefs[name] == 0 {
			delete(p.sharedRefs, name)
		}
	}
	return flows, nil
}

// overrideChanges returns, for a partial sync that only changes which endpoints (and how
// many) service ports pick, one rule per changed service port to insert at the head of
// overridesChain, choosing among its new endpoints; the map elements are then left as they
// are (their replacement would delete), and so are shared chains no longer used. addOnly is
// false when any change needs more than that: a change of frontends, of chains or sets of
// the port's own, of reject or hairpin elements, a port with NodePort or external IPs, or
// one left without endpoints.
func (p *Proxier) overrideChanges(names []proxy.ServicePortName, plans map[proxy.ServicePortName]*plan, s proxy.State) (rules []string, addOnly bool) {
	if p.overrides+len(names) > maxOverrides {
		return nil, false
	}
	for _, n := range names {
		old, pl, svc := p.records[n], plans[n], s.Services[n]
		if old == nil || pl == nil || svc == nil || old.status.skipped != "" || pl.status.skipped != "" ||
			len(old.chains) > 0 || len(pl.chains) > 0 || len(old.sets) > 0 || len(pl.sets) > 0 {
			return nil, false
		}
		proto, _ := protocolName(svc.Protocol)
		rule, ok := overrideRule(old, pl, endpointsMap(proto), svc.ClusterIP.Unmap().String(), proto, strconv.Itoa(svc.Port))
		if !ok {
			return nil, false
		}
		if rule != "" {
			rules = append(rules, rule)
		}
	}
	return rules, true
}

// overrideRule is the rule DNATing the ClusterIP and port to the new plan's endpoints, ""
// when the endpoints did not change; ok is false unless the two plans differ only in the
// endpoints listed for the ClusterIP and port in endpoints map em and in the shared chain
// service-ips sends the ClusterIP and port to (which follows their number).
func overrideRule(old, pl *plan, em, clusterIP, proto, port string) (rule string, ok bool) {
	prefix := clusterIP + " . " + port + " . "
	frontend := clusterIP + " . " + proto + " . " + port
	split := func(pl *plan) (other []elem, endpoints map[string]string, ok bool) {
		endpoints = map[string]string{}
		for _, el := range pl.elems {
			if el.container == serviceIPsMap && el.key == frontend && strings.HasPrefix(el.value, "goto "+pickChainPrefix(proto)) {
				continue // the override stands in for it
			}
			if el.container != em {
				other = append(other, el)
				continue
			}
			index, found := strings.CutPrefix(el.key, prefix)
			if !found {
				return nil, nil, false // an external IP's endpoints
			}
			endpoints[index] = el.value
		}
		return other, endpoints, true
	}
	oldOther, oldEndpoints, ok1 := split(old)
	newOther, newEndpoints, ok2 := split(pl)
	if !ok1 || !ok2 || !slices.Equal(oldOther, newOther) || len(newEndpoints) == 0 {
		return "", false
	}
	if maps.Equal(oldEndpoints, newEndpoints) {
		return "", true
	}
	entries := make([]string, 0, len(newEndpoints))
	for i := range len(newEndpoints) {
		ep, found := newEndpoints[strconv.Itoa(i)]
		if !found {
			return "", false
		}
		entries = append(entries, fmt.Sprintf("%d : %s", i, ep))
	}
	return fmt.Sprintf("ip daddr %s %s dport %s dnat ip addr . port to numgen random mod %d map { %s }",
		clusterIP, proto, port, len(entries), strings.Join(entries, ", ")), true
}

// catchUpMaps writes the elements that override rules stand in for and then removes those
// rules, in one transaction (which deletes, so it takes its grace period here, off the
// path of the changes). When it fails the override rules stay (they still route right) and
// the next sync is a full one.
func (p *Proxier) catchUpMaps() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.catchUp = nil
	if p.overrides == 0 || p.ctx == nil || p.ctx.Err() != nil {
		return
	}
	start := time.Now()
	err := inNetNS(p.netns, func() error {
		tx := p.nft.NewTransaction()
		p.elems.diff(tx)
		tx.Flush(&knftables.Chain{Name: overridesChain})
		stale := p.flushIdleShared(tx)
		if err := p.nft.Run(p.ctx, tx); err != nil {
			return err
		}
		for _, c := range stale {
			p.stale[c] = true
		}
		p.deleteStale(p.ctx)
		return nil
	})
	if err != nil {
		p.reset()
		p.m.syncFailures.Inc()
		p.log.Error("nftables: writing the maps behind override rules failed; the next sync is a full one", "err", err)
		return
	}
	p.log.Debug("nftables maps caught up", "overrides", p.overrides, "took", time.Since(start))
	p.overrides = 0
}

// flushIdleShared adds to tx the flush of every shared chain left idle by add-only syncs
// (the maps tx brings up to date jump to them no more) and returns their names, to delete
// once tx has run.
func (p *Proxier) flushIdleShared(tx *knftables.Transaction) []string {
	names := slices.Sorted(maps.Keys(p.idleShared))
	for _, name := range names {
		tx.Flush(&knftables.Chain{Name: name})
	}
	clear(p.idleShared)
	return names
}

// stopCatchUp cancels a scheduled catchUpMaps, for a sync that brings the maps up to date
// itself (or forgets them).
func (p *Proxier) stopCatchUp() {
	if p.catchUp != nil {
		p.catchUp.Stop()
		p.catchUp = nil
	}
	p.overrides = 0
}

// deleteStale deletes the chains flushed by earlier syncs, in a transaction of their own:
// kernels before 6.2 may refuse to delete a chain in the transaction that removes the last
// map element pointing at it. A failure is retried after the next sync.
func (p *Proxier) deleteStale(ctx context.Context) {
	if len(p.stale) == 0 {
		return
	}
	tx := p.nft.NewTransaction()
	for _, name := range slices.Sorted(maps.Keys(p.stale)) {
		tx.Delete(&knftables.Chain{Name: name})
	}
	if err := p.nft.Run(ctx, tx); err != nil {
		p.m.cleanupFailures.Inc()
		p.log.Info("could not delete stale nftables chains yet; retrying after the next sync", "chains", len(p.stale), "err", err)
		return
	}
	clear(p.stale)
}

func (p *Proxier) cleanConntrack(flows *staleFlows) {
	start := time.Now()
	n, err := p.ct.deleteFlows(flows)
	p.m.conntrackDuration.Observe(time.Since(start).Seconds())
	p.m.conntrackDeleted.Add(float64(n))
	if err != nil {
		p.log.Error("deleting stale UDP conntrack entries", "deleted", n, "err", err)
		return
	}
	if n > 0 {
		p.log.Debug("deleted stale UDP conntrack entries", "deleted", n, "took", time.Since(start))
	}
}

// report logs what is wrong with a service port, once, when it becomes so.
func (p *Proxier) report(n proxy.ServicePortName, old, new *plan) {
	if new == nil {
		return
	}
	var was status
	if old != nil {
		was = old.status
	}
	st := new.status
	switch {
	case st.skipped == skipNoClusterIP:
	case st.skipped != "" && st.skipped != was.skipped:
		p.log.Warn("not programming service port", "service", n.String(), "reason", skipReasons[st.skipped])
	}
	if st.badEndpoints > 0 && st.badEndpoints != was.badEndpoints {
		p.log.Warn("ignoring endpoints that are not IPv4 or lack a valid port", "service", n.String(), "count", st.badEndpoints)
	}
	if st.skipped == "" && st.noEndpoints && (old == nil || !was.noEndpoints) {
		p.log.Info("service port has no usable endpoints; rejecting its traffic", "service", n.String())
	}
	if st.noLocalInternal && !was.noLocalInternal || st.noLocalExternal && !was.noLocalExternal {
		p.log.Info("service port with a Local traffic policy has no endpoint on this node; dropping that traffic",
			"service", n.String(), "internal", st.noLocalInternal, "external", st.noLocalExternal)
	}
}

var skipReasons = map[string]string{
	skipIPv6:     "IPv6 ClusterIP on an IPv4-only proxier",
	skipProtocol: "unsupported protocol",
	skipPort:     "invalid port or NodePort",
}

// counts are the gauges' values, kept up to date service port by service port.
type counts struct {
	noEndpoints, noLocalInternal, noLocalExternal, badEndpoints int
	skipped                                                     map[string]int
}

func (c *counts) add(st status, d int) {
	if c.skipped == nil {
		c.skipped = map[string]int{}
	}
	if st.skipped != "" {
		c.skipped[st.skipped] += d
		return
	}
	c.badEndpoints += d * st.badEndpoints
	if st.noEndpoints {
		c.noEndpoints += d
	}
	if st.noLocalInternal {
		c.noLocalInternal += d
	}
	if st.noLocalExternal {
		c.noLocalExternal += d
	}
}

func (c *counts) export(m *metrics) {
	m.noEndpoints.Set(float64(c.noEndpoints))
	m.noLocalEndpoints.WithLabelValues("internal").Set(float64(c.noLocalInternal))
	m.noLocalEndpoints.WithLabelValues("external").Set(float64(c.noLocalExternal))
	m.skippedEndpoints.Set(float64(c.badEndpoints))
	for _, r := range []string{skipNoClusterIP, skipIPv6, skipProtocol, skipPort} {
		m.skipped.WithLabelValues(r).Set(float64(c.skipped[r]))
	}
}

// probe is a transaction creating the table with the given service ports (with two
// endpoints, one local), for New to check that the kernel and nft accept the rules.
func (p *Proxier) probe(svcs []*proxy.ServicePort) *knftables.Transaction {
	pl := planner{masqRule: p.planner.masqRule, clusterCIDR: netip.MustParsePrefix("10.0.0.0/8")}
	eps := []proxy.Endpoint{
		{Addr: netip.MustParseAddrPort("10.0.1.1:80"), Ready: true, Serving: true, IsLocal: true},
		{Addr: netip.MustParseAddrPort("10.0.1.2:80"), Ready: true, Serving: true},
	}
	var plans []*plan
	for i, svc := range svcs {
		svc.Name = proxy.ServicePortName{Port: "probe", Protocol: svc.Protocol}
		svc.Name.Namespace, svc.Name.Name = "kplane-probe", "probe"
		svc.ClusterIP = netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})
		plans = append(plans, pl.plan(svc.Name, svc, eps))
	}
	tx := p.nft.NewTransaction()
	tx.Add(&knftables.Table{})
	for _, bc := range p.layout.baseChains {
		tx.Add(&knftables.Chain{Name: bc.name, Type: &bc.typ, Hook: &bc.hook, Priority: &bc.priority})
	}
	chains := p.layout.chains
	for _, plan := range plans {
		chains = slices.Concat(chains, plan.shared, plan.chains)
	}
	for _, c := range chains {
		tx.Add(&knftables.Chain{Name: c.name})
	}
	for _, set := range p.layout.sets {
		tx.Add(set)
	}
	for _, m := range p.layout.maps {
		tx.Add(m)
	}
	for _, plan := range plans {
		addSets(tx, plan)
	}
	for _, bc := range p.layout.baseChains {
		addRules(tx, bc.name, bc.rules)
	}
	for _, c := range chains {
		addRules(tx, c.name, c.rules)
	}
	for _, plan := range plans {
		for _, el := range plan.elems {
			tx.Add(element(elemKey{el.container, el.key}, el.value))
		}
	}
	return tx
}

func addChain(tx *knftables.Transaction, name string) {
	tx.Add(&knftables.Chain{Name: name})
	tx.Flush(&knftables.Chain{Name: name})
}

func addRules(tx *knftables.Transaction, chain string, rules []string) {
	for _, r := range rules {
		tx.Add(&knftables.Rule{Chain: chain, Rule: r})
	}
}

func addSets(tx *knftables.Transaction, pl *plan) {
	if pl == nil {
		return
	}
	for _, s := range pl.sets {
		tx.Add(&knftables.Set{
			Name:    s.name,
			Type:    "ipv4_addr",
			Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
			Timeout: knftables.PtrTo(s.timeout),
		})
	}
}

// deleteChangedSets deletes the affinity sets of old that new drops or needs with another
// timeout (their chains are flushed earlier in the same transaction).
func deleteChangedSets(tx *knftables.Transaction, old, new *plan) {
	if old == nil {
		return
	}
	for _, s := range old.sets {
		if new == nil || !slices.Contains(new.sets, s) {
			tx.Delete(&knftables.Set{Name: s.name})
		}
	}
}

func (pl *plan) chainsOrNil() []chain {
	if pl == nil {
		return nil
	}
	return pl.chains
}

func (pl *plan) sharedOrNil() []chain {
	if pl == nil {
		return nil
	}
	return pl.shared
}

func (pl *plan) elemsOrNil() []elem {
	if pl == nil {
		return nil
	}
	return pl.elems
}

func compareNames(a, b proxy.ServicePortName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
}

func compareElemKeys(a, b elemKey) int {
	return cmp.Or(cmp.Compare(a.container, b.container), cmp.Compare(a.key, b.key))
}
