// Package events records core/v1 Events about objects for every role (controllers, the
// scheduler, the node agent), without a role importing another.
package events

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/scheme"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Recorder writes core/v1 Events about objects, the way kubectl describe shows them. Writes
// happen on Run's goroutine, never in the caller's: a controller's sync does not wait for, or
// fail because of, an event. A repeat of the same event within ten minutes increments the
// count of the existing Event instead of creating another.
type Recorder struct {
	component string
	sink      *eventSink
}

type eventSink struct {
	client *client.Client
	host   string
	queue  chan *corev1.Event

	mu   sync.Mutex
	seen map[eventKey]*corev1.Event // by what makes two events the same, the last written
}

type eventKey struct {
	uid                             types.UID
	component, typ, reason, message string
}

// repeatWindow: a repeat older than this starts a new Event, as Kubernetes' aggregation does.
const repeatWindow = 10 * time.Minute

// NewRecorder returns a recorder that writes through c once Run is running.
func NewRecorder(c *client.Client) *Recorder {
	host, _ := os.Hostname()
	return &Recorder{sink: &eventSink{client: c, host: host, queue: make(chan *corev1.Event, 1000), seen: map[eventKey]*corev1.Event{}}}
}

// For returns a recorder that names component as the events' source ("endpoint-controller").
func (r *Recorder) For(component string) *Recorder {
	return &Recorder{component: component, sink: r.sink}
}

// Eventf records an event of type corev1.EventTypeNormal or corev1.EventTypeWarning about obj.
// It never blocks: when the write queue is full the event is dropped and logged.
func (r *Recorder) Eventf(obj metav1.Object, eventType, reason, format string, args ...any) {
	if r == nil {
		return
	}
	ref := corev1.ObjectReference{Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion()}
	if ro, ok := obj.(runtime.Object); ok {
		if gvks, _, err := scheme.Scheme.ObjectKinds(ro); err == nil && len(gvks) > 0 {
			ref.APIVersion, ref.Kind = gvks[0].GroupVersion().String(), gvks[0].Kind
		}
	}
	now := metav1.Now()
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", obj.GetName(), now.UnixNano()), Namespace: ns},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             fmt.Sprintf(format, args...),
		Type:                eventType,
		Source:              corev1.EventSource{Component: r.component, Host: r.sink.host},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: r.component,
		ReportingInstance:   r.component + "-" + r.sink.host,
	}
	select {
	case r.sink.queue <- ev:
	default:
		slog.Warn("event queue full, dropping event", "reason", reason, "object", ns+"/"+obj.GetName())
	}
}

// Run writes recorded events until ctx is cancelled.
func (r *Recorder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.sink.queue:
			r.sink.write(ctx, ev)
		}
	}
}

func (s *eventSink) write(ctx context.Context, ev *corev1.Event) {
	key := eventKey{ev.InvolvedObject.UID, ev.Source.Component, ev.Type, ev.Reason, ev.Message}
	s.mu.Lock()
	prev := s.seen[key]
	for k, e := range s.seen {
		if time.Since(e.LastTimestamp.Time) > repeatWindow {
			delete(s.seen, k)
		}
	}
	s.mu.Unlock()
	events := client.Resource[*corev1.Event](s.client, "events").Namespace(ev.Namespace)
	if prev != nil && ev.LastTimestamp.Sub(prev.LastTimestamp.Time) < repeatWindow {
		next := prev.DeepCopy()
		next.Count++
		next.LastTimestamp = ev.LastTimestamp
		if updated, err := events.Update(ctx, next); err == nil {
			s.remember(key, updated)
			return
		}
		// Gone or changed by someone else: write a fresh event instead.
	}
	created, err := events.Create(ctx, ev)
	if err != nil {
		if ctx.Err() == nil {
			slog.Warn("could not write event", "reason", ev.Reason, "object", ev.Namespace+"/"+ev.InvolvedObject.Name, "err", err)
		}
		return
	}
	s.remember(key, created)
}

func (s *eventSink) remember(key eventKey, ev *corev1.Event) {
	s.mu.Lock()
	s.seen[key] = ev
	s.mu.Unlock()
}
