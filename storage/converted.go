package storage

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Converter turns a resource's stored objects into those of one version it is served at, and
// back. Converters may be slow (a custom resource's conversion webhook), so a Converted store
// calls them per request, never while the watch cache holds its lock.
type Converter interface {
	// Served converts stored objects to the served version, all in one call (a list's items go
	// to a conversion webhook in one review). Objects already in it may be returned as they
	// are: the results are read, never modified.
	Served(ctx context.Context, stored []Object) ([]Object, error)
	// Stored converts an object of the served version to the version it is stored as.
	Stored(ctx context.Context, obj Object) (Object, error)
}

// Converted is a resource served at another version than its objects are stored as: it reads
// and writes through the Store of the stored version (one etcd key per object, one watch cache,
// one resourceVersion history, whichever version a client uses), converting each object on its
// way out and in. Label selectors and selectors on metadata fields are matched on the stored
// objects; other field selectors on the converted ones.
type Converted struct {
	base *Store
	cfg  ResourceConfig // the served version's: its kinds, list type and fields
	conv Converter
}

// NewConverted serves base's objects as cfg's, converted by conv.
func NewConverted(base *Store, cfg ResourceConfig, conv Converter) *Converted {
	return &Converted{base: base, cfg: cfg, conv: conv}
}

// Run does nothing: the watch cache is the base store's, run by its owner.
func (v *Converted) Run(ctx context.Context) {}

// WaitReady waits for the base store's watch cache.
func (v *Converted) WaitReady(ctx context.Context) error { return v.base.WaitReady(ctx) }

// WrittenRevision is the base store's: see Store.WrittenRevision.
func (v *Converted) WrittenRevision() string { return v.base.WrittenRevision() }

// served converts stored objects, giving those the converter left without a kind the served
// one.
func (v *Converted) served(ctx context.Context, stored []Object) ([]Object, error) {
	out, err := v.conv.Served(ctx, stored)
	if err != nil {
		return nil, err
	}
	for _, o := range out {
		if o.GetObjectKind().GroupVersionKind().Empty() {
			o.GetObjectKind().SetGroupVersionKind(v.cfg.Kind)
		}
	}
	return out, nil
}

func (v *Converted) one(ctx context.Context, stored Object) (Object, error) {
	out, err := v.served(ctx, []Object{stored})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// rename makes the base store's errors name the served resource (events.k8s.io Events are
// stored under the core ones' keys).
func (v *Converted) rename(err error) error {
	var se *apierrors.StatusError
	from, to := v.base.cfg.GroupResource, v.cfg.GroupResource
	if from == to || !errors.As(err, &se) {
		return err
	}
	st := se.ErrStatus
	st.Message = strings.Replace(st.Message, from.String(), to.String(), 1)
	if d := st.Details; d != nil && d.Group == from.Group && d.Kind == from.Resource {
		dd := *d
		dd.Group, dd.Kind = to.Group, to.Resource
		st.Details = &dd
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// Get reads one object from etcd and converts it.
func (v *Converted) Get(ctx context.Context, ns, name string) (Object, error) {
	obj, err := v.base.Get(ctx, ns, name)
	if err != nil {
		return nil, v.rename(err)
	}
	return v.one(ctx, obj)
}

// GetCached reads one object from the watch cache and converts it.
func (v *Converted) GetCached(ns, name string) (Object, error) {
	obj, err := v.base.GetCached(ns, name)
	if err != nil {
		return nil, v.rename(err)
	}
	return v.one(context.Background(), obj)
}

// Create converts obj to the stored version, stores it and returns what was stored, converted
// back.
func (v *Converted) Create(ctx context.Context, obj Object, claims []string, dryRun bool) (Object, error) {
	stored, err := v.conv.Stored(ctx, obj)
	if err != nil {
		return nil, err
	}
	out, err := v.base.Create(ctx, stored, claims, dryRun)
	if err != nil {
		return nil, v.rename(err)
	}
	return v.one(ctx, out)
}

// Taken reports whether claim is held.
func (v *Converted) Taken(ctx context.Context, claim string) (bool, error) {
	return v.base.Taken(ctx, claim)
}

func (v *Converted) claims(ctx context.Context, claimsOf ClaimsFunc) ClaimsFunc {
	if claimsOf == nil {
		return nil
	}
	return func(stored Object) []string {
		obj, err := v.one(ctx, stored)
		if err != nil {
			return nil
		}
		return claimsOf(obj)
	}
}

// Update applies tryUpdate to the converted current object and stores its result converted
// back.
func (v *Converted) Update(ctx context.Context, ns, name string, tryUpdate UpdateFunc, claimsOf ClaimsFunc, dryRun bool) (Object, error) {
	out, err := v.base.Update(ctx, ns, name, func(cur Object) (Object, error) {
		obj, err := v.one(ctx, cur)
		if err != nil {
			return nil, err
		}
		next, err := tryUpdate(obj)
		if err != nil {
			return nil, err
		}
		return v.conv.Stored(ctx, next)
	}, v.claims(ctx, claimsOf), dryRun)
	if err != nil {
		return nil, v.rename(err)
	}
	return v.one(ctx, out)
}

// Delete removes the object if precondition accepts its converted current state.
func (v *Converted) Delete(ctx context.Context, ns, name string, precondition func(Object) error, claimsOf ClaimsFunc, dryRun bool) (Object, error) {
	var pre func(Object) error
	if precondition != nil {
		pre = func(cur Object) error {
			obj, err := v.one(ctx, cur)
			if err != nil {
				return err
			}
			return precondition(obj)
		}
	}
	out, err := v.base.Delete(ctx, ns, name, pre, v.claims(ctx, claimsOf), dryRun)
	if err != nil {
		return nil, v.rename(err)
	}
	return v.one(ctx, out)
}

// split divides a predicate into what the stored objects can answer (labels, metadata
// fields) and a field selector the converted objects must (nil when there is none).
func (v *Converted) split(p Predicate) (stored Predicate, served *Predicate) {
	if p.Field == nil || p.Field.Empty() {
		return p, nil
	}
	for _, r := range p.Field.Requirements() {
		if !strings.HasPrefix(r.Field, "metadata.") {
			return Predicate{Label: p.Label}, &Predicate{Field: p.Field, Attrs: p.Attrs}
		}
	}
	return Predicate{Label: p.Label, Field: p.Field, Attrs: v.base.cfg.Attrs}, nil
}

func (v *Converted) filter(ctx context.Context, stored []Object, served *Predicate) ([]Object, error) {
	objs, err := v.served(ctx, stored)
	if err != nil || served == nil {
		return objs, err
	}
	kept := objs[:0:0]
	for _, o := range objs {
		if served.Matches(o) {
			kept = append(kept, o)
		}
	}
	return kept, nil
}

// List lists the stored objects and converts them in one call. A field selector the stored
// objects cannot answer filters a page after conversion, so such a page may hold fewer items
// than its limit (as the API allows).
func (v *Converted) List(ctx context.Context, ns string, opts ListOptions) (runtime.Object, error) {
	var served *Predicate
	opts.Predicate, served = v.split(opts.Predicate)
	list, err := v.base.List(ctx, ns, opts)
	if err != nil {
		return nil, v.rename(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, internal(err)
	}
	stored := make([]Object, len(items))
	for i, it := range items {
		stored[i] = it.(Object)
	}
	objs, err := v.filter(ctx, stored, served)
	if err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, internal(err)
	}
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return v.makeList(out, lm.GetResourceVersion(), lm.GetContinue())
}

func (v *Converted) makeList(items []runtime.Object, rv, cont string) (runtime.Object, error) {
	list := v.cfg.NewList()
	if err := meta.SetList(list, items); err != nil {
		return nil, internal(err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, internal(err)
	}
	lm.SetResourceVersion(rv)
	lm.SetContinue(cont)
	return list, nil
}

// Watch watches the stored objects and converts each event as it is delivered. A conversion
// that fails ends the watch with an Error event carrying the failure.
func (v *Converted) Watch(ctx context.Context, ns string, opts WatchOptions) (*Watch, error) {
	var served *Predicate
	opts.Predicate, served = v.split(opts.Predicate)
	bw, err := v.base.Watch(ctx, ns, opts)
	if err != nil {
		return nil, v.rename(err)
	}
	cw := &convertingWatch{v: v, served: served, selected: map[string]bool{}}
	initial, err := cw.initial(ctx, bw.Initial)
	if err != nil {
		bw.Stop()
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	out := make(chan Event, cap(bw.C))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		cw.run(wctx, bw.C, out)
	}()
	stop := func() {
		cancel()
		bw.Stop()
		<-done
	}
	return &Watch{Initial: initial, C: out, Stop: stop}, nil
}

// convertingWatch converts one watch's events. With a field selector on converted objects it
// keeps which objects the watcher holds, to turn an object entering or leaving the selection
// into ADDED or DELETED as the watch cache does for the selectors it evaluates itself.
type convertingWatch struct {
	v        *Converted
	served   *Predicate
	selected map[string]bool // by namespace/name, only with served
}

func keyOf(o Object) string { return o.GetNamespace() + "/" + o.GetName() }

func (cw *convertingWatch) initial(ctx context.Context, events []Event) ([]Event, error) {
	var stored []Object
	for _, e := range events {
		if e.Object != nil {
			stored = append(stored, e.Object)
		}
	}
	if len(stored) == 0 {
		return events, nil
	}
	objs, err := cw.v.served(ctx, stored)
	if err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(events))
	i := 0
	for _, e := range events {
		if e.Object == nil {
			out = append(out, e)
			continue
		}
		e.Object = objs[i]
		i++
		if ev, ok := cw.translate(e); ok {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (cw *convertingWatch) translate(e Event) (Event, bool) {
	if cw.served == nil {
		return e, true
	}
	key := keyOf(e.Object)
	was := cw.selected[key]
	if e.Type == watch.Deleted {
		delete(cw.selected, key)
		return e, was
	}
	now := cw.served.Matches(e.Object)
	switch {
	case now && was:
		e.Type = watch.Modified
	case now:
		e.Type = watch.Added
		cw.selected[key] = true
	case was:
		e.Type = watch.Deleted
		delete(cw.selected, key)
	default:
		return e, false
	}
	return e, true
}

func (cw *convertingWatch) run(ctx context.Context, in <-chan Event, out chan<- Event) {
	send := func(e Event) bool {
		select {
		case out <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		var e Event
		var ok bool
		select {
		case e, ok = <-in:
		case <-ctx.Done():
			return
		}
		if !ok {
			return
		}
		if e.Object != nil {
			obj, err := cw.v.one(ctx, e.Object)
			if err != nil {
				send(Event{Type: watch.Error, Err: err, Rev: e.Rev})
				return
			}
			e.Object = obj
			var keep bool
			if e, keep = cw.translate(e); !keep {
				continue
			}
		}
		if !send(e) {
			return
		}
	}
}
