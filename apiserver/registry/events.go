package registry

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// events.k8s.io/v1 Events are the core/v1 Events under other field names: both groups serve
// the same stored objects (StoredUnder the core resource's keys, converted by StoredAs), so
// an event recorded through one is read, watched and deleted through the other. Writes
// through events.k8s.io get the stricter checks of the newer API; the paths of their errors
// name the core fields, as Kubernetes' do.

func eventsResources() []Strategy { return []Strategy{eventsV1} }

// Length limits of the newer API's fields.
const (
	maxEventReportingInstance = 128
	maxEventAction            = 128
	maxEventReason            = 128
	maxEventNote              = 1024
)

var eventsV1 = &Def[*eventsv1.Event]{
	Info: Info{GroupVersion: eventsv1.SchemeGroupVersion, Resource: "events", Singular: "event", Kind: "Event",
		ShortNames: []string{"ev"}, Namespaced: true, StoredUnder: events.Info.GroupResource()},
	NewList:  func() runtime.Object { return &eventsv1.EventList{} },
	StoredAs: Convert(EventToCore, EventFromCore),
	ValidateCreate: func(e *eventsv1.Event) field.ErrorList {
		return validateEvent(EventToCore(e), true)
	},
	ValidateUpdate: func(e, old *eventsv1.Event) field.ErrorList {
		return validateEventUpdate(EventToCore(e), EventToCore(old))
	},
	// The core fields under the newer API's names (it has no "source").
	Fields: func(e *eventsv1.Event) fields.Set {
		set := fields.Set{}
		for k, v := range events.Fields(EventToCore(e)) {
			switch {
			case strings.HasPrefix(k, "involvedObject."):
				set["regarding."+strings.TrimPrefix(k, "involvedObject.")] = v
			case k == "reportingComponent":
				set["reportingController"] = v
			case k != "source":
				set[k] = v
			}
		}
		return set
	},
	Columns:  events.Columns,
	Row:      func(e *eventsv1.Event) []any { return eventRow(EventToCore(e)) },
	NameLast: true,
}

// EventToCore is an events.k8s.io Event as the core Event it is stored as.
func EventToCore(e *eventsv1.Event) *corev1.Event {
	out := &corev1.Event{
		ObjectMeta:          e.ObjectMeta,
		InvolvedObject:      e.Regarding,
		Reason:              e.Reason,
		Message:             e.Note,
		Source:              e.DeprecatedSource,
		FirstTimestamp:      e.DeprecatedFirstTimestamp,
		LastTimestamp:       e.DeprecatedLastTimestamp,
		Count:               e.DeprecatedCount,
		Type:                e.Type,
		EventTime:           e.EventTime,
		Related:             e.Related,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
		Action:              e.Action,
	}
	out.TypeMeta = metav1.TypeMeta{}
	if s := e.Series; s != nil {
		out.Series = &corev1.EventSeries{Count: s.Count, LastObservedTime: s.LastObservedTime}
	}
	return out
}

// EventFromCore is a stored core Event as events.k8s.io serves it.
func EventFromCore(e *corev1.Event) *eventsv1.Event {
	out := &eventsv1.Event{
		ObjectMeta:               e.ObjectMeta,
		EventTime:                e.EventTime,
		ReportingController:      e.ReportingController,
		ReportingInstance:        e.ReportingInstance,
		Action:                   e.Action,
		Reason:                   e.Reason,
		Regarding:                e.InvolvedObject,
		Related:                  e.Related,
		Note:                     e.Message,
		Type:                     e.Type,
		DeprecatedSource:         e.Source,
		DeprecatedFirstTimestamp: e.FirstTimestamp,
		DeprecatedLastTimestamp:  e.LastTimestamp,
		DeprecatedCount:          e.Count,
	}
	if s := e.Series; s != nil {
		out.Series = &eventsv1.EventSeries{Count: s.Count, LastObservedTime: s.LastObservedTime}
	}
	return out
}

// validateEvent checks an event. Every event's namespace agrees with its object's; one with an
// eventTime (the newer API's) names its reporter, action and reason within their limits.
// strict adds the rules of writes through events.k8s.io: eventTime and a known type
// required, the deprecated fields left out, a series that counts at least two.
func validateEvent(e *corev1.Event, strict bool) field.ErrorList {
	var errs field.ErrorList
	reporter := field.NewPath("reportingController")
	if !strict {
		reporter = field.NewPath("reportingComponent")
	}
	nsPath := field.NewPath("involvedObject", "namespace")
	ons := e.InvolvedObject.Namespace
	if e.EventTime.IsZero() {
		if ons == "" && e.Namespace != "" && e.Namespace != metav1.NamespaceDefault || ons != "" && e.Namespace != ons {
			errs = append(errs, field.Invalid(nsPath, ons, "does not match event.namespace"))
		}
	} else {
		if ons == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
			errs = append(errs, field.Invalid(nsPath, ons, "does not match event.namespace"))
		}
		if e.ReportingController == "" {
			errs = append(errs, field.Required(reporter, ""))
		}
		errs = append(errs, msgs(reporter, e.ReportingController, validation.IsQualifiedName(e.ReportingController))...)
		errs = append(errs, requiredWithin(e.ReportingInstance, maxEventReportingInstance, field.NewPath("reportingInstance"))...)
		errs = append(errs, requiredWithin(e.Action, maxEventAction, field.NewPath("action"))...)
		errs = append(errs, requiredWithin(e.Reason, maxEventReason, field.NewPath("reason"))...)
		if len(e.Message) > maxEventNote {
			errs = append(errs, field.Invalid(field.NewPath("message"), "", fmt.Sprintf("can have at most %d characters", maxEventNote)))
		}
	}
	if !strict {
		return errs
	}
	errs = append(errs, validateEventSeries(e)...)
	if e.EventTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("eventTime"), ""))
	}
	if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.Invalid(field.NewPath("type"), "", "has invalid value: "+e.Type))
	}
	unset := func(set bool, name string) {
		if set {
			errs = append(errs, field.Invalid(field.NewPath(name), "", "needs to be unset"))
		}
	}
	unset(!e.FirstTimestamp.IsZero(), "firstTimestamp")
	unset(!e.LastTimestamp.IsZero(), "lastTimestamp")
	unset(e.Count != 0, "count")
	unset(e.Source.Component != "" || e.Source.Host != "", "source")
	return errs
}

// requiredWithin: present and at most max bytes.
func requiredWithin(v string, max int, p *field.Path) field.ErrorList {
	switch {
	case v == "":
		return field.ErrorList{field.Required(p, "")}
	case len(v) > max:
		return field.ErrorList{field.Invalid(p, "", fmt.Sprintf("can have at most %d characters", max))}
	}
	return nil
}

func validateEventSeries(e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	if s := e.Series; s != nil {
		if s.Count < 2 {
			errs = append(errs, field.Invalid(field.NewPath("series.count"), "", "should be at least 2"))
		}
		if s.LastObservedTime.IsZero() {
			errs = append(errs, field.Required(field.NewPath("series.lastObservedTime"), ""))
		}
	}
	return errs
}

// validateEventUpdate: through events.k8s.io an event only grows its series; what it reports
// is fixed once recorded.
func validateEventUpdate(e, old *corev1.Event) field.ErrorList {
	errs := validateEvent(e, false)
	if !apiequality.Semantic.DeepEqual(e.Series, old.Series) {
		errs = append(errs, validateEventSeries(e)...)
	}
	fixed := func(changed bool, name string, v any) {
		if changed {
			errs = append(errs, immutable(v, field.NewPath(name))...)
		}
	}
	fixed(e.InvolvedObject != old.InvolvedObject, "involvedObject", e.InvolvedObject)
	fixed(e.Reason != old.Reason, "reason", e.Reason)
	fixed(e.Message != old.Message, "message", e.Message)
	fixed(e.Source != old.Source, "source", e.Source)
	fixed(!e.FirstTimestamp.Equal(&old.FirstTimestamp), "firstTimestamp", e.FirstTimestamp)
	fixed(!e.LastTimestamp.Equal(&old.LastTimestamp), "lastTimestamp", e.LastTimestamp)
	fixed(e.Count != old.Count, "count", e.Count)
	fixed(e.Type != old.Type, "type", e.Type)
	// Clients that round to microseconds when they send the time back change nothing.
	fixed(!e.EventTime.Truncate(time.Microsecond).Equal(old.EventTime.Truncate(time.Microsecond)), "eventTime", e.EventTime)
	fixed(e.Action != old.Action, "action", e.Action)
	fixed(!apiequality.Semantic.DeepEqual(e.Related, old.Related), "related", e.Related)
	fixed(e.ReportingController != old.ReportingController, "reportingController", e.ReportingController)
	fixed(e.ReportingInstance != old.ReportingInstance, "reportingInstance", e.ReportingInstance)
	return errs
}
