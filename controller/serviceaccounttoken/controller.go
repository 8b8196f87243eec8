// Package serviceaccounttoken is the service-account token controller (kube-controller-manager's
// serviceaccount-token-controller): it fills every Secret of type
// kubernetes.io/service-account-token with what a client of its account needs — "token" (a
// legacy token signed with --service-account-private-key-file, iss kubernetes/serviceaccount,
// no expiry), "ca.crt" (--root-ca-file, else the manager's kubeconfig CA; rewritten when it
// changes) and "namespace" — and records the account's UID on the Secret. A token Secret
// whose account does not exist (or was replaced: another UID) is deleted, and so are an
// account's token Secrets when it is deleted: the API server accepts a legacy token only while
// its Secret holds it and its account exists.
//
// Not done: Kubernetes' removal of a deleted Secret from the account's .secrets list (nothing
// here adds to that list, as since Kubernetes 1.24), and the legacy token cleaner.
package serviceaccounttoken

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/kplane/kplane/apiserver/serviceaccount"
	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/reconcile"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Name is the controller's name in --controllers, as in kube-controller-manager v1.36; Alias is
// its older name, which --controllers also takes.
const (
	Name  = "serviceaccount-token-controller"
	Alias = "serviceaccount-token"
)

// Entry registers the controller with the manager. Without a signing key it is off, as in
// kube-controller-manager.
var Entry = controller.Entry{
	Name:    Name,
	Aliases: []string{Alias},
	Options: func() controller.Options { return DefaultOptions() },
	New: controller.Build(func(ctx *controller.Context, o *Options) (controller.Controller, error) {
		if o.ServiceAccountKeyFile == "" {
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

// Options are the controller's settings. The CA it puts into Secrets is the manager's
// (--root-ca-file, see controller.Context.RootCA).
type Options struct {
	// ServiceAccountKeyFile is the PEM private key the tokens are signed with
	// (--service-account-private-key-file); empty turns the controller off.
	ServiceAccountKeyFile string
	// ConcurrentSyncs: token Secrets synced at once (--concurrent-serviceaccount-token-syncs, 5).
	ConcurrentSyncs int
}

// DefaultOptions returns kube-controller-manager v1.36's defaults.
func DefaultOptions() *Options { return &Options{ConcurrentSyncs: 5} }

// AddFlags binds o to kube-controller-manager's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ServiceAccountKeyFile, "service-account-private-key-file", o.ServiceAccountKeyFile, "PEM private key (RSA or ECDSA) that signs the tokens of service-account token Secrets; empty turns the token controller off")
	fs.IntVar(&o.ConcurrentSyncs, "concurrent-serviceaccount-token-syncs", o.ConcurrentSyncs, "workers of the service-account token controller")
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.ConcurrentSyncs < 1 {
		errs = append(errs, errors.New("--concurrent-serviceaccount-token-syncs must be at least 1"))
	}
	return errs
}

// Controller queues token Secrets ("namespace/name"); an account's changes queue its Secrets.
type Controller struct {
	client   *client.Client
	signer   *serviceaccount.Signer
	rootCA   []byte
	accounts *cache.Informer[*corev1.ServiceAccount]
	secrets  *cache.Informer[*corev1.Secret]
	loop     *controller.Loop
}

// New reads the signing key and the root CA and builds the controller on ctx's informers
// (serviceaccounts, secrets).
func New(ctx *controller.Context, o *Options) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("token controller: the context needs a client and informers")
	}
	key, err := serviceaccount.LoadPrivateKey(o.ServiceAccountKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--service-account-private-key-file: %w", err)
	}
	signer, err := serviceaccount.NewSigner(serviceaccount.LegacyIssuer, key)
	if err != nil {
		return nil, fmt.Errorf("--service-account-private-key-file: %w", err)
	}
	rootCA, err := ctx.RootCA()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		client:   ctx.Client,
		signer:   signer,
		rootCA:   rootCA,
		accounts: cache.For[*corev1.ServiceAccount](ctx.Informers, "serviceaccounts"),
		secrets:  cache.For[*corev1.Secret](ctx.Informers, "secrets"),
		loop:     controller.NewLoop(ctx, Name, controller.WithWorkers(o.ConcurrentSyncs), controller.WithQueueName("serviceaccount_tokens_secret")),
	}
	// Only token Secrets are queued (there are many other Secrets); their deletion needs
	// nothing done.
	queueSecret := func(s *corev1.Secret) {
		if s.Type == corev1.SecretTypeServiceAccountToken {
			c.loop.Queue.Add(s.Namespace + "/" + s.Name)
		}
	}
	controller.Watch(c.loop, c.secrets, cache.Handler[*corev1.Secret]{
		OnAdd:    func(s *corev1.Secret, _ bool) { queueSecret(s) },
		OnUpdate: func(_, s *corev1.Secret) { queueSecret(s) },
	}, ctx.ResyncPeriod())
	// Any change of an account may change what its Secrets need (it appeared, it was
	// deleted or replaced).
	controller.Map(c.loop, c.accounts, c.secretsOf)
	return c, nil
}

// secretsOf returns the keys of the token Secrets of sa in the cache.
func (c *Controller) secretsOf(sa *corev1.ServiceAccount) []string {
	var keys []string
	for _, s := range c.secrets.Lister().Namespace(sa.Namespace).List(labels.Everything()) {
		if s.Type == corev1.SecretTypeServiceAccountToken && s.Annotations[corev1.ServiceAccountNameKey] == sa.Name {
			keys = append(keys, s.Namespace+"/"+s.Name)
		}
	}
	return keys
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, reconcile.Ignore(c.sync))
	return nil
}

// sync brings one token Secret in line with its account: deleted when the account is gone,
// else filled.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return nil
	}
	secret, err := c.secrets.Lister().Namespace(ns).Get(name)
	if err != nil || secret == nil || secret.Type != corev1.SecretTypeServiceAccountToken {
		return nil // gone, or no longer a token Secret
	}
	sa, err := c.account(ctx, ns, secret.Annotations[corev1.ServiceAccountNameKey], types.UID(secret.Annotations[corev1.ServiceAccountUIDKey]))
	if err != nil {
		return err
	}
	secrets := client.Resource[*corev1.Secret](c.client, "secrets").Namespace(ns)
	if sa == nil {
		// Only this Secret, not one of the same name made since.
		err := secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &secret.UID}})
		if err == nil || client.IsNotFound(err) || client.IsConflict(err) {
			return nil
		}
		return err
	}
	if !c.needsUpdate(secret) {
		return nil
	}
	// The token is made from the live Secret, and written only if the cache was current: two
	// workers (or replicas) must not sign two tokens for one Secret.
	live, err := secrets.Get(ctx, name)
	if client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if live.ResourceVersion != secret.ResourceVersion || !c.needsUpdate(live) {
		return nil
	}
	next, err := c.fill(live, sa)
	if err != nil {
		return err
	}
	_, err = secrets.Update(ctx, next)
	if client.IsConflict(err) || client.IsNotFound(err) {
		return nil // changed meanwhile: its update event queues it again
	}
	return err
}

// account returns the account a token Secret names, from the cache or else the API; nil when
// there is none, or only one with another UID than the Secret records.
func (c *Controller) account(ctx context.Context, ns, name string, uid types.UID) (*corev1.ServiceAccount, error) {
	if name == "" {
		return nil, nil
	}
	matches := func(sa *corev1.ServiceAccount) bool { return uid == "" || sa.UID == uid }
	if sa, err := c.accounts.Lister().Namespace(ns).Get(name); err == nil && sa != nil && matches(sa) {
		return sa, nil
	}
	sa, err := client.Resource[*corev1.ServiceAccount](c.client, "serviceaccounts").Namespace(ns).Get(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case !matches(sa):
		return nil, nil
	}
	return sa, nil
}

// needsUpdate reports whether s lacks its token or namespace, or holds another CA than ours.
func (c *Controller) needsUpdate(s *corev1.Secret) bool {
	return len(s.Data[corev1.ServiceAccountTokenKey]) == 0 ||
		len(s.Data[corev1.ServiceAccountNamespaceKey]) == 0 ||
		len(c.rootCA) > 0 && !bytes.Equal(s.Data[corev1.ServiceAccountRootCAKey], c.rootCA)
}

// fill returns s with what it lacks and the account's name and UID recorded.
func (c *Controller) fill(s *corev1.Secret, sa *corev1.ServiceAccount) (*corev1.Secret, error) {
	s = s.DeepCopy()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	if len(c.rootCA) > 0 {
		s.Data[corev1.ServiceAccountRootCAKey] = c.rootCA
	}
	if len(s.Data[corev1.ServiceAccountNamespaceKey]) == 0 {
		s.Data[corev1.ServiceAccountNamespaceKey] = []byte(s.Namespace)
	}
	if len(s.Data[corev1.ServiceAccountTokenKey]) == 0 {
		token, err := serviceaccount.LegacyToken(c.signer, sa, s)
		if err != nil {
			return nil, err
		}
		s.Data[corev1.ServiceAccountTokenKey] = []byte(token)
	}
	s.Annotations[corev1.ServiceAccountNameKey] = sa.Name
	s.Annotations[corev1.ServiceAccountUIDKey] = string(sa.UID)
	return s, nil
}
