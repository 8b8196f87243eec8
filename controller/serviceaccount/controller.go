// Package serviceaccount is the service account controller: every active namespace has a
// ServiceAccount named "default", created when the namespace appears and again whenever it is
// deleted. Terminating namespaces get nothing (the apiserver would refuse it anyway).
package serviceaccount

import (
	"context"
	"errors"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/reconcile"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Name is the controller's short name (kube-controller-manager's alias for it, and its
// loop's name), which --controllers also takes; Entry.Name is v1.36's name.
const Name = "serviceaccount"

// DefaultName is the ServiceAccount every namespace gets.
const DefaultName = "default"

// Entry registers the controller with the manager. kube-controller-manager runs it with one
// worker and no flag to change that; so does kplane.
var Entry = controller.Entry{
	Name:    "serviceaccount-controller",
	Aliases: []string{Name},
	Options: func() controller.Options { return controller.NoOptions{} },
	New:     controller.Build(New),
}

// Controller queues namespace names; sync makes sure the namespace has its accounts.
type Controller struct {
	client   *client.Client
	names    []string
	accounts *cache.Informer[*corev1.ServiceAccount]
	nss      *cache.Informer[*corev1.Namespace]
	loop     *controller.Loop
}

// New builds the controller on ctx's shared informers (serviceaccounts, namespaces).
func New(ctx *controller.Context, _ controller.NoOptions) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("serviceaccount controller: the context needs a client and informers")
	}
	// Retries as Kubernetes' controllers pace them (the Loop's default rate limiter); every
	// namespace is looked at again at the resync period.
	c := &Controller{
		client:   ctx.Client,
		names:    []string{DefaultName},
		accounts: cache.For[*corev1.ServiceAccount](ctx.Informers, "serviceaccounts"),
		nss:      cache.For[*corev1.Namespace](ctx.Informers, "namespaces"),
		loop:     controller.NewLoop(ctx, Name, controller.WithResync(ctx.ResyncPeriod())),
	}
	// A namespace's key is its name: a namespace that appears or changes is synced (one
	// deleted too, which finds it gone and does nothing).
	controller.For(c.loop, c.nss)
	// Only a deletion of an account can take away what the controller made.
	controller.Watch(c.loop, c.accounts, cache.Handler[*corev1.ServiceAccount]{
		OnDelete: func(sa *corev1.ServiceAccount, _ bool) { c.loop.Queue.Add(sa.Namespace) },
	}, 0)
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, reconcile.Ignore(c.sync))
	return nil
}

// sync creates the accounts namespace name lacks, if it is active.
func (c *Controller) sync(ctx context.Context, name string) error {
	ns, err := c.nss.Lister().Namespace("").Get(name)
	if err != nil || ns == nil || !wantsAccounts(ns) {
		return nil // gone, or terminating: nothing to do
	}
	accounts := client.Resource[*corev1.ServiceAccount](c.client, "serviceaccounts").Namespace(name)
	var errs []error
	for _, sa := range missing(c.names, func(n string) bool {
		got, err := c.accounts.Lister().Namespace(name).Get(n)
		return err == nil && got != nil
	}) {
		_, err := accounts.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}})
		switch {
		case err == nil, client.IsAlreadyExists(err):
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			return nil // it began terminating since the cache saw it
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// wantsAccounts: only an active namespace (phase Active or not yet set, not being deleted).
func wantsAccounts(ns *corev1.Namespace) bool {
	return ns.DeletionTimestamp == nil && ns.Status.Phase != corev1.NamespaceTerminating
}

// missing returns the names that exists reports absent, in order.
func missing(names []string, exists func(string) bool) []string {
	var out []string
	for _, n := range names {
		if !exists(n) {
			out = append(out, n)
		}
	}
	return out
}
