package storage

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// CacheOptions tunes a watch cache.
type CacheOptions struct {
	// Window is how many events of history are kept for watches that resume from an older
	// resourceVersion; older ones get 410 Expired.
	Window int
	// BookmarkInterval is how often watchers that asked for bookmarks get one.
	BookmarkInterval time.Duration
	// WatcherBuffer is how many events a watcher may fall behind before it is closed (its
	// client then resumes from the last resourceVersion it saw).
	WatcherBuffer int
	// FreshnessTimeout bounds the wait for the cache to reach a requested revision.
	FreshnessTimeout time.Duration
}

func (o *CacheOptions) defaults() {
	if o.Window <= 0 {
		o.Window = 10000
	}
	if o.BookmarkInterval <= 0 {
		o.BookmarkInterval = time.Minute
	}
	if o.WatcherBuffer <= 0 {
		o.WatcherBuffer = 1000
	}
	if o.FreshnessTimeout <= 0 {
		o.FreshnessTimeout = 3 * time.Second
	}
}

// Event is one watch event. Deleted events carry the last state, at the deletion's revision.
type Event struct {
	Type   watch.EventType
	Object Object
	Rev    int64
	// InitialEventsEnd marks the bookmark that ends a watch's initial events.
	InitialEventsEnd bool
	// Err is why an Error event (the last of its watch) ended it.
	Err error
}

type historyEvent struct {
	key       string
	typ       watch.EventType
	obj, prev Object // prev is nil for Added
	rev       int64
}

type watcher struct {
	c         chan Event
	prefix    string
	pred      Predicate
	bookmarks bool
	closed    bool
}

// cacher mirrors one resource's etcd prefix in memory: the current objects and a bounded
// window of recent events, fanned out to watchers.
type cacher struct {
	s    *Store
	opts CacheOptions

	mu       sync.RWMutex
	items    map[string]Object
	rev      int64 // every event up to rev has been applied
	startRev int64 // the window holds every event after startRev
	window   []historyEvent
	head     int // index of the oldest event in window once it is full
	watchers map[*watcher]struct{}
	ready    chan struct{}
	advanced chan struct{} // closed and replaced whenever rev grows
}

func newCacher(s *Store, opts CacheOptions) *cacher {
	opts.defaults()
	return &cacher{
		s: s, opts: opts,
		items:    map[string]Object{},
		watchers: map[*watcher]struct{}{},
		ready:    make(chan struct{}),
		advanced: make(chan struct{}),
	}
}

func (c *cacher) waitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run lists and then watches etcd until ctx is cancelled, relisting when the watch breaks.
func (c *cacher) run(ctx context.Context) {
	go c.sendBookmarks(ctx)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		rev, err := c.relist(ctx)
		if err != nil {
			slog.Warn("watch cache: list failed", "resource", c.s.cfg.GroupResource, "err", err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		c.watch(ctx, rev)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.watchers {
		c.closeWatcher(w)
	}
}

// watch applies etcd's events after rev until the watch breaks or ctx is cancelled. Once ctx
// is cancelled it returns without waiting for etcd's watch channel to close: the client's
// watches share one gRPC stream, and cancelling many of them at once (every cache, on
// shutdown) makes the client send a cancel request per watch from the goroutine that also
// reads the stream's responses. With the in-process client of an embedded etcd the stream's
// buffers hold about 20 messages, so with more caches than that the client can block on a
// send that the server will never take, and the watch channels stay open until the client is
// closed, which the apiserver does only once every cache has stopped.
func (c *cacher) watch(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := c.s.cli.Watch(wctx, c.s.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wch:
		case <-ctx.Done():
			return
		}
		if !ok {
			return
		}
		if err := resp.Err(); err != nil {
			if ctx.Err() == nil {
				slog.Info("watch cache: etcd watch ended, relisting", "resource", c.s.cfg.GroupResource, "err", err)
			}
			return
		}
		if resp.IsProgressNotify() {
			c.advance(resp.Header.Revision)
			continue
		}
		for _, ev := range resp.Events {
			c.apply(ev)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// relist replaces the cache's contents with a fresh list. Watchers are closed: the events
// between their position and the new list are unknown, so they must resume (and get 410).
func (c *cacher) relist(ctx context.Context) (int64, error) {
	resp, err := c.s.cli.Get(ctx, c.s.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	items := make(map[string]Object, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		obj, err := c.s.decode(kv.Value, kv.ModRevision)
		if err != nil {
			slog.Error("watch cache: undecodable object skipped", "key", string(kv.Key), "err", err)
			continue
		}
		items[string(kv.Key)] = obj
	}
	rev := resp.Header.Revision
	c.mu.Lock()
	defer c.mu.Unlock()
	c.items, c.startRev, c.window, c.head = items, rev, c.window[:0], 0
	for w := range c.watchers {
		c.closeWatcher(w)
	}
	c.setRev(rev)
	select {
	case <-c.ready:
	default:
		close(c.ready)
	}
	return rev, nil
}

func (c *cacher) setRev(rev int64) {
	if rev <= c.rev && c.rev != 0 {
		return
	}
	c.rev = rev
	close(c.advanced)
	c.advanced = make(chan struct{})
}

func (c *cacher) advance(rev int64) {
	c.mu.Lock()
	c.setRev(rev)
	c.mu.Unlock()
}

func (c *cacher) apply(ev *clientv3.Event) {
	key := string(ev.Kv.Key)
	rev := ev.Kv.ModRevision
	he := historyEvent{key: key, rev: rev}
	c.mu.Lock()
	defer c.mu.Unlock()
	he.prev = c.items[key]
	if ev.Type == clientv3.EventTypeDelete {
		var obj Object
		switch {
		case ev.PrevKv != nil:
			var err error
			if obj, err = c.s.decode(ev.PrevKv.Value, rev); err != nil {
				slog.Error("watch cache: undecodable deleted object", "key", key, "err", err)
				return
			}
		case he.prev != nil:
			// etcd omits the previous value when its revision was compacted: the cache has it.
			obj = he.prev.DeepCopyObject().(Object)
			obj.SetResourceVersion(strconv.FormatInt(rev, 10))
		default:
			return
		}
		he.typ, he.obj = watch.Deleted, obj
		delete(c.items, key)
	} else {
		obj, err := c.s.decode(ev.Kv.Value, rev)
		if err != nil {
			slog.Error("watch cache: undecodable object", "key", key, "err", err)
			return
		}
		he.typ, he.obj = watch.Modified, obj
		if ev.IsCreate() {
			he.typ, he.prev = watch.Added, nil
		}
		c.items[key] = obj
	}
	c.record(he)
	c.setRev(rev)
	for w := range c.watchers {
		if e, ok := w.translate(he); ok {
			c.send(w, e)
		}
	}
}

// record appends to the history window, dropping the oldest event when it is full.
func (c *cacher) record(he historyEvent) {
	if len(c.window) < c.opts.Window {
		c.window = append(c.window, he)
		return
	}
	c.startRev = c.window[c.head].rev
	c.window[c.head] = he
	c.head = (c.head + 1) % len(c.window)
}

// translate turns a history event into what this watcher sees: an object entering its
// selection is ADDED, one leaving it is DELETED.
func (w *watcher) translate(he historyEvent) (Event, bool) {
	if !strings.HasPrefix(he.key, w.prefix) {
		return Event{}, false
	}
	cur := he.typ != watch.Deleted && w.pred.Matches(he.obj)
	var was bool
	if he.typ == watch.Deleted {
		was = w.pred.Matches(he.obj)
	} else if he.prev != nil {
		was = w.pred.Matches(he.prev)
	}
	switch {
	case cur && was:
		return Event{Type: watch.Modified, Object: he.obj, Rev: he.rev}, true
	case cur:
		return Event{Type: watch.Added, Object: he.obj, Rev: he.rev}, true
	case was && he.typ == watch.Deleted:
		return Event{Type: watch.Deleted, Object: he.obj, Rev: he.rev}, true
	case was:
		// Left the selection: report the new state as a deletion at this revision.
		return Event{Type: watch.Deleted, Object: he.obj, Rev: he.rev}, true
	}
	return Event{}, false
}

func (c *cacher) send(w *watcher, e Event) {
	select {
	case w.c <- e:
	default:
		slog.Info("watch cache: closing a watcher that fell behind", "resource", c.s.cfg.GroupResource)
		c.closeWatcher(w)
	}
}

func (c *cacher) closeWatcher(w *watcher) {
	if !w.closed {
		w.closed = true
		close(w.c)
		delete(c.watchers, w)
	}
}

func (c *cacher) sendBookmarks(ctx context.Context) {
	t := time.NewTicker(c.opts.BookmarkInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Ask etcd where it is, so the bookmark reflects progress even without events.
		_ = c.s.cli.RequestProgress(ctx)
		c.mu.Lock()
		for w := range c.watchers {
			if w.bookmarks {
				select {
				case w.c <- Event{Type: watch.Bookmark, Rev: c.rev}:
				default:
				}
			}
		}
		c.mu.Unlock()
	}
}

// waitFresh waits until the cache has applied every event up to rev.
func (c *cacher) waitFresh(ctx context.Context, rev int64) error {
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	deadline := time.NewTimer(c.opts.FreshnessTimeout)
	defer deadline.Stop()
	for {
		c.mu.RLock()
		cur, advanced := c.rev, c.advanced
		c.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		// Revisions of other resources move etcd forward without events here: a progress
		// notification tells the cache it has seen everything up to the current revision.
		// Bounded: RequestProgress blocks while the etcd client is reconnecting.
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_ = c.s.cli.RequestProgress(pctx)
		cancel()
		select {
		case <-advanced:
		case <-time.After(50 * time.Millisecond):
		case <-deadline.C:
			return TooLargeResourceVersion(rev)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *cacher) get(key string) (Object, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	obj, ok := c.items[key]
	return obj, ok
}

// list returns the matching objects under prefix, ordered by key, once the cache is at least
// at minRev, and the revision it reflects.
func (c *cacher) list(ctx context.Context, prefix string, minRev int64, pred Predicate) ([]runtime.Object, int64, error) {
	if err := c.waitFresh(ctx, minRev); err != nil {
		return nil, 0, err
	}
	c.mu.RLock()
	keys := make([]string, 0, len(c.items))
	for k, obj := range c.items {
		if strings.HasPrefix(k, prefix) && pred.Matches(obj) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]runtime.Object, len(keys))
	for i, k := range keys {
		out[i] = c.items[k]
	}
	rev := c.rev
	c.mu.RUnlock()
	return out, rev, nil
}

// WatchOptions selects what a watch delivers.
type WatchOptions struct {
	ResourceVersion string
	// SendInitialEvents delivers the current state as ADDED events followed by a bookmark with
	// InitialEventsEnd, for ResourceVersion "" (consistent), "0" (any) or N (not older than N).
	SendInitialEvents bool
	Bookmarks         bool
	Predicate         Predicate
}

// Watch is a running watch: Initial events first, then C until it is closed. Stop must be called.
type Watch struct {
	Initial []Event
	C       <-chan Event
	Stop    func()
}

// Watch starts a watch on the objects under namespace ns ("" = all).
func (s *Store) Watch(ctx context.Context, ns string, opts WatchOptions) (*Watch, error) {
	c := s.cache
	rev, err := ParseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	snapshot := opts.SendInitialEvents || rev == 0
	if opts.SendInitialEvents && opts.ResourceVersion == "" {
		if rev, err = s.currentRevision(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.waitFresh(ctx, rev); err != nil {
		return nil, err
	}
	w := &watcher{c: make(chan Event, c.opts.WatcherBuffer), prefix: s.nsPrefix(ns), pred: opts.Predicate, bookmarks: opts.Bookmarks}
	c.mu.Lock()
	defer c.mu.Unlock()
	var initial []Event
	if snapshot {
		keys := make([]string, 0, len(c.items))
		for k, obj := range c.items {
			if strings.HasPrefix(k, w.prefix) && w.pred.Matches(obj) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		initial = make([]Event, 0, len(keys)+1)
		for _, k := range keys {
			initial = append(initial, Event{Type: watch.Added, Object: c.items[k], Rev: c.rev})
		}
		if opts.SendInitialEvents {
			initial = append(initial, Event{Type: watch.Bookmark, Rev: c.rev, InitialEventsEnd: true})
		}
	} else {
		if rev < c.startRev {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rev, c.startRev))
		}
		n := len(c.window)
		for i := 0; i < n; i++ {
			he := c.window[(c.head+i)%n]
			if he.rev <= rev {
				continue
			}
			if e, ok := w.translate(he); ok {
				initial = append(initial, e)
			}
		}
	}
	c.watchers[w] = struct{}{}
	stop := func() {
		c.mu.Lock()
		c.closeWatcher(w)
		c.mu.Unlock()
	}
	return &Watch{Initial: initial, C: w.c, Stop: stop}, nil
}
