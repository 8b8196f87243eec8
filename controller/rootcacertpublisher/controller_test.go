package rootcacertpublisher

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	c   *client.Client
	srv *testserver.Server
)

func TestMain(m *testing.M) {
	testserver.Main(m, func(s *testserver.Server, cl *client.Client) { srv, c = s, cl })
}

func TestDesired(t *testing.T) {
	cur := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: "ns", ResourceVersion: "7",
		Labels: map[string]string{"keep": "me"}, Annotations: map[string]string{"other": "x"}},
		Data: map[string]string{"ca.crt": "old", "extra": "y"}, BinaryData: map[string][]byte{"b": {1}}}
	got := Desired("CA", cur)
	if got.ResourceVersion != "7" || got.Labels["keep"] != "me" || got.Annotations["other"] != "x" || got.Annotations[descriptionAnnotation] != description {
		t.Errorf("metadata not kept: %+v", got.ObjectMeta)
	}
	if len(got.Data) != 1 || got.Data[DataKey] != "CA" || got.BinaryData != nil {
		t.Errorf("data %v %v", got.Data, got.BinaryData)
	}
	if cur.Data["ca.crt"] != "old" {
		t.Error("Desired changed its argument")
	}
	if fresh := Desired("CA", nil); fresh.Name != ConfigMapName || fresh.Data[DataKey] != "CA" {
		t.Errorf("new %+v", fresh)
	}
}

// TestPublisher: every namespace, existing or new, gets kube-root-ca.crt with the CA; deleted
// it comes back, edited it is restored.
func TestPublisher(t *testing.T) {
	ctx := context.Background()
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	before := testserver.Namespace(t, c, "rootca-before-")
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx.RootCAFile = srv.CAFile
	ctrl, err := New(cctx, controller.NoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testserver.RunControllers(t, cctx, ctrl)
	published := func(ns string, not *corev1.ConfigMap) func() bool {
		return func() bool {
			cm, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Get(ctx, ConfigMapName)
			return err == nil && len(cm.Data) == 1 && cm.Data[DataKey] == string(ca) && cm.Annotations[descriptionAnnotation] != "" &&
				(not == nil || cm.UID != not.UID || cm.ResourceVersion != not.ResourceVersion)
		}
	}
	testserver.Eventually(t, "the ConfigMap in a namespace made before", 10*time.Second, published(before, nil))
	testserver.Eventually(t, "the ConfigMap in default", 10*time.Second, published("default", nil))
	ns := testserver.Namespace(t, c, "rootca-")
	testserver.Eventually(t, "the ConfigMap in a new namespace", 10*time.Second, published(ns, nil))

	maps := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns)
	first, err := maps.Get(ctx, ConfigMapName)
	if err != nil {
		t.Fatal(err)
	}
	if err := maps.Delete(ctx, ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the ConfigMap made again", 10*time.Second, published(ns, first))

	cur, err := maps.Get(ctx, ConfigMapName)
	if err != nil {
		t.Fatal(err)
	}
	cur.Data = map[string]string{DataKey: "tampered", "more": "x"}
	edited, err := maps.Update(ctx, cur)
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the ConfigMap restored", 10*time.Second, published(ns, edited))
}
