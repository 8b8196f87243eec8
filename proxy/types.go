// Package proxy is the library of kplane's service proxy, kube-proxy's counterpart: the
// Proxier, fed by Services, EndpointSlices and the Node (proxy/config), tracks what changed per
// service port (this package's trackers) and programs a data path (proxy/userspace,
// proxy/nftables) at a bounded frequency, and serves its health. The program around it (flags,
// options, the informers, the health and metrics servers) is proxy/app, as kube-proxy's is
// cmd/kube-proxy/app.
//
// The types here are the contract between the shared part and the data paths: a data path sees
// the whole desired state, already converted from API objects, plus which service ports changed
// since it was last applied.
package proxy

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ServicePortName identifies one port of one Service.
type ServicePortName struct {
	types.NamespacedName
	// Port is the service port's name ("" for a single unnamed port).
	Port     string
	Protocol corev1.Protocol
}

func (n ServicePortName) String() string {
	return fmt.Sprintf("%s/%s:%s/%s", n.Namespace, n.Name, n.Port, n.Protocol)
}

// ServicePort is what a data path needs to know of one port of one Service, for the proxy's IP
// family. Services without a ClusterIP of that family (headless, ExternalName, other family)
// have none.
type ServicePort struct {
	Name      ServicePortName
	ClusterIP netip.Addr
	Port      int
	Protocol  corev1.Protocol
	// NodePort is 0 when the Service has none.
	NodePort        int
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []netip.Addr
	// AffinityTimeout is non-zero for sessionAffinity: ClientIP (the Service's timeout,
	// 10800 s by default).
	AffinityTimeout time.Duration
	// InternalLocal: internalTrafficPolicy Local (ClusterIP traffic only to this node's
	// endpoints, dropped when there are none). ExternalLocal: externalTrafficPolicy Local.
	InternalLocal, ExternalLocal bool
	HealthCheckNodePort          int
}

// Endpoint is one backend of a service port, merged across the Service's EndpointSlices.
type Endpoint struct {
	Addr netip.AddrPort
	// Conditions as in the EndpointSlice (nil conditions read as ready and serving).
	Ready, Serving, Terminating bool
	NodeName, Zone              string
	// IsLocal: the endpoint runs on this proxy's node.
	IsLocal bool
	// Hints are the slice's topology hints; nil when it gives none (one pointer rather than
	// two slices: most endpoints have none, and a proxy holds every endpoint of the cluster).
	Hints *Hints
}

// Hints are an endpoint's topology hints: the zones (forZones) and nodes (forNodes) it is
// meant for.
type Hints struct{ Zones, Nodes []string }

// ZoneHints are the zones the endpoint is meant for (nil: none given).
func (e Endpoint) ZoneHints() []string {
	if e.Hints == nil {
		return nil
	}
	return e.Hints.Zones
}

// NodeHints are the nodes the endpoint is meant for (nil: none given).
func (e Endpoint) NodeHints() []string {
	if e.Hints == nil {
		return nil
	}
	return e.Hints.Nodes
}

func (e Endpoint) String() string { return e.Addr.String() }

// State is the whole desired state a data path programs.
type State struct {
	// Services has every service port the proxy handles; Endpoints has, per service port, all
	// of its endpoints (sorted by address), whatever their conditions: the data path chooses
	// with CategorizeEndpoints.
	Services  map[ServicePortName]*ServicePort
	Endpoints map[ServicePortName][]Endpoint
	// Changed lists the service ports whose service or endpoints changed since the last
	// successful Apply; nil means a full sync (the first one, after a failure, periodic).
	Changed map[ServicePortName]bool
	// NodeName and Zone locate this proxy, for traffic policies and topology hints.
	NodeName, Zone string
	// UDPChanged lists the UDP service ports whose service or endpoints changed since the
	// last successful Apply, on full syncs too: their stale conntrack entries may need
	// flushing.
	UDPChanged map[ServicePortName]bool
	// Problems, when set, takes the problems a data path meets with single service ports (a
	// protocol it does not support, a port in use): report them through Report and go on with
	// the rest rather than failing the whole Apply. The proxy logs and counts each once until
	// the service port changes, so reporting the same problem on every Apply is fine.
	Problems func(name ServicePortName, reason string, err error)
}

// Report passes a service port's problem to s.Problems, if set. reason is short and stable
// (a metric label): "unsupported-protocol", "port-in-use", ...
func (s State) Report(name ServicePortName, reason string, err error) {
	if s.Problems != nil {
		s.Problems(name, reason, err)
	}
}

// DataPath programs one data path. The proxy calls Apply from one goroutine, at most every
// --iptables-min-sync-period; an error makes the next call a full sync, after
// --iptables-sync-period at the latest.
// A data path keeps no reference to the State's maps after Apply returns: the next State is
// built from them.
type DataPath interface {
	Apply(ctx context.Context, s State) error
}
