package cache

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
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
	// useWatchList is cleared when the server refuses streaming initial lists.
	useWatchList bool
	// lastRV is the newest resourceVersion seen; "" means a consistent relist is needed.
	lastRV string
	name   string
}

// NewReflector makes a reflector from lw into sink; name labels its log lines.
func NewReflector[T Object](name string, lw ListerWatcher[T], sink Sink[T]) *Reflector[T] {
	return &Reflector[T]{lw: lw, sink: sink, useWatchList: true, lastRV: "0", name: name}
}

// LastSyncResourceVersion is the newest resourceVersion the reflector has seen.
func (r *Reflector[T]) LastSyncResourceVersion() string { return r.lastRV }

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
	for {
		if w == nil {
			var err error
			w, err = r.lw.Watch(ctx, metav1.ListOptions{
				ResourceVersion: r.lastRV, AllowWatchBookmarks: true, LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector,
				TimeoutSeconds: ptr(int64(300 + rand.IntN(300))),
			})
			if client.IsExpired(err) {
				r.lastRV = ""
				return err
			}
			if err != nil {
				return err
			}
		}
		err := r.follow(ctx, w)
		w.Stop()
		w = nil
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		// The watch ended normally (timeout, server restart): resume from lastRV.
	}
}

// list reads the whole state page by page and replaces the sink's with it.
func (r *Reflector[T]) list(ctx context.Context) error {
	opts := metav1.ListOptions{ResourceVersion: r.lastRV, LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector, Limit: r.PageSize}
	if opts.Limit <= 0 {
		opts.Limit = 500
	}
	var items []T
	for {
		page, err := r.lw.List(ctx, opts)
		if client.IsExpired(err) && opts.ResourceVersion != "" {
			// Too old even to list at (or the continue token expired): take the current state.
			r.lastRV = ""
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
			r.lastRV = page.ResourceVersion
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
	w, err := r.lw.Watch(ctx, metav1.ListOptions{
		SendInitialEvents: &send, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		ResourceVersion: r.lastRV, LabelSelector: r.LabelSelector, FieldSelector: r.FieldSelector,
		TimeoutSeconds: ptr(int64(300 + rand.IntN(300))),
	})
	if err != nil {
		if client.IsExpired(err) {
			r.lastRV = ""
		}
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
			case watch.Added:
				items = append(items, r.transform(ev.Object))
			case watch.Bookmark:
				if ev.Object.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					rv := ev.Object.GetResourceVersion()
					if err := r.sink.Replace(items, rv); err != nil {
						w.Stop()
						return nil, err
					}
					r.lastRV = rv
					return w, nil
				}
			case watch.Error:
				w.Stop()
				return nil, ev.Err
			default:
				w.Stop()
				return nil, errors.New("unexpected " + string(ev.Type) + " event in the initial list")
			}
		}
	}
}

// follow applies watch events to the sink until the watch ends. It returns an error only when
// the state must be relisted.
func (r *Reflector[T]) follow(ctx context.Context, w *client.Watch[T]) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			var err error
			switch ev.Type {
			case watch.Added:
				err = r.sink.Add(r.transform(ev.Object))
			case watch.Modified:
				err = r.sink.Update(r.transform(ev.Object))
			case watch.Deleted:
				err = r.sink.Delete(r.transform(ev.Object))
			case watch.Bookmark:
			case watch.Error:
				if client.IsExpired(ev.Err) {
					r.lastRV = ""
				}
				return ev.Err
			}
			if err != nil {
				return err
			}
			if ev.Object.GetResourceVersion() != "" {
				r.lastRV = ev.Object.GetResourceVersion()
			}
		}
	}
}

func (r *Reflector[T]) transform(obj T) T {
	if r.Transform == nil {
		return obj
	}
	return r.Transform(obj)
}

func ptr[V any](v V) *V { return &v }
