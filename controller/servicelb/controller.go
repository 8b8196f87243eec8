// Package servicelb is the service load-balancer controller: it gives every Service of type
// LoadBalancer without a spec.loadBalancerClass an address from a configured pool
// (--load-balancer-ip-range) and writes it into status.loadBalancer.ingress, where the proxy
// picks it up and serves it like a ClusterIP. It plays the part of kube-controller-manager's
// service controller together with a cloud provider's load balancers, as MetalLB or k3s'
// servicelb do on machines without one: the "load balancer" is the address itself, which every
// proxy answers on.
//
// As in Kubernetes, a Service it serves carries the finalizer
// service.kubernetes.io/load-balancer-cleanup from before it gets an address until the address
// is released (the Service deleted, or its type changed away from LoadBalancer), and the
// controller records EnsuringLoadBalancer, EnsuredLoadBalancer, DeletingLoadBalancer,
// DeletedLoadBalancer and, when it cannot give an address, SyncLoadBalancerFailed events. A
// Service with a loadBalancerClass belongs to another implementation and is left alone.
//
// Who holds which address is kept in memory (Allocator) and rebuilt, when the controller
// starts, from the addresses the Services' status already shows, before anything is handed
// out: an address survives restarts and is never given twice. The pool's addresses must reach
// the nodes (a loopback range on one machine, as under `kplane up`; routes on a real network):
// the controller announces nothing (no ARP, no BGP).
package servicelb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/workqueue"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
)

// Name is the controller's name in --controllers, as in kube-controller-manager v1.36; Alias
// is its older name there, which --controllers also takes, and its queue's name.
const (
	Name  = "service-lb-controller"
	Alias = "service"
)

// Finalizer holds a Service until its address is released.
const Finalizer = "service.kubernetes.io/load-balancer-cleanup"

// Entry registers the controller with the manager. Without a pool it is off, as
// kube-controller-manager without a cloud provider has no service controller.
var Entry = controller.Entry{
	Name:    Name,
	Aliases: []string{Alias},
	Options: func() controller.Options { return DefaultOptions() },
	New: controller.Build(func(ctx *controller.Context, o *Options) (controller.Controller, error) {
		if o.LoadBalancerIPRange == "" {
			return nil, nil
		}
		// An error returns a nil Controller, not a nil *Controller in a non-nil one.
		c, err := New(ctx, o)
		if err != nil {
			return nil, err
		}
		return c, nil
	}),
}

// Options are the controller's settings.
type Options struct {
	// LoadBalancerIPRange is the pool (--load-balancer-ip-range): a CIDR or a first-last
	// range of IPv4 addresses (see ParsePool); empty turns the controller off.
	LoadBalancerIPRange string
	// ConcurrentServiceSyncs: Services synced at once (--concurrent-service-syncs, 1).
	ConcurrentServiceSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults, and no pool.
func DefaultOptions() *Options { return &Options{ConcurrentServiceSyncs: 1} }

// AddFlags binds o to the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.LoadBalancerIPRange, "load-balancer-ip-range", o.LoadBalancerIPRange,
		"addresses the service-lb-controller gives Services of type LoadBalancer: a CIDR (all but its network and broadcast addresses) or a first-last range of IPv4 addresses; empty turns that controller off")
	fs.IntVar(&o.ConcurrentServiceSyncs, "concurrent-service-syncs", o.ConcurrentServiceSyncs, "workers of the service-lb-controller")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.LoadBalancerIPRange != "" {
		if _, err := ParsePool(o.LoadBalancerIPRange); err != nil {
			errs = append(errs, fmt.Errorf("--load-balancer-ip-range: %w", err))
		}
	}
	if o.ConcurrentServiceSyncs < 1 {
		errs = append(errs, errors.New("--concurrent-service-syncs must be at least 1"))
	}
	return errs
}

// Failed syncs (an exhausted pool among them) are retried after 5 s doubling to 5 min, as
// Kubernetes' service controller does; a released address also retries at once the Services
// waiting for one, even those whose retries ran out, so no short resync is needed for them.
const (
	retryBase = 5 * time.Second
	retryMax  = 5 * time.Minute
)

// Controller gives Services of type LoadBalancer their address; the queue holds Service keys.
type Controller struct {
	client   *client.Client
	recorder *events.Recorder
	services *cache.Informer[*corev1.Service]
	loop     *controller.Loop
	alloc    *Allocator

	mu sync.Mutex
	// waiting are the Services that could not get the address they need (pool exhausted,
	// requested address held by another): a release queues them again.
	waiting map[string]bool
}

// New builds the controller on ctx's shared Service informer.
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if errs := o.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("service-lb-controller: the context needs a client and informers")
	}
	pool, err := ParsePool(o.LoadBalancerIPRange)
	if err != nil {
		return nil, fmt.Errorf("--load-balancer-ip-range: %w", err)
	}
	c := &Controller{
		client:   ctx.Client,
		recorder: ctx.Recorder.For("service-controller"),
		services: cache.For[*corev1.Service](ctx.Informers, "services"),
		loop: controller.NewLoop(ctx, Alias, controller.WithWorkers(o.ConcurrentServiceSyncs),
			controller.WithRateLimiter(workqueue.NewItemExponentialFailureRateLimiter[string](retryBase, retryMax))),
		alloc:   NewAllocator(pool),
		waiting: map[string]bool{},
	}
	queue := func(svc *corev1.Service) {
		key := cache.MetaNamespaceKey(svc)
		if ours(svc) {
			c.loop.Queue.Add(key)
			return
		}
		if _, _, held := c.alloc.Lookup(key); held {
			c.loop.Queue.Add(key)
		}
	}
	controller.Watch(c.loop, c.services, cache.Handler[*corev1.Service]{
		OnAdd: func(svc *corev1.Service, _ bool) { queue(svc) },
		OnUpdate: func(old, svc *corev1.Service) {
			// A resync (same version) or a change that matters; not the finalizer this
			// controller adds, so that the sync it would start does not run on a cache
			// still without the status written right after it.
			if old.ResourceVersion == svc.ResourceVersion || changed(old, svc) {
				queue(old)
				queue(svc)
			}
		},
		OnDelete: func(svc *corev1.Service, _ bool) { queue(svc) },
	}, ctx.ResyncPeriod())
	c.loop.OnReady(c.restore)
	return c, nil
}

// Name is the controller's name.
func (c *Controller) Name() string { return Name }

// Run waits for the cache, rebuilds who holds which address, and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	slog.Info("service load balancer addresses", "controller", Name, "pool", c.alloc.Pool().String(),
		"first", c.alloc.Pool().First(), "last", c.alloc.Pool().Last(), "size", c.alloc.Pool().Size())
	c.loop.Run(ctx, c.sync)
	return nil
}

// Allocator is the controller's record of who holds which address.
func (c *Controller) Allocator() *Allocator { return c.alloc }

// wantsLoadBalancer: a Service of type LoadBalancer without a class is for this controller.
func wantsLoadBalancer(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
}

func hasFinalizer(svc *corev1.Service) bool { return slices.Contains(svc.Finalizers, Finalizer) }

// ours: a Service this controller serves or still has to clean up after.
func ours(svc *corev1.Service) bool { return wantsLoadBalancer(svc) || hasFinalizer(svc) }

// changed reports whether an update changes what the controller acts on.
func changed(old, svc *corev1.Service) bool {
	return old.UID != svc.UID || wantsLoadBalancer(old) != wantsLoadBalancer(svc) ||
		old.Spec.LoadBalancerIP != svc.Spec.LoadBalancerIP ||
		(old.DeletionTimestamp == nil) != (svc.DeletionTimestamp == nil) ||
		hasFinalizer(old) && !hasFinalizer(svc) ||
		!slices.EqualFunc(old.Status.LoadBalancer.Ingress, svc.Status.LoadBalancer.Ingress, ingressEqual)
}

func ingressEqual(a, b corev1.LoadBalancerIngress) bool {
	return a.IP == b.IP && a.Hostname == b.Hostname && ipMode(a) == ipMode(b) &&
		slices.EqualFunc(a.Ports, b.Ports, func(x, y corev1.PortStatus) bool {
			return x.Port == y.Port && x.Protocol == y.Protocol && (x.Error == nil) == (y.Error == nil) &&
				(x.Error == nil || *x.Error == *y.Error)
		})
}

// ipMode is an ingress' mode, VIP when unset (the API server's default).
func ipMode(ing corev1.LoadBalancerIngress) corev1.LoadBalancerIPMode {
	if ing.IPMode == nil {
		return corev1.LoadBalancerIPModeVIP
	}
	return *ing.IPMode
}

// restore rebuilds who holds which address from the Services' status, before the first sync:
// each Service this controller serves (or has yet to clean up after) keeps the first address
// of its status that is in the pool. Should two show one address, the older Service keeps it
// and the other gets a new one when synced.
func (c *Controller) restore() {
	lost := restore(c.alloc, c.services.Indexer().List())
	for _, l := range lost {
		slog.Warn("address shown by two Services; the older one keeps it", "controller", Name, "detail", l)
	}
	slog.Info("restored addresses from the Services' status", "controller", Name, "held", c.alloc.Used(), "pool", c.alloc.Pool().String())
}

// restore gives a the addresses services show and returns what it could not restore.
func restore(a *Allocator, services []*corev1.Service) []string {
	services = slices.Clone(services)
	slices.SortFunc(services, func(x, y *corev1.Service) int {
		return cmp.Or(x.CreationTimestamp.Compare(y.CreationTimestamp.Time),
			cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	var lost []string
	for _, svc := range services {
		if !ours(svc) {
			continue
		}
		key := cache.MetaNamespaceKey(svc)
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			addr, err := netip.ParseAddr(ing.IP)
			if err != nil || !a.Pool().Contains(addr) {
				continue
			}
			if err := a.AllocateAt(key, svc.UID, addr); err != nil {
				lost = append(lost, fmt.Sprintf("%s: %v", key, err))
				continue
			}
			break
		}
	}
	return lost
}

func (c *Controller) wait(key string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		c.waiting[key] = true
	} else {
		delete(c.waiting, key)
	}
}

// released frees key's address, if it holds one, and queues the Services waiting for one.
func (c *Controller) released(key string) {
	c.wait(key, false)
	addr, ok := c.alloc.Release(key)
	if !ok {
		return
	}
	slog.Info("address released", "controller", Name, "service", key, "address", addr)
	c.kick()
}
