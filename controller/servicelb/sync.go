package servicelb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/reconcile"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// sync brings one Service to what it should have: an address, shown in its status, while it
// is of type LoadBalancer without a class; none, and no finalizer, otherwise.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	svc, ok := c.services.Indexer().Get(key)
	if !ok {
		// Gone without the cleanup below having run (its finalizer removed by someone
		// else), or after it: nothing may hold its address any longer.
		c.released(key)
		return reconcile.Result{}, nil
	}
	if _, uid, held := c.alloc.Lookup(key); held && uid != svc.UID {
		// The name belongs to a new Service: the one that held the address is gone.
		c.released(key)
	}
	if !wantsLoadBalancer(svc) || svc.DeletionTimestamp != nil {
		return reconcile.Result{}, c.cleanup(ctx, svc)
	}
	return reconcile.Result{}, c.ensure(ctx, svc)
}

// ensure gives svc its address: the finalizer first (so that it cannot go without the address
// being released), then the address, then the status.
func (c *Controller) ensure(ctx context.Context, svc *corev1.Service) error {
	key := cache.MetaNamespaceKey(svc)
	addr, _, held := c.alloc.Lookup(key)
	requested := svc.Spec.LoadBalancerIP
	if hasFinalizer(svc) && held && (requested == "" || requested == addr.String()) && shows(svc, addr) {
		c.wait(key, false)
		return nil
	}
	c.recorder.Eventf(svc, corev1.EventTypeNormal, "EnsuringLoadBalancer", "Ensuring load balancer")
	if err := c.ensureAddress(ctx, svc); err != nil {
		if client.IsNotFound(err) {
			c.released(key)
			return nil
		}
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "Error syncing load balancer: %v", err)
		return err
	}
	c.recorder.Eventf(svc, corev1.EventTypeNormal, "EnsuredLoadBalancer", "Ensured load balancer")
	return nil
}

func (c *Controller) ensureAddress(ctx context.Context, svc *corev1.Service) error {
	key := cache.MetaNamespaceKey(svc)
	api := client.Resource[*corev1.Service](c.client, "services").Namespace(svc.Namespace)
	if !hasFinalizer(svc) {
		if _, err := api.Patch(ctx, svc.Name, types.StrategicMergePatchType, finalizerPatch(svc.UID, true), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("failed to add load balancer cleanup finalizer: %w", err)
		}
	}
	old, _, held := c.alloc.Lookup(key)
	var addr netip.Addr
	if requested := svc.Spec.LoadBalancerIP; requested != "" {
		r, err := netip.ParseAddr(requested)
		if err != nil || !r.Is4() {
			return fmt.Errorf("failed to ensure load balancer: spec.loadBalancerIP %q is not an IPv4 address", requested)
		}
		if err := c.alloc.AllocateAt(key, svc.UID, r); err != nil {
			if errors.Is(err, ErrInUse) {
				c.wait(key, true)
			}
			return fmt.Errorf("failed to ensure load balancer: spec.loadBalancerIP %w", err)
		}
		addr = r.Unmap()
		if held && old != addr {
			c.kick()
		}
	} else {
		a, err := c.alloc.Allocate(key, svc.UID)
		if err != nil {
			c.wait(key, true)
			return fmt.Errorf("failed to ensure load balancer: %w", err)
		}
		addr = a
	}
	c.wait(key, false)
	if shows(svc, addr) {
		return nil
	}
	ingress := []corev1.LoadBalancerIngress{{IP: addr.String(), IPMode: new(corev1.LoadBalancerIPModeVIP)}}
	if _, err := api.Patch(ctx, svc.Name, types.MergePatchType, statusPatch(svc.UID, ingress), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("failed to update load balancer status: %w", err)
	}
	return nil
}

// cleanup releases what svc holds once it no longer wants an address: it is being deleted,
// its type changed, or it has a class (which a Service is only given with its type, so this
// one held the finalizer from before).
func (c *Controller) cleanup(ctx context.Context, svc *corev1.Service) error {
	key := cache.MetaNamespaceKey(svc)
	addr, _, held := c.alloc.Lookup(key)
	if !held && !hasFinalizer(svc) {
		c.wait(key, false)
		return nil
	}
	c.recorder.Eventf(svc, corev1.EventTypeNormal, "DeletingLoadBalancer", "Deleting load balancer")
	err := c.release(ctx, svc, addr, held)
	if client.IsNotFound(err) {
		err = nil
	}
	if err != nil {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "DeleteLoadBalancerFailed", "Error deleting load balancer: %v", err)
		return err
	}
	c.released(key)
	c.recorder.Eventf(svc, corev1.EventTypeNormal, "DeletedLoadBalancer", "Deleted load balancer")
	return nil
}

// release takes the address out of svc's status, then the finalizer off it. The address is
// freed only after both (by the caller): should the controller stop in between, the Service
// still shows it, so the next start restores it to the same Service, never to another.
func (c *Controller) release(ctx context.Context, svc *corev1.Service, addr netip.Addr, held bool) error {
	api := client.Resource[*corev1.Service](c.client, "services").Namespace(svc.Namespace)
	fin := hasFinalizer(svc)
	// A Service being deleted goes with the finalizer unless others hold it: then it must
	// stop showing an address that may be given to another.
	outlives := svc.DeletionTimestamp == nil || len(svc.Finalizers) > 1 || !fin
	if ingress, change := remaining(svc, addr, held); change && outlives {
		if _, err := api.Patch(ctx, svc.Name, types.MergePatchType, statusPatch(svc.UID, ingress), metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("failed to clear load balancer status: %w", err)
		}
	}
	if fin {
		if _, err := api.Patch(ctx, svc.Name, types.StrategicMergePatchType, finalizerPatch(svc.UID, false), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("failed to remove load balancer cleanup finalizer: %w", err)
		}
	}
	return nil
}

// remaining is svc's status ingress without this controller's: all of it once the type is no
// longer LoadBalancer (as Kubernetes' API server clears it), else the held address' entries
// (the rest is another implementation's), and whether that changes anything.
func remaining(svc *corev1.Service, addr netip.Addr, held bool) ([]corev1.LoadBalancerIngress, bool) {
	cur := svc.Status.LoadBalancer.Ingress
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil, len(cur) > 0
	}
	var out []corev1.LoadBalancerIngress
	for _, ing := range cur {
		if ip, err := netip.ParseAddr(ing.IP); held && err == nil && ip.Unmap() == addr {
			continue
		}
		out = append(out, ing)
	}
	return out, len(out) != len(cur)
}

// shows reports whether svc's status shows addr, and nothing else.
func shows(svc *corev1.Service, addr netip.Addr) bool {
	ing := svc.Status.LoadBalancer.Ingress
	return len(ing) == 1 && ing[0].IP == addr.String() && ing[0].Hostname == "" &&
		ipMode(ing[0]) == corev1.LoadBalancerIPModeVIP && len(ing[0].Ports) == 0
}

// kick queues the Services waiting for an address, after one was freed.
func (c *Controller) kick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.waiting {
		c.loop.Queue.Add(k)
	}
}

// finalizerPatch adds (add) or removes the cleanup finalizer and nothing else; the UID makes
// it fail if the name now belongs to another Service.
func finalizerPatch(uid types.UID, add bool) []byte {
	meta := map[string]any{"uid": uid}
	if add {
		meta["finalizers"] = []string{Finalizer}
	} else {
		meta["$deleteFromPrimitiveList/finalizers"] = []string{Finalizer}
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta})
	return b
}

// statusPatch sets status.loadBalancer.ingress (nil: none), whatever was there.
func statusPatch(uid types.UID, ingress []corev1.LoadBalancerIngress) []byte {
	var ing any
	if len(ingress) > 0 {
		ing = ingress
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid},
		"status": map[string]any{"loadBalancer": map[string]any{"ingress": ing}}})
	return b
}
