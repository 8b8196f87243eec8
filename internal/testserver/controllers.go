package testserver

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// StartControllers builds the controllers of entries on a new Context over c (each with its
// default settings) and runs them until the test ends.
func StartControllers(t testing.TB, c *client.Client, entries ...controller.Entry) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrls := make([]controller.Controller, 0, len(entries))
	for _, e := range entries {
		ctrl, err := e.Start(cctx)
		if err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		ctrls = append(ctrls, ctrl)
	}
	RunControllers(t, cctx, ctrls...)
}

// RunControllers runs controllers built on cctx as the controller manager would (shared
// informers started, event recorder running) until stop is called or the test ends; stop
// returns once everything started here has ended.
func RunControllers(t testing.TB, cctx *controller.Context, ctrls ...controller.Controller) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	cctx.Informers.Start(ctx)
	wg.Go(func() { cctx.Recorder.Run(ctx) })
	for _, ctrl := range ctrls {
		wg.Go(func() {
			if err := ctrl.Run(ctx); err != nil {
				t.Errorf("%s: %v", ctrl.Name(), err)
			}
		})
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			cctx.Informers.Shutdown()
		})
	}
	t.Cleanup(stop)
	return stop
}

// Eventually polls cond every 20 ms until it holds, failing the test after timeout.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// OptionsCase is one case of CheckOptions: Set changes a controller's default settings; Flag
// is the flag the one error Validate returns must name ("" when the settings are valid).
type OptionsCase[O controller.Options] struct {
	Name string
	Set  func(O)
	Flag string
}

// CheckOptions runs each case against fresh defaults.
func CheckOptions[O controller.Options](t testing.TB, defaults func() O, cases ...OptionsCase[O]) {
	t.Helper()
	for _, tc := range cases {
		o := defaults()
		tc.Set(o)
		errs := o.Validate()
		switch {
		case tc.Flag == "" && len(errs) > 0:
			t.Errorf("%s: %v", tc.Name, errs)
		case tc.Flag != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.Flag)):
			t.Errorf("%s: errors %v, want one naming %s", tc.Name, errs, tc.Flag)
		}
	}
}

// Discovery returns c's discovery (ServerResources) without the resources hide picks, for
// tests of controllers that learn resources from discovery: flipping what hide picks while
// they run shows a resource appearing or going away, as a custom resource would.
func Discovery(c *client.Client, hide func(schema.GroupVersionResource) bool) func(context.Context) ([]*metav1.APIResourceList, error) {
	return func(ctx context.Context) ([]*metav1.APIResourceList, error) {
		lists, err := c.ServerResources(ctx)
		for _, l := range lists {
			gv, _ := schema.ParseGroupVersion(l.GroupVersion)
			l.APIResources = slices.DeleteFunc(l.APIResources, func(r metav1.APIResource) bool {
				return hide(gv.WithResource(strings.Split(r.Name, "/")[0]))
			})
		}
		return lists, err
	}
}

// CustomResource defines a namespaced custom resource <plural>.<group> at v1 (any content,
// with a status subresource) and waits until discovery lists it; it returns its group,
// version and resource.
func CustomResource(t testing.TB, c *client.Client, group, plural, kind string) schema.GroupVersionResource {
	t.Helper()
	ctx := context.Background()
	crd, err := json.Marshal(map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names": map[string]any{"plural": plural, "kind": kind},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema":       map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				"subresources": map[string]any{"status": map[string]any{}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Raw(ctx, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", nil, crd); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	Eventually(t, "discovery to list "+gvr.String(), 15*time.Second, func() bool {
		lists, err := c.ServerResources(ctx)
		return err == nil && slices.ContainsFunc(client.FilterResources(lists), func(r client.APIResource) bool { return r.GroupVersionResource == gvr })
	})
	return gvr
}

// CreateCustomObject creates an object of a custom resource from its JSON fields (apiVersion
// and kind are filled in).
func CreateCustomObject(t testing.TB, c *client.Client, gvr schema.GroupVersionResource, kind, namespace string, obj map[string]any) *metav1.PartialObjectMetadata {
	t.Helper()
	obj["apiVersion"], obj["kind"] = gvr.GroupVersion().String(), kind
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.Raw(context.Background(), http.MethodPost, "/apis/"+gvr.GroupVersion().String()+"/namespaces/"+namespace+"/"+gvr.Resource, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	out := &metav1.PartialObjectMetadata{}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}
