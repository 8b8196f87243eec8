package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"runtime"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Event is one decoded watch event. For BOOKMARK events Object carries only the
// resourceVersion (and, at the end of a streamed initial list, the
// k8s.io/initial-events-end annotation). An ERROR event carries Err instead of an Object: the
// server's Status, or why the stream could not be read; it is the last event of its watch.
type Event[T Object] struct {
	Type   watch.EventType
	Object T
	Err    error
}

// Watch is a running watch. Events is closed when the server ends the stream, the context is
// cancelled or Stop is called; Stop may be called any number of times.
type Watch[T Object] struct {
	Events <-chan Event[T]
	stop   func()
}

// Stop ends the watch.
func (w *Watch[T]) Stop() { w.stop() }

// Watch starts a watch. The returned error is the server's answer to the request (e.g. 410
// Expired, 422 when the server does not support sendInitialEvents); errors after that arrive as
// ERROR events.
func (r *Typed[T]) Watch(ctx context.Context, opts metav1.ListOptions) (*Watch[T], error) {
	opts.Watch = true
	q, err := queryOf(&opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	resp, err := r.c.do(ctx, &request{method: http.MethodGet, path: r.path(""), query: q, accept: r.accept(false)})
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return nil, errorFromResponse(resp, data)
	}
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); resp.Body.Close() }) }
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	read := jsonFrames(resp.Body)
	if mt == mimeProtobuf {
		mt, read = mimeProtobuf, protobufFrames(resp.Body)
	} else {
		mt = mimeJSON
	}
	var zero T
	share := sharedPartsFrom(ctx).sharerFor(reflect.TypeOf(zero).Elem())
	return &Watch[T]{Events: r.decodeInParallel(ctx, stop, read, mt, share), stop: stop}, nil
}

// rawEvent is a watch event whose object is still encoded.
type rawEvent struct {
	Type   watch.EventType `json:"type"`
	Object json.RawMessage `json:"object"`
	frame  *[]byte         // the pooled buffer Object points into, if any
}

// decodeInParallel turns the stream's raw events into typed events, in order. Decoding objects
// is most of a watch's cost (a long initial list is tens of thousands of them), so it is spread
// over every CPU: one goroutine reads and splits the stream, workers decode, and the events
// come out in the order they arrived. Every goroutine ends when the stream does.
func (r *Typed[T]) decodeInParallel(ctx context.Context, stop func(), read func() (rawEvent, error), contentType string, share *sharer) <-chan Event[T] {
	type result struct {
		ev  Event[T]
		err error
	}
	type job struct {
		raw rawEvent
		out chan result
	}
	events := make(chan Event[T])
	jobs := make(chan job, 64)
	order := make(chan chan result, 256)
	go func() {
		defer close(order)
		defer close(jobs)
		for {
			raw, err := read()
			if err != nil {
				// A stream that ends (timeout, server shutdown, Stop) is the normal end of a
				// watch: the caller starts a new one from the last resourceVersion it saw.
				// Anything else is reported, so the caller backs off instead of resuming
				// straight into the same broken stream.
				if err != io.EOF && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					out := make(chan result, 1)
					out <- result{err: err}
					select {
					case order <- out:
					case <-ctx.Done():
					}
				}
				return
			}
			out := make(chan result, 1)
			select {
			case order <- out:
			case <-ctx.Done():
				return
			}
			jobs <- job{raw: raw, out: out}
		}
	}()
	for range runtime.GOMAXPROCS(0) {
		go func() {
			var sc scratch
			for j := range jobs {
				ev, err := r.event(j.raw.Type, j.raw.Object, contentType, share, &sc)
				if j.raw.frame != nil {
					releaseFrame(j.raw.frame) // decoding copied what it kept
				}
				j.out <- result{ev, err}
			}
		}()
	}
	go func() {
		defer close(events)
		defer stop()
		for out := range order {
			var res result
			select {
			case res = <-out:
			case <-ctx.Done():
				return
			}
			if res.err != nil {
				res.ev = Event[T]{Type: watch.Error, Err: fmt.Errorf("client: watch stream: %w", res.err)}
			}
			select {
			case events <- res.ev:
			case <-ctx.Done():
				return
			}
			if res.err != nil {
				return
			}
		}
	}()
	return events
}

// jsonFrames splits a JSON watch stream into events.
func jsonFrames(body io.Reader) func() (rawEvent, error) {
	dec := json.NewDecoder(body)
	return func() (rawEvent, error) {
		var raw rawEvent
		err := dec.Decode(&raw)
		return raw, err
	}
}

// protobufFrames splits a protobuf watch stream (4-byte big-endian length, then a WatchEvent
// without the protobuf envelope) into events. Each event's object points into its frame, a
// buffer from framePool that the decoder hands back once the object is decoded: a long stream
// then copies no object's bytes and allocates no buffer per event.
func protobufFrames(body io.Reader) func() (rawEvent, error) {
	var size [4]byte
	return func() (rawEvent, error) {
		if _, err := io.ReadFull(body, size[:]); err != nil {
			return rawEvent{}, err
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > 64<<20 {
			return rawEvent{}, fmt.Errorf("client: watch frame of %d bytes", n)
		}
		frame := framePool.Get().(*[]byte)
		if cap(*frame) < int(n) {
			*frame = make([]byte, n)
		}
		*frame = (*frame)[:n]
		if _, err := io.ReadFull(body, *frame); err != nil {
			releaseFrame(frame)
			return rawEvent{}, err
		}
		ev, err := parseWatchEvent(*frame)
		if err != nil {
			releaseFrame(frame)
			return rawEvent{}, err
		}
		ev.frame = frame
		return ev, nil
	}
}

// eventType returns the constant for a known type, so that events do not each allocate it.
func eventType(v []byte) watch.EventType {
	for _, t := range [...]watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if string(v) == string(t) {
			return t
		}
	}
	return watch.EventType(v)
}

var framePool = sync.Pool{New: func() any { return new([]byte) }}

// releaseFrame returns a frame to the pool unless it is an unusually large one, which is left to
// the garbage collector rather than kept for objects that are mostly small.
func releaseFrame(frame *[]byte) {
	if cap(*frame) <= 1<<20 {
		framePool.Put(frame)
	}
}

// parseWatchEvent reads a WatchEvent (type = 1; object = 2, a RawExtension whose raw = 1).
func parseWatchEvent(frame []byte) (rawEvent, error) {
	var ev rawEvent
	err := fields(frame, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			ev.Type = eventType(v)
		case 2:
			return fields(v, func(num protowire.Number, v []byte) error {
				if num == 1 {
					ev.Object = v
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return rawEvent{}, fmt.Errorf("client: watch event: %w", err)
	}
	return ev, nil
}

// event decodes one watch event, sharing parts with share if it is not nil; sc is the caller's
// reusable space for that.
func (r *Typed[T]) event(typ watch.EventType, data []byte, contentType string, share *sharer, sc *scratch) (Event[T], error) {
	if typ == watch.Error {
		status := &metav1.Status{}
		if err := decode(contentType, data, status); err != nil {
			return Event[T]{}, err
		}
		return Event[T]{Type: typ, Err: &apierrors.StatusError{ErrStatus: *status}}, nil
	}
	switch typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
	default:
		return Event[T]{}, fmt.Errorf("unknown watch event type %q", typ)
	}
	if len(data) == 0 {
		return Event[T]{}, fmt.Errorf("%s event without an object", typ)
	}
	obj := r.newObject()
	if share != nil && contentType == mimeProtobuf {
		if done, err := decodeProtobuf(data, obj, share, sc); done {
			return Event[T]{Type: typ, Object: obj}, err
		}
	}
	if err := decode(contentType, data, obj); err != nil {
		return Event[T]{}, err
	}
	return Event[T]{Type: typ, Object: obj}, nil
}
