package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

func TestRecorderWritesAndCountsRepeats(t *testing.T) {
	ns := testserver.Namespace(t, c, "events-")
	svc, err := client.Resource[*corev1.Service](c, "services").Namespace(ns).Create(context.Background(),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := events.NewRecorder(c)
	go rec.Run(ctx)
	r := rec.For("endpoint-controller")
	r.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpoint", "Failed to update endpoint %s/%s: %s", ns, "web", "boom")
	r.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpoint", "Failed to update endpoint %s/%s: %s", ns, "web", "boom")
	r.Eventf(svc, corev1.EventTypeNormal, "Other", "something else")

	events := client.Resource[*corev1.Event](c, "events").Namespace(ns)
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := events.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var failed, other *corev1.Event
		for i := range list.Items {
			switch list.Items[i].Reason {
			case "FailedToUpdateEndpoint":
				failed = list.Items[i]
			case "Other":
				other = list.Items[i]
			}
		}
		if len(list.Items) == 2 && failed != nil && failed.Count == 2 && other != nil {
			ref := failed.InvolvedObject
			if ref.Kind != "Service" || ref.APIVersion != "v1" || ref.Name != "web" || ref.UID != svc.UID {
				t.Errorf("involvedObject %+v", ref)
			}
			if failed.Type != corev1.EventTypeWarning || failed.Source.Component != "endpoint-controller" ||
				failed.Message != "Failed to update endpoint "+ns+"/web: boom" {
				t.Errorf("event %+v", failed)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events: %d items, want one with count 2 and one other", len(list.Items))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
