package apiserver

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/kplane/kplane/storage"
	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
)

// maxWatchTimeout bounds watches that ask for no timeout, like kube-apiserver's
// --min-request-timeout (1800 s, randomized up to twice that, so reconnects spread out).
const maxWatchTimeout = 1800 * time.Second

func watchOptions(r *http.Request, pred storage.Predicate) (storage.WatchOptions, time.Duration, error) {
	q := r.URL.Query()
	opts := storage.WatchOptions{ResourceVersion: q.Get("resourceVersion"), Bookmarks: isTrue(q.Get("allowWatchBookmarks")), Predicate: pred}
	timeout := maxWatchTimeout + time.Duration(rand.Int64N(int64(maxWatchTimeout)))
	if t := q.Get("timeoutSeconds"); t != "" {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || n < 0 {
			return opts, 0, apierrors.NewBadRequest("invalid timeoutSeconds " + strconv.Quote(t))
		}
		if n > 0 {
			timeout = time.Duration(n) * time.Second
		}
	}
	match := q.Get("resourceVersionMatch")
	var errs field.ErrorList
	if sie, set := q["sendInitialEvents"]; set {
		opts.SendInitialEvents = isTrue(sie[0])
		if match != string(metav1.ResourceVersionMatchNotOlderThan) {
			errs = append(errs, field.Forbidden(field.NewPath("resourceVersionMatch"), "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
		}
		if opts.SendInitialEvents && !opts.Bookmarks {
			errs = append(errs, field.Forbidden(field.NewPath("allowWatchBookmarks"), "sendInitialEvents requires setting allowWatchBookmarks to true"))
		}
	} else if match != "" {
		errs = append(errs, field.Forbidden(field.NewPath("resourceVersionMatch"), "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"))
	}
	if len(errs) > 0 {
		return opts, 0, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", errs)
	}
	return opts, timeout, nil
}

// watch streams events as newline-separated JSON WatchEvents, flushing whenever the stream has
// caught up, so each event reaches the client without waiting for the next.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, req request) {
	res := req.res
	out, err := negotiateFor(r, res)
	if err != nil {
		writeError(w, err)
		return
	}
	pred, err := predicate(res, r)
	if err != nil {
		writeError(w, err)
		return
	}
	opts, timeout, err := watchOptions(r, pred)
	if err != nil {
		writeError(w, err)
		return
	}
	wt, err := res.store.Watch(r.Context(), req.namespace, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	defer wt.Stop()
	flusher, _ := w.(http.Flusher)
	if out == outputProtobuf {
		w.Header().Set("Content-Type", mimeProtobuf+";stream=watch")
	} else {
		w.Header().Set("Content-Type", mimeJSON)
	}
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	enc := &eventEncoder{res: res, out: out, includeObject: r.URL.Query().Get("includeObject"), columns: true}
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	for _, ev := range wt.Initial {
		if err := enc.write(w, ev); err != nil {
			return
		}
	}
	flush()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-timer.C:
			return
		case ev, ok := <-wt.C:
			if !ok {
				return
			}
			if err := enc.write(w, ev); err != nil || ev.Type == watch.Error {
				flush()
				return
			}
			if len(wt.C) == 0 {
				flush()
			}
		}
	}
}

type eventEncoder struct {
	res           *resource
	out           output
	includeObject string
	columns       bool // the first Table carries the column definitions
	buf           bytes.Buffer
	// obj and alloc are writeProtobuf's, reused from event to event.
	obj   bytes.Buffer
	alloc runtime.SimpleAllocator
}

func (e *eventEncoder) write(w http.ResponseWriter, ev storage.Event) error {
	var obj runtime.Object = ev.Object
	if ev.Type == watch.Bookmark {
		bm := e.res.strategy.NewObject()
		bm.GetObjectKind().SetGroupVersionKind(e.res.info.GVK())
		bm.SetResourceVersion(strconv.FormatInt(ev.Rev, 10))
		if ev.InitialEventsEnd {
			bm.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		}
		obj = bm
	}
	if ev.Type == watch.Error {
		// The watch ends here (a conversion failed): the client sees why.
		obj = errorStatus(ev.Err)
	}
	switch e.out {
	case outputTable:
		if ev.Type == watch.Error {
			break
		}
		if ev.Type == watch.Bookmark {
			obj = &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}, ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(ev.Rev, 10)}}
			break
		}
		t, err := toTable(e.res, []storage.Object{ev.Object}, ev.Object.GetResourceVersion(), e.includeObject, e.columns)
		if err != nil {
			return err
		}
		e.columns = false
		obj = t
	case outputPartialMetadata:
		if so, ok := obj.(storage.Object); ok {
			obj = partialMetadata(so)
		}
	}
	e.buf.Reset()
	if e.out == outputProtobuf {
		return e.writeProtobuf(w, ev.Type, obj)
	}
	e.buf.WriteString(`{"type":"`)
	e.buf.WriteString(string(ev.Type))
	e.buf.WriteString(`","object":`)
	if err := jsonSerializer.Encode(obj, &e.buf); err != nil {
		return err
	}
	e.buf.Truncate(len(bytes.TrimRight(e.buf.Bytes(), "\n")))
	e.buf.WriteString("}\n")
	_, err := w.Write(e.buf.Bytes())
	return err
}

// writeProtobuf frames one event as Kubernetes' protobuf watch streams do: a 4-byte big-endian
// length, then a WatchEvent (without the protobuf envelope) whose object is enveloped. The
// WatchEvent (type = 1, object = 2 holding a RawExtension whose raw = 1) is written by hand
// with buffers kept across events: the object's bytes are copied once, and a long stream (an
// initial list of thousands of objects) allocates no buffer per event.
func (e *eventEncoder) writeProtobuf(w http.ResponseWriter, typ watch.EventType, obj runtime.Object) error {
	e.obj.Reset()
	if err := protobufSerializer.EncodeWithAllocator(obj, &e.obj, &e.alloc); err != nil {
		return err
	}
	raw := e.obj.Bytes()
	rawExt := 1 + protowire.SizeBytes(len(raw))
	size := 1 + protowire.SizeBytes(len(typ)) + 1 + protowire.SizeBytes(rawExt)
	frame := binary.BigEndian.AppendUint32(e.buf.AvailableBuffer(), uint32(size))
	frame = protowire.AppendTag(frame, 1, protowire.BytesType)
	frame = protowire.AppendString(frame, string(typ))
	frame = protowire.AppendTag(frame, 2, protowire.BytesType)
	frame = protowire.AppendVarint(frame, uint64(rawExt))
	frame = protowire.AppendTag(frame, 1, protowire.BytesType)
	frame = protowire.AppendBytes(frame, raw)
	e.buf.Write(frame) // keeps the grown array for the next event
	_, err := w.Write(e.buf.Bytes())
	return err
}
