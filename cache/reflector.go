package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/kplane/kplane/client"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// ListerWatcher is the API a reflector reads; a *client.Typed[T] (optionally narrowed to a
// namespace) is one.
type ListerWatcher[T Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (*client.List[T], error)
	Watch(ctx context.Context, opts metav1.ListOptions) (*client.Watch[T], error)
}

// Sink receives what a reflector learns, in order: a whole state (Replace) and the changes
// after it. The DeltaFIFO is one.
type Sink[T Object] interface {
	Add(obj T) error
	Update(obj T) error
	Delete(obj T) error
	Replace(list []T, resourceVersion string) error
}

// Reflector keeps a Sink equal to the server's state of one resource: it lists (or streams the
// initial list with sendInitialEvents), then watches from the list's resourceVersion, resuming
// watches that end and relisting when the server no longer has the history to resume from.
type Reflector[T Object] struct {
	lw   ListerWatcher[T]
	sink Sink[T]
	// Selectors narrow what is listed and watched.
	LabelSelector, FieldSelector string
	// PageSize is the list page size (0 = 500).
	PageSize int64
	// Transform, if set, is applied to every object as it arrives, before it is queued: dropping
	// fields there keeps them from ever piling up in memory.
	Transform func(T) T
	// SharedParts, if set, makes lists and watches decode objects with the parts that are alike from
	// object to object shared between them (see client.SharedParts), so the sink must never
	// change what it receives. Informers set it: their caches are read-only by contract.
	SharedParts *client.SharedParts
	// useWatchList is cleared when the server refuses streaming initial lists.
	useWatchList bool
	// lastRV is the newest resourceVersion seen; "" means a consistent relist is needed. Only
	// Run's goroutine writes it; LastSyncResourceVersion reads it from anywhere.
	lastRV atomic.Value
	name   string
}

// sharingContext is ctx carrying the shared parts, if any, for a list or watch.
func (r *Reflector[T]) sharingContext(ctx context.Context) context.Context {
	if r.SharedParts == nil {
		return ctx
	}
	return client.WithSharedParts(ctx, r.SharedParts)
}

// NewReflector makes a reflector from lw into sink; name labels its log lines.
func NewReflector[T Object](name string, lw ListerWatcher[T], sink Sink[T]) *Reflector[T] {
	r := &Reflector[T]{lw: lw, sink: sink, useWatchList: true, name: name}
	r.setRV("0")
	return r
}

// LastSyncResourceVersion is the newest resourceVersion the reflector has seen.
func (r *Reflector[T]) LastSyncResourceVersion() string { return r.lastRV.Load().(string) }

func (r *Reflector[T]) setRV(rv string) { r.lastRV.Store(rv) }

// forgetRV makes the next list a consistent one when the server cannot serve our
// resourceVersion: too old (410) or newer than it has (504 after an etcd restore).
func (r *Reflector[T]) forgetRV(err error) {
	if client.IsExpired(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		r.setRV("")
	}
}

// Run lists and watches until ctx is cancelled, backing off exponentially (with jitter) after
// failures.
func (r *Reflector[T]) Run(ctx context.Context) {
	const initial, maxBackoff = 800 * time.Millisecond, 30 * time.Second
	backoff := initial
	for ctx.Err() == nil {
		started := time.Now()
		err := r.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > 2*time.Minute {
			backoff = initial // it ran well for a while: this is a new failure, not a streak
		}
		slog.Info("reflector: list-watch ended, retrying", "resource", r.name, "err", err, "in", backoff)
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// listAndWatch fills the sink and then follows changes; it returns when the state must be
// fetched again (an error, or history the server no longer has).
func (r *Reflector[T]) listAndWatch(ctx context.Context) error {
	var w *client.Watch[T]
	if r.useWatchList {
		var err error
		w, err = r.watchList(ctx)
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			// The server does not stream initial lists: list, then watch.
			slog.Info("reflector: streaming list not supported, falling back to list+watch", "resource", r.name, "err", err)
			r.useWatchList = false
		} else if err != nil {
			return err
		}
	}
	if w == nil {
		if err := r.list(ctx); err != nil {
			return err
		}
	}
	retry := newBackoff()
	for {
		if w == nil {
			var err error
			w, err = r.lw.Watch(r.sharingContext(ctx), metav1.ListOptions{
				ResourceVersion: r.LastSyncResourceVersion(), AllowWatchBookmarks: true, LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector,
				TimeoutSeconds: ptr(int64(300 + rand.IntN(300))),
			})
			r.forgetRV(err)
			switch {
			case err == nil:
			case r.LastSyncResourceVersion() == "" || !retriable(err):
				return err
			default:
				// The server is restarting or busy: our state is still good, so wait and
				// resume the watch instead of listing everything again.
				if !retry.wait(ctx) {
					return nil
				}
				continue
			}
		}
		started := time.Now()
		events, err := r.follow(ctx, w)
		w.Stop()
		w = nil
		if err != nil && r.LastSyncResourceVersion() != "" && retriable(err) {
			// The stream broke (or the server had a passing trouble): everything before the
			// break was applied, so resume from there after a pause rather than relist.
			slog.Info("reflector: watch broke, resuming", "resource", r.name, "err", err)
			if !retry.wait(ctx) {
				return nil
			}
			continue
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if events == 0 && time.Since(started) < time.Second {
			// A watch that ends at once, empty, would otherwise be retried in a tight loop.
			if !retry.wait(ctx) {
				return nil
			}
			continue
		}
		retry.reset()
		// The watch ended normally (timeout, server restart): resume from lastRV.
	}
}

// retriable errors are the server's passing troubles: it is unreachable, overloaded or
// timing out.
func retriable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // no answer at all: a connection error
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsInternalError(err)
}

// backoff is a jittered exponential wait, 800 ms doubling to 30 s.
type backoff struct{ next time.Duration }

func newBackoff() *backoff { return &backoff{next: 800 * time.Millisecond} }

func (b *backoff) reset() { b.next = 800 * time.Millisecond }

// wait sleeps for the next interval; it reports false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, 30*time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// list reads the whole state page by page and replaces the sink's with it.
func (r *Reflector[T]) list(ctx context.Context) error {
	opts := metav1.ListOptions{ResourceVersion: r.LastSyncResourceVersion(), LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector, Limit: r.PageSize}
	if opts.Limit <= 0 {
		opts.Limit = 500
	}
	var items []T
	for {
		page, err := r.lw.List(r.sharingContext(ctx), opts)
		if client.IsExpired(err) && (opts.ResourceVersion != "" || opts.Continue != "") {
			// Too old even to list at, or the continue token expired while paging: start over
			// from the current state (once: a consistent first page cannot expire).
			r.setRV("")
			return r.list(ctx)
		}
		if err != nil {
			return err
		}
		for _, obj := range page.Items {
			items = append(items, r.transform(obj))
		}
		if page.Continue == "" {
			if err := r.sink.Replace(items, page.ResourceVersion); err != nil {
				return err
			}
			r.setRV(page.ResourceVersion)
			return nil
		}
		opts.Continue, opts.ResourceVersion = page.Continue, ""
	}
}

// watchList starts a watch that streams the initial state (sendInitialEvents), collects it up
// to the bookmark that ends it, replaces the sink's state with it, and returns the watch for
// following the changes after it.
func (r *Reflector[T]) watchList(ctx context.Context) (*client.Watch[T], error) {
	send := true
	// The first streamed list is a consistent one (as client-go's is): synced then means
	// "as of when we started", not "as of whatever the server's cache had".
	rv := r.LastSyncResourceVersion()
	if rv == "0" {
		rv = ""
	}
	w, err := r.lw.Watch(r.sharingContext(ctx), metav1.ListOptions{
		SendInitialEvents: &send, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		ResourceVersion: rv, LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector,
		TimeoutSeconds: ptr(int64(300 + rand.IntN(300))),
	})
	if err != nil {
		r.forgetRV(err)
		return nil, err
	}
	var items []T
	for {
		select {
		case <-ctx.Done():
			w.Stop()
			return nil, ctx.Err()
		case ev, ok := <-w.Events:
			if !ok {
				return nil, errors.New("watch ended before the initial list was complete")
			}
			switch ev.Type {
			case watch.Added, watch.Bookmark:
				if isNil(ev.Object) {
					w.Stop()
					return nil, fmt.Errorf("%s event without an object", ev.Type)
				}
			}
			switch ev.Type {
			case watch.Added:
				items = append(items, r.transform(ev.Object))
			case watch.Bookmark:
				if ev.Object.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					rv := ev.Object.GetResourceVersion()
					if err := r.sink.Replace(items, rv); err != nil {
						w.Stop()
						return nil, err
					}
					r.setRV(rv)
					return w, nil
				}
			case watch.Error:
				w.Stop()
				r.forgetRV(ev.Err)
				return nil, ev.Err
			default:
				w.Stop()
				return nil, errors.New("unexpected " + string(ev.Type) + " event in the initial list")
			}
		}
	}
}

// follow applies watch events to the sink until the watch ends and returns how many it saw.
// It returns an error only when the state must be listed again.
func (r *Reflector[T]) follow(ctx context.Context, w *client.Watch[T]) (int, error) {
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n, nil
		case ev, ok := <-w.Events:
			if !ok {
				return n, nil
			}
			n++
			if ev.Type == watch.Error {
				r.forgetRV(ev.Err)
				return n, ev.Err
			}
			if isNil(ev.Object) {
				return n, fmt.Errorf("%s event without an object", ev.Type)
			}
			var err error
			switch ev.Type {
			case watch.Added:
				err = r.sink.Add(r.transform(ev.Object))
			case watch.Modified:
				err = r.sink.Update(r.transform(ev.Object))
			case watch.Deleted:
				err = r.sink.Delete(r.transform(ev.Object))
			}
			if err != nil {
				return n, err
			}
			if rv := ev.Object.GetResourceVersion(); rv != "" {
				r.setRV(rv)
			}
		}
	}
}

// isNil reports whether a typed object pointer is nil.
func isNil[T Object](obj T) bool {
	return reflect.ValueOf(obj).IsNil()
}

func (r *Reflector[T]) transform(obj T) T {
	if r.Transform == nil {
		return obj
	}
	return r.Transform(obj)
}

func ptr[V any](v V) *V { return &v }
