package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/internal/quota"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Validating admission: what Kubernetes checks after an object has passed its own validation.
// LimitRanger refuses pods and claims outside their namespace's LimitRanges; then ResourceQuota
// charges the write to every quota of the namespace that matches it, refusing it if one has no
// room. The charge is written to the quotas' status before the object is stored, so that two
// writes racing for a quota's last unit cannot both pass: the quota write is conflict-checked,
// and the loser is judged again against the winner's usage. A write that fails after its charge
// (the object's own store) leaves the quota over-counted until the resource quota controller
// recounts it, as in Kubernetes: counting too much only refuses, never lets too much through.

var resourceQuotasGVR = schema.GroupVersionResource{Version: "v1", Resource: "resourcequotas"}

// quotaWriteAttempts bounds the rounds of a charge whose quota writes keep conflicting with
// other writers (the controller, other apiservers); this server's own charges queue on a lock.
const quotaWriteAttempts = 5

// validateBuiltinAdmission runs Kubernetes' built-in validating admission plugins on obj (old
// is the stored object on update, nil on create): LimitRanger's bounds, then the resource's
// own (a PriorityClass's single default, a claim's expansion). They run before the validating
// admission policies and webhooks; ResourceQuota, the last plugin, is admitQuota.
func (s *Server) validateBuiltinAdmission(ctx context.Context, res *resource, obj, old storage.Object, subresource string) error {
	if subresource == "" && res.info.GroupVersion.Group == "" {
		if err := registry.CheckLimitRanges(ctx, s.objects(), obj, old); err != nil {
			return err
		}
	}
	return res.strategy.ValidateAdmissionFor(ctx, s.objects(), obj, old, subresource)
}

// admittedUpdate wraps an update step with quota admission of its result against the stored
// object it replaces, for the resources whose updates quota charges. The store runs
// the step again when the object changed before its write landed; a charge made by a step whose
// write then lost stays counted until the controller recounts (as in Kubernetes, where quota
// admission runs inside the same retried update).
func (s *Server) admittedUpdate(ctx context.Context, req request, tryUpdate storage.UpdateFunc, dry bool) storage.UpdateFunc {
	gr := req.res.info.GroupResource()
	if !quota.UpdatesCharged(gr) {
		return tryUpdate
	}
	return func(cur storage.Object) (storage.Object, error) {
		// The update step reads cur and builds a new object; cur stays the stored state.
		obj, err := tryUpdate(cur)
		if err != nil {
			return nil, err
		}
		if err := s.admitQuota(ctx, req.res, obj, cur, req.subresource, dry); err != nil {
			return nil, err
		}
		return obj, nil
	}
}

// admitQuota is ResourceQuota admission: it judges the write against the quotas of obj's
// namespace and, unless dry, writes the usage it adds to their status.
func (s *Server) admitQuota(ctx context.Context, res *resource, obj, old storage.Object, subresource string, dry bool) error {
	gr := res.info.GroupResource()
	ns := obj.GetNamespace()
	if !res.info.Namespaced || ns == "" || quota.Ignored(gr) {
		return nil
	}
	req := quota.Request{Resource: gr, Subresource: subresource, Operation: quota.Create, Object: obj, Now: time.Now()}
	if old != nil {
		req.Operation, req.Old = quota.Update, old
	}
	if !quota.For(gr).Handles(req.Operation, subresource, obj, old) {
		return nil
	}
	// A first judgement from the watch cache, without the lock: most writes match no quota.
	// Only a refusal or a charge needs the current state (a refusal must not come from a
	// usage the controller lowered a moment ago). The cache is read once it holds this
	// server's own quota writes: a quota created a moment ago counts.
	quotas, err := s.namespaceQuotas(ctx, ns, false)
	if err != nil {
		return err
	}
	charged, err := s.judgeQuota(res, obj, quotas, req)
	if err != nil {
		if quotas, err = s.namespaceQuotas(ctx, ns, true); err != nil {
			return err
		}
		charged, err = s.judgeQuota(res, obj, quotas, req)
	}
	if err != nil || dry || !changed(quotas, charged) {
		return err
	}
	unlock, err := lockNamespaceQuotas(ctx, s, ns)
	if err != nil {
		return err
	}
	defer unlock()
	// Under the lock, judge again from a fresh read: a charge written a moment ago by another
	// write of this server counts.
	if quotas, err = s.namespaceQuotas(ctx, ns, true); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		if charged, err = s.judgeQuota(res, obj, quotas, req); err != nil {
			return err
		}
		var failed []string
		var lastErr error
		for i := range charged {
			if quota.Equal(quotas[i].Status.Used, charged[i].Status.Used) {
				continue
			}
			if err := s.chargeQuota(ctx, &charged[i]); apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				failed, lastErr = append(failed, charged[i].Name), err
			} else if err != nil {
				return err
			}
		}
		if len(failed) == 0 {
			return nil
		}
		if attempt == quotaWriteAttempts {
			return lastErr
		}
		// The quotas written are charged; judge the write again against the current state of
		// those that were not (a deleted one no longer applies).
		fresh, err := s.namespaceQuotas(ctx, ns, true)
		if err != nil {
			return err
		}
		quotas = quotas[:0]
		for _, q := range fresh {
			for _, name := range failed {
				if q.Name == name {
					quotas = append(quotas, q)
				}
			}
		}
	}
}

// judgeQuota runs quota.Check, turning its refusal into Kubernetes' 403.
func (s *Server) judgeQuota(res *resource, obj storage.Object, quotas []corev1.ResourceQuota, req quota.Request) ([]corev1.ResourceQuota, error) {
	charged, err := quota.Check(quotas, req)
	var refusal *quota.Refusal
	switch {
	case errors.As(err, &refusal):
		return nil, apierrors.NewForbidden(res.info.GroupResource(), obj.GetName(), refusal)
	case err != nil:
		return nil, apierrors.NewInternalError(err)
	}
	return charged, nil
}

func changed(before, after []corev1.ResourceQuota) bool {
	for i := range before {
		if !quota.Equal(before[i].Status.Used, after[i].Status.Used) {
			return true
		}
	}
	return false
}

// namespaceQuotas reads the quotas of ns, ordered by name: from the watch cache once it holds
// this server's own quota writes, or (consistent) once it has caught up with etcd.
func (s *Server) namespaceQuotas(ctx context.Context, ns string, consistent bool) ([]corev1.ResourceQuota, error) {
	store := s.resources[resourceQuotasGVR].store
	opts := storage.ListOptions{ResourceVersion: store.WrittenRevision()}
	if consistent {
		opts.ResourceVersion = ""
	}
	list, err := store.List(ctx, ns, opts)
	if err != nil {
		return nil, err
	}
	items := list.(*corev1.ResourceQuotaList).Items
	// The list shares its objects with the watch cache: judge copies.
	out := make([]corev1.ResourceQuota, len(items))
	for i := range items {
		items[i].DeepCopyInto(&out[i])
	}
	quota.SortByName(out)
	return out, nil
}

// chargeQuota writes q's status.used, if q has not changed since it was read (its
// resourceVersion); otherwise it returns a Conflict.
func (s *Server) chargeQuota(ctx context.Context, q *corev1.ResourceQuota) error {
	quotas := s.resources[resourceQuotasGVR]
	_, err := quotas.store.Update(ctx, q.Namespace, q.Name, func(cur storage.Object) (storage.Object, error) {
		if cur.GetResourceVersion() != q.ResourceVersion {
			return nil, apierrors.NewConflict(quotas.info.GroupResource(), q.Name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		stored := cur.(*corev1.ResourceQuota)
		stored.Status.Used = q.Status.Used
		return stored, nil
	}, nil, false)
	return err
}

// Charges to one namespace's quotas by this server queue one after the other: racing each
// other, all but one would fail their conflict-checked write and read and judge again. The
// locks live outside Server to keep its definition as it is; they are keyed by server too, for
// the processes that run several.
var namespaceLocks = struct {
	sync.Mutex
	m map[namespaceLockKey]*namespaceLock
}{m: map[namespaceLockKey]*namespaceLock{}}

type namespaceLockKey struct {
	s  *Server
	ns string
}

type namespaceLock struct {
	held  chan struct{} // holds a value while the lock is taken
	users int           // holders and waiters: the entry goes when the last one leaves
}

// lockNamespaceQuotas takes the quota lock of ns on s, waiting at most as long as ctx lasts,
// and returns its release.
func lockNamespaceQuotas(ctx context.Context, s *Server, ns string) (func(), error) {
	key := namespaceLockKey{s, ns}
	namespaceLocks.Lock()
	l := namespaceLocks.m[key]
	if l == nil {
		l = &namespaceLock{held: make(chan struct{}, 1)}
		namespaceLocks.m[key] = l
	}
	l.users++
	namespaceLocks.Unlock()
	leave := func() {
		namespaceLocks.Lock()
		if l.users--; l.users == 0 {
			delete(namespaceLocks.m, key)
		}
		namespaceLocks.Unlock()
	}
	select {
	case l.held <- struct{}{}:
		return func() { <-l.held; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("waiting for the quotas of namespace %s: %v", ns, ctx.Err()), 1)
	}
}
