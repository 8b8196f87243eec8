package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Event is one decoded watch event. For BOOKMARK events Object carries only the
// resourceVersion (and, at the end of a streamed initial list, the
// k8s.io/initial-events-end annotation). An ERROR event carries Err instead of an Object.
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
	resp, err := r.c.do(ctx, &request{method: http.MethodGet, path: r.path(""), query: q})
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
	events := make(chan Event[T])
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); resp.Body.Close() }) }
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	next := r.jsonEvents(resp.Body)
	if mt == mimeProtobuf {
		next = r.protobufEvents(resp.Body)
	}
	go func() {
		defer close(events)
		defer stop()
		for {
			ev, err := next()
			if err != nil {
				// A stream that ends (timeout, server shutdown, Stop) is the normal end of a
				// watch; the caller starts a new one from the last resourceVersion it saw.
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return &Watch[T]{Events: events, stop: stop}, nil
}

// rawEvent is a watch event before its object is decoded.
type rawEvent struct {
	Type   watch.EventType `json:"type"`
	Object json.RawMessage `json:"object"`
}

func (r *Typed[T]) jsonEvents(body io.Reader) func() (Event[T], error) {
	dec := json.NewDecoder(body)
	return func() (Event[T], error) {
		var raw rawEvent
		if err := dec.Decode(&raw); err != nil {
			return Event[T]{}, err
		}
		return r.event(raw.Type, raw.Object, mimeJSON)
	}
}

// protobufEvents reads length-prefixed WatchEvent frames.
func (r *Typed[T]) protobufEvents(body io.Reader) func() (Event[T], error) {
	var size [4]byte
	// The frame buffer and the event are reused: decoding copies what the object keeps, so
	// a long initial list makes no garbage per event beyond the objects themselves.
	var frame []byte
	var we metav1.WatchEvent
	return func() (Event[T], error) {
		if _, err := io.ReadFull(body, size[:]); err != nil {
			return Event[T]{}, err
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > 64<<20 {
			return Event[T]{}, fmt.Errorf("client: watch frame of %d bytes", n)
		}
		if cap(frame) < int(n) {
			frame = make([]byte, n)
		}
		frame = frame[:n]
		if _, err := io.ReadFull(body, frame); err != nil {
			return Event[T]{}, err
		}
		we.Type, we.Object.Raw = "", we.Object.Raw[:0]
		if _, _, err := rawProtobufSerializer.Decode(frame, nil, &we); err != nil {
			return Event[T]{}, err
		}
		return r.event(watch.EventType(we.Type), we.Object.Raw, mimeProtobuf)
	}
}

func (r *Typed[T]) event(typ watch.EventType, data []byte, contentType string) (Event[T], error) {
	if typ == watch.Error {
		status := &metav1.Status{}
		if err := decode(contentType, data, status); err != nil {
			return Event[T]{}, err
		}
		return Event[T]{Type: typ, Err: &apierrors.StatusError{ErrStatus: *status}}, nil
	}
	obj := r.newObject()
	if err := decode(contentType, data, obj); err != nil {
		return Event[T]{}, err
	}
	return Event[T]{Type: typ, Object: obj}, nil
}
