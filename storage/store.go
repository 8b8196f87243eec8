package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is a stored API object.
type Object interface {
	runtime.Object
	metav1.Object
}

// claimPrefix holds exclusive claims (ClusterIPs, NodePorts), each naming its holder.
const claimPrefix = "/registry/kplane.io/claims/"

// ErrClaimTaken is returned when a write would take a claim another object holds.
type ErrClaimTaken struct{ Claim string }

func (e *ErrClaimTaken) Error() string { return fmt.Sprintf("%s is already allocated", e.Claim) }

// Codec turns objects into stored bytes and back.
type Codec interface {
	Encode(obj runtime.Object) ([]byte, error)
	Decode(data []byte, into runtime.Object) error
}

// ResourceConfig describes one resource to the store.
type ResourceConfig struct {
	GroupResource schema.GroupResource
	Kind          schema.GroupVersionKind
	New           func() Object
	NewList       func() runtime.Object
	// Attrs gives the labels and fields a selector may match.
	Attrs AttrFunc
}

// Store keeps one resource under /registry/<group-resource>/<namespace>/<name>, with the etcd
// revision as resourceVersion, and a watch cache in front of it.
type Store struct {
	cfg    ResourceConfig
	cli    *clientv3.Client
	codec  Codec
	prefix string
	cache  *cacher
	// written is the revision of the latest write through this Store (see WrittenRevision).
	written atomic.Int64
}

// NewStore creates the store; call Run to start its watch cache.
func NewStore(e *Etcd, codec Codec, cfg ResourceConfig, opts CacheOptions) *Store {
	s := &Store{cfg: cfg, cli: e.Client, codec: codec, prefix: "/registry/" + cfg.GroupResource.String() + "/"}
	s.cache = newCacher(s, opts)
	return s
}

// Run fills the watch cache and keeps it current until ctx is cancelled.
func (s *Store) Run(ctx context.Context) { s.cache.run(ctx) }

// WaitReady blocks until the watch cache has its first list.
func (s *Store) WaitReady(ctx context.Context) error { return s.cache.waitReady(ctx) }

func (s *Store) key(ns, name string) string {
	if ns == "" {
		return s.prefix + name
	}
	return s.prefix + ns + "/" + name
}

func (s *Store) nsPrefix(ns string) string {
	if ns == "" {
		return s.prefix
	}
	return s.prefix + ns + "/"
}

func (s *Store) decode(data []byte, rev int64) (Object, error) {
	obj := s.cfg.New()
	if err := s.codec.Decode(data, obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", s.cfg.GroupResource, err)
	}
	// An object that records its own version (a custom resource stored before its CRD's
	// storage version changed) keeps it, for a Converter to convert from.
	if obj.GetObjectKind().GroupVersionKind().Empty() {
		obj.GetObjectKind().SetGroupVersionKind(s.cfg.Kind)
	}
	obj.SetResourceVersion(strconv.FormatInt(rev, 10))
	return obj, nil
}

func (s *Store) encode(obj Object) ([]byte, error) {
	obj.GetObjectKind().SetGroupVersionKind(s.cfg.Kind)
	rv := obj.GetResourceVersion()
	obj.SetResourceVersion("")
	data, err := s.codec.Encode(obj)
	obj.SetResourceVersion(rv)
	return data, err
}

func (s *Store) notFound(name string) error {
	return apierrors.NewNotFound(s.cfg.GroupResource, name)
}

// Get reads one object from etcd (a consistent read).
func (s *Store) Get(ctx context.Context, ns, name string) (Object, error) {
	_, obj, err := s.current(ctx, s.key(ns, name), name)
	return obj, err
}

// GetCached reads one object from the watch cache (resourceVersion=0 semantics).
func (s *Store) GetCached(ns, name string) (Object, error) {
	if obj, ok := s.cache.get(s.key(ns, name)); ok {
		return obj, nil
	}
	return nil, s.notFound(name)
}

// Create stores obj, which must not exist yet, together with claims, which must not be held.
func (s *Store) Create(ctx context.Context, obj Object, claims []string, dryRun bool) (Object, error) {
	key := s.key(obj.GetNamespace(), obj.GetName())
	if dryRun {
		resp, err := s.cli.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			return nil, internal(err)
		}
		if resp.Count > 0 {
			return nil, apierrors.NewAlreadyExists(s.cfg.GroupResource, obj.GetName())
		}
		return obj, s.checkClaims(ctx, claims, key)
	}
	data, err := s.encode(obj)
	if err != nil {
		return nil, internal(err)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	ops := []clientv3.Op{clientv3.OpPut(key, string(data))}
	for _, c := range claims {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(claimPrefix+c), "=", 0))
		ops = append(ops, clientv3.OpPut(claimPrefix+c, key))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return nil, internal(err)
	}
	if !resp.Succeeded {
		if err := s.checkClaims(ctx, claims, key); err != nil {
			return nil, err
		}
		return nil, apierrors.NewAlreadyExists(s.cfg.GroupResource, obj.GetName())
	}
	s.noteWrite(resp.Header.Revision)
	obj.SetResourceVersion(strconv.FormatInt(resp.Header.Revision, 10))
	return obj, nil
}

// noteWrite records the revision of a write through this Store.
func (s *Store) noteWrite(rev int64) {
	for {
		last := s.written.Load()
		if rev <= last || s.written.CompareAndSwap(last, rev) {
			return
		}
	}
}

// WrittenRevision is the revision of the latest write through this Store, as a
// resourceVersion ("0" before any). A list at it sees every write this server made, waiting
// for the watch cache only until it has applied them: read-your-writes without the etcd round
// trip of a consistent list (writes of other servers may still be missing).
func (s *Store) WrittenRevision() string {
	return strconv.FormatInt(s.written.Load(), 10)
}

// checkClaims returns ErrClaimTaken for the first claim held by someone other than owner.
func (s *Store) checkClaims(ctx context.Context, claims []string, owner string) error {
	for _, c := range claims {
		resp, err := s.cli.Get(ctx, claimPrefix+c)
		if err != nil {
			return internal(err)
		}
		if len(resp.Kvs) > 0 && string(resp.Kvs[0].Value) != owner {
			return &ErrClaimTaken{Claim: c}
		}
	}
	return nil
}

// Taken reports whether a claim is held.
func (s *Store) Taken(ctx context.Context, claim string) (bool, error) {
	resp, err := s.cli.Get(ctx, claimPrefix+claim, clientv3.WithCountOnly())
	if err != nil {
		return false, internal(err)
	}
	return resp.Count > 0, nil
}

// UpdateFunc computes the new state from the current one. Returning an error aborts the update.
// It may be called more than once when writers race; it must not keep state between calls.
type UpdateFunc func(cur Object) (Object, error)

// ClaimsFunc lists the claims an object holds.
type ClaimsFunc func(Object) []string

// current reads the stored object at key with its raw form.
func (s *Store) current(ctx context.Context, key, name string) (*mvccpb.KeyValue, Object, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, nil, internal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil, s.notFound(name)
	}
	kv := resp.Kvs[0]
	cur, err := s.decode(kv.Value, kv.ModRevision)
	if err != nil {
		return nil, nil, internal(err)
	}
	return kv, cur, nil
}

// Update applies tryUpdate to the stored object and writes the result if the object did not
// change in between, retrying on races. Claims the new state adds are taken and claims it drops
// are released in the same transaction. A write that changes nothing is skipped.
func (s *Store) Update(ctx context.Context, ns, name string, tryUpdate UpdateFunc, claimsOf ClaimsFunc, dryRun bool) (Object, error) {
	key := s.key(ns, name)
	for {
		kv, cur, err := s.current(ctx, key, name)
		if err != nil {
			return nil, err
		}
		var oldClaims []string
		if claimsOf != nil {
			oldClaims = claimsOf(cur)
		}
		next, err := tryUpdate(cur.DeepCopyObject().(Object))
		if err != nil {
			return nil, err
		}
		var newClaims []string
		if claimsOf != nil {
			newClaims = claimsOf(next)
		}
		taken, released := diff(newClaims, oldClaims), diff(oldClaims, newClaims)
		if dryRun {
			next.SetResourceVersion(cur.GetResourceVersion())
			return next, s.checkClaims(ctx, taken, key)
		}
		data, err := s.encode(next)
		if err != nil {
			return nil, internal(err)
		}
		if bytes.Equal(data, kv.Value) {
			next.SetResourceVersion(cur.GetResourceVersion())
			return next, nil
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)}
		ops := []clientv3.Op{clientv3.OpPut(key, string(data))}
		for _, c := range taken {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(claimPrefix+c), "=", 0))
			ops = append(ops, clientv3.OpPut(claimPrefix+c, key))
		}
		for _, c := range released {
			ops = append(ops, clientv3.OpDelete(claimPrefix+c))
		}
		tresp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, internal(err)
		}
		if tresp.Succeeded {
			s.noteWrite(tresp.Header.Revision)
			next.SetResourceVersion(strconv.FormatInt(tresp.Header.Revision, 10))
			return next, nil
		}
		if err := s.checkClaims(ctx, taken, key); err != nil {
			return nil, err
		}
		// The object changed under us: read it again and recompute.
	}
}

// Delete removes the object if precondition (which may be nil) accepts its current state,
// releasing its claims. It returns the last stored state.
func (s *Store) Delete(ctx context.Context, ns, name string, precondition func(Object) error, claimsOf ClaimsFunc, dryRun bool) (Object, error) {
	key := s.key(ns, name)
	for {
		kv, cur, err := s.current(ctx, key, name)
		if err != nil {
			return nil, err
		}
		if precondition != nil {
			if err := precondition(cur); err != nil {
				return nil, err
			}
		}
		if dryRun {
			return cur, nil
		}
		ops := []clientv3.Op{clientv3.OpDelete(key)}
		if claimsOf != nil {
			for _, c := range claimsOf(cur) {
				ops = append(ops, clientv3.OpDelete(claimPrefix+c))
			}
		}
		tresp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).Then(ops...).Commit()
		if err != nil {
			return nil, internal(err)
		}
		if tresp.Succeeded {
			s.noteWrite(tresp.Header.Revision)
			return cur, nil
		}
	}
}

// ListOptions selects what List and Watch return.
type ListOptions struct {
	ResourceVersion string // "" = consistent, "0" = any (cache), N = not older than N
	Exact           bool   // resourceVersionMatch=Exact: the state at exactly ResourceVersion
	Limit           int64
	Continue        string
	Predicate       Predicate
}

// List returns a list object of the resource's list type.
//
// Lists with a limit, a continue token or an exact resourceVersion page through etcd at a fixed
// revision; everything else is served from the watch cache, after waiting for it to be as fresh
// as the request demands (for a consistent list: the current etcd revision).
func (s *Store) List(ctx context.Context, ns string, opts ListOptions) (runtime.Object, error) {
	if opts.Continue != "" || opts.Exact || (opts.Limit > 0 && opts.ResourceVersion != "0") {
		return s.listEtcd(ctx, ns, opts)
	}
	var minRev int64
	switch opts.ResourceVersion {
	case "0":
	case "":
		rev, err := s.currentRevision(ctx)
		if err != nil {
			return nil, err
		}
		minRev = rev
	default:
		rev, err := ParseResourceVersion(opts.ResourceVersion)
		if err != nil {
			return nil, err
		}
		minRev = rev
	}
	items, rev, err := s.cache.list(ctx, s.nsPrefix(ns), minRev, opts.Predicate)
	if err != nil {
		return nil, err
	}
	return s.makeList(items, rev, "")
}

func (s *Store) makeList(items []runtime.Object, rev int64, cont string) (runtime.Object, error) {
	list := s.cfg.NewList()
	if err := meta.SetList(list, items); err != nil {
		return nil, internal(err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, internal(err)
	}
	lm.SetResourceVersion(strconv.FormatInt(rev, 10))
	lm.SetContinue(cont)
	return list, nil
}

func (s *Store) currentRevision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.prefix, clientv3.WithCountOnly())
	if err != nil {
		return 0, internal(err)
	}
	return resp.Header.Revision, nil
}

type continueToken struct {
	Version string `json:"v"`
	Rev     int64  `json:"rv"`
	Start   string `json:"start"`
}

func (s *Store) listEtcd(ctx context.Context, ns string, opts ListOptions) (runtime.Object, error) {
	prefix := s.nsPrefix(ns)
	start := prefix
	var rev int64
	if opts.Continue != "" {
		tok, err := decodeContinue(opts.Continue)
		if err != nil {
			return nil, err
		}
		rev, start = tok.Rev, prefix+tok.Start
	} else if opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
		r, err := ParseResourceVersion(opts.ResourceVersion)
		if err != nil {
			return nil, err
		}
		if opts.Exact {
			rev = r
		}
	}
	var items []runtime.Object
	var cont string
	for {
		getOpts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}
		if rev > 0 {
			getOpts = append(getOpts, clientv3.WithRev(rev))
		}
		if opts.Limit > 0 {
			getOpts = append(getOpts, clientv3.WithLimit(opts.Limit-int64(len(items))+1))
		}
		resp, err := s.cli.Get(ctx, start, getOpts...)
		if err != nil {
			if isCompacted(err) {
				if opts.Continue != "" {
					return nil, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
				}
				return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", rev))
			}
			if errors.Is(err, rpctypes.ErrFutureRev) {
				return nil, TooLargeResourceVersion(rev)
			}
			return nil, internal(err)
		}
		if rev == 0 {
			// Later pages read the same revision as the first.
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if opts.Limit > 0 && int64(len(items)) == opts.Limit {
				cont = encodeContinue(continueToken{Version: "meta.k8s.io/v1", Rev: rev, Start: strings.TrimPrefix(string(kv.Key), prefix)})
				break
			}
			obj, err := s.decode(kv.Value, kv.ModRevision)
			if err != nil {
				return nil, internal(err)
			}
			if opts.Predicate.Matches(obj) {
				items = append(items, obj)
			}
		}
		// A selector may filter a page below the limit: keep reading until the limit is met
		// or the range is exhausted, as Kubernetes does.
		if cont != "" || !resp.More || opts.Limit == 0 {
			break
		}
		last := resp.Kvs[len(resp.Kvs)-1].Key
		start = string(last) + "\x00"
	}
	return s.makeList(items, rev, cont)
}

func encodeContinue(t continueToken) string {
	data, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(data)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	data, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(data, &t)
	}
	if err != nil || t.Version != "meta.k8s.io/v1" || t.Rev <= 0 || strings.Contains(t.Start, "..") || strings.HasPrefix(t.Start, "/") {
		return t, apierrors.NewBadRequest("continue key is not valid")
	}
	return t, nil
}

// ParseResourceVersion parses a resourceVersion parameter; bogus values are a 400.
func ParseResourceVersion(rv string) (int64, error) {
	if rv == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", rv))
	}
	return n, nil
}

// TooLargeResourceVersion is the 504 a client gets for a revision the server has not reached.
func TooLargeResourceVersion(rev int64) error {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: unknown", rev), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		found := false
		for _, y := range b {
			if x == y {
				found = true
				break
			}
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}

func isCompacted(err error) bool { return errors.Is(err, rpctypes.ErrCompacted) }

func internal(err error) error {
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	return apierrors.NewInternalError(err)
}
