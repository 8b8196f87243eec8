package registry

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newEventV1() *eventsv1.Event {
	return &eventsv1.Event{ObjectMeta: meta("web.1"), EventTime: metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		ReportingController: "example.com/builtins", ReportingInstance: "builtins-1", Action: "Testing", Reason: "Applied",
		Type: corev1.EventTypeNormal, Note: "applied", Regarding: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "ns", Name: "web"}}
}

// TestEventConversion: an events.k8s.io Event and the core Event it is stored as carry the
// same information both ways.
func TestEventConversion(t *testing.T) {
	e := newEventV1()
	e.Series = &eventsv1.EventSeries{Count: 3, LastObservedTime: e.EventTime}
	e.DeprecatedSource = corev1.EventSource{Component: "kubelet"}
	e.DeprecatedCount = 4
	core := EventToCore(e)
	if core.Message != "applied" || core.InvolvedObject.Name != "web" || core.Count != 4 || core.Source.Component != "kubelet" || core.Series.Count != 3 {
		t.Errorf("to core: %+v", core)
	}
	if back := EventFromCore(core); !apiequality.Semantic.DeepEqual(back, e) {
		t.Errorf("round trip\n got %+v\nwant %+v", back, e)
	}
}

func TestEventValidation(t *testing.T) {
	checkCreate(t, eventsV1, newEventV1, []validCase[*eventsv1.Event]{
		{"valid", nil, nil},
		{"cluster object's event in kube-system", func(e *eventsv1.Event) {
			e.Namespace, e.Regarding = metav1.NamespaceSystem, corev1.ObjectReference{Kind: "Node", Name: "n1"}
		}, nil},
		{"namespace of another object", func(e *eventsv1.Event) { e.Regarding.Namespace = "" }, []string{"FieldValueInvalid involvedObject.namespace"}},
		{"no reporter, action, reason", func(e *eventsv1.Event) {
			e.ReportingController, e.ReportingInstance, e.Action, e.Reason = "", "", "", ""
		},
			// The empty reporter is also not a qualified name, twice over, as Kubernetes says.
			[]string{"FieldValueInvalid reportingController", "FieldValueInvalid reportingController", "FieldValueRequired action",
				"FieldValueRequired reason", "FieldValueRequired reportingController", "FieldValueRequired reportingInstance"}},
		{"no time, unknown type", func(e *eventsv1.Event) { e.EventTime, e.Type = metav1.MicroTime{}, "Sometimes" },
			[]string{"FieldValueInvalid type", "FieldValueRequired eventTime"}},
		{"deprecated fields set", func(e *eventsv1.Event) { e.DeprecatedCount, e.DeprecatedSource.Host = 2, "n1" },
			[]string{"FieldValueInvalid count", "FieldValueInvalid source"}},
		{"series of one", func(e *eventsv1.Event) { e.Series = &eventsv1.EventSeries{Count: 1} },
			[]string{"FieldValueInvalid series.count", "FieldValueRequired series.lastObservedTime"}},
	})
	checkUpdate(t, eventsV1, newEventV1, []validCase[*eventsv1.Event]{
		{"series grows", func(e *eventsv1.Event) { e.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: e.EventTime} }, nil},
		{"note and reason", func(e *eventsv1.Event) { e.Note, e.Reason = "other", "Other" }, []string{"FieldValueInvalid message", "FieldValueInvalid reason"}},
	})
	// Core writes keep the older rules: an event without eventTime needs no reporter.
	old := &corev1.Event{ObjectMeta: meta("old.1"), InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"}, Reason: "Started"}
	events.PrepareCreate(old)
	if got := errs(events.ValidateObject(old, nil)); len(got) != 0 {
		t.Errorf("core event: %q", got)
	}
	old.EventTime = metav1.NowMicro()
	if got := errs(events.ValidateObject(old, nil)); !slices.Equal(got, []string{"FieldValueInvalid reportingComponent", "FieldValueInvalid reportingComponent",
		"FieldValueRequired action", "FieldValueRequired reportingComponent", "FieldValueRequired reportingInstance"}) {
		t.Errorf("core event with eventTime: %q", got)
	}
}

// TestEventV1Table: the same columns as core events, the name last.
func TestEventV1Table(t *testing.T) {
	e := newEventV1()
	cols := eventsV1.TableColumns()
	if len(cols) != 10 || cols[0].Name != "Last Seen" || cols[9].Name != "Name" || cols[9].Priority != 1 {
		t.Errorf("columns %v", cols)
	}
	row := eventsV1.TableRow(e)
	if row[1] != "Normal" || row[2] != "Applied" || row[3] != "configmap/web" || row[5] != "example.com/builtins, builtins-1" ||
		row[6] != "applied" || row[8] != int64(1) || row[9] != "web.1" {
		t.Errorf("row %#v", row)
	}
}
