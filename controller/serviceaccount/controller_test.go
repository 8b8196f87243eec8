package serviceaccount

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

func TestWantsAccounts(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		ns   corev1.Namespace
		want bool
	}{
		{"new, no phase yet", corev1.Namespace{}, true},
		{"active", corev1.Namespace{Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}, true},
		{"terminating phase", corev1.Namespace{Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}, false},
		{"deletion timestamp", corev1.Namespace{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}, false},
	} {
		if got := wantsAccounts(&tc.ns); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		names, have, want []string
	}{
		{[]string{"default"}, nil, []string{"default"}},
		{[]string{"default"}, []string{"default"}, nil},
		{[]string{"a", "b", "c"}, []string{"b"}, []string{"a", "c"}},
	} {
		got := missing(tc.names, func(n string) bool { return slices.Contains(tc.have, n) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("missing(%v, have %v) = %v, want %v", tc.names, tc.have, got, tc.want)
		}
	}
}

// start runs the controller until the test ends.
func start(t *testing.T) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(cctx, controller.NoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testserver.RunControllers(t, cctx, ctrl)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, what, 10*time.Second, cond)
}

func TestDefaultAccount(t *testing.T) {
	ctx := context.Background()
	nss := client.Resource[*corev1.Namespace](c, "namespaces")
	// A namespace that is Terminating before the controller starts stays without accounts.
	dying := testserver.Namespace(t, c, "sa-dying-")
	if err := nss.Delete(ctx, dying, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start(t)
	ns := testserver.Namespace(t, c, "sa-")
	sas := client.Resource[*corev1.ServiceAccount](c, "serviceaccounts").Namespace(ns)
	exists := func() bool {
		_, err := sas.Get(ctx, DefaultName)
		return err == nil
	}
	waitFor(t, "the default account", exists)
	first, err := sas.Get(ctx, DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	if err := sas.Delete(ctx, DefaultName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the default account again", func() bool {
		sa, err := sas.Get(ctx, DefaultName)
		return err == nil && sa.UID != first.UID
	})
	list, err := client.Resource[*corev1.ServiceAccount](c, "serviceaccounts").Namespace(dying).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("terminating namespace %s has %d accounts, want none", dying, len(list.Items))
	}
}
