package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// stream encodes watch events as a server does, in JSON or in length-prefixed protobuf frames.
func stream(t *testing.T, protobuf bool, events []watch.Event, tail string) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, ev := range events {
		var obj bytes.Buffer
		enc := runtime.Encoder(jsonSerializer)
		if protobuf {
			enc = protobufSerializer
		}
		if err := enc.Encode(ev.Object, &obj); err != nil {
			t.Fatal(err)
		}
		if !protobuf {
			fmt.Fprintf(&buf, `{"type":%q,"object":%s}`+"\n", ev.Type, bytes.TrimSpace(obj.Bytes()))
			continue
		}
		var frame bytes.Buffer
		if err := rawProtobufSerializer.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: obj.Bytes()}}, &frame); err != nil {
			t.Fatal(err)
		}
		_ = binary.Write(&buf, binary.BigEndian, uint32(frame.Len()))
		buf.Write(frame.Bytes())
	}
	buf.WriteString(tail)
	return buf.Bytes()
}

// TestDecodeInParallelKeepsOrder: many events decoded on several goroutines come out in the
// order they were sent, in both encodings; a Status arrives as an ERROR event; a broken tail
// ends the watch with an ERROR event rather than silently.
func TestDecodeInParallelKeepsOrder(t *testing.T) {
	var events []watch.Event
	for i := 0; i < 2000; i++ {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i), ResourceVersion: fmt.Sprint(i + 1)}}
		events = append(events, watch.Event{Type: watch.Added, Object: p})
	}
	gone := apierrors.NewResourceExpired("too old resource version").ErrStatus
	gone.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	events = append(events, watch.Event{Type: watch.Error, Object: &gone})
	for _, tc := range []struct {
		name     string
		protobuf bool
		tail     string
	}{
		{"json", false, `{"type":"ADDED","object":{"kind":"Pod",`},
		{"protobuf", true, "\x00\x00\x00\x05abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Typed[*corev1.Pod]{gvk: corev1.SchemeGroupVersion.WithKind("Pod"), resource: "pods"}
			body := io.NopCloser(bytes.NewReader(stream(t, tc.protobuf, events, tc.tail)))
			read, ct := jsonFrames(body), mimeJSON
			if tc.protobuf {
				read, ct = protobufFrames(body), mimeProtobuf
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var got []Event[*corev1.Pod]
			for ev := range r.decodeInParallel(ctx, cancel, read, ct, nil) {
				got = append(got, ev)
			}
			if len(got) != 2002 {
				t.Fatalf("%d events, want 2000 pods, the Status and the read error", len(got))
			}
			for i := 0; i < 2000; i++ {
				if got[i].Type != watch.Added || got[i].Object.Name != fmt.Sprint("p", i) {
					t.Fatalf("event %d: %s %v", i, got[i].Type, got[i].Object)
				}
			}
			if got[2000].Type != watch.Error || !IsExpired(got[2000].Err) {
				t.Fatalf("status event: %+v", got[2000])
			}
			if got[2001].Type != watch.Error || got[2001].Err == nil {
				t.Fatalf("broken tail: %+v", got[2001])
			}
		})
	}
}
