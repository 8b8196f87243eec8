package apiserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// CRDs are applied server-side like any object (kubectl apply --server-side, Helm 4, Flux):
// their schemas' untyped parts (default, items, additionalProperties) are recorded whole.
func TestApplyCRD(t *testing.T) {
	g := fmt.Sprintf("apply%d.example.com", time.Now().UnixNano()%100000)
	crd := func(shortName string) string {
		return strings.NewReplacer("{{g}}", g, "{{s}}", shortName).Replace(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.{{g}}}
spec:
  group: {{g}}
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [{{s}}]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            additionalProperties: {type: string}
          list:
            type: array
            items: {type: string, default: x}
`)
	}
	path := crdsPath + "/gadgets." + g
	r := do(t, "PATCH", path+"?fieldManager=alice", crd("gd"), "Content-Type", applyYAML)
	if r.code != http.StatusCreated {
		t.Fatalf("apply: %d %s", r.code, r.body)
	}
	obj := r.object(t)
	if got := managers(t, obj); strings.Join(got, " ") != "alice/Apply/" || !owns(obj, "alice", "f:versions") {
		t.Fatalf("managedFields of an applied CRD: %s", get(obj, "metadata", "managedFields"))
	}
	r = do(t, "PATCH", path+"?fieldManager=bob", crd("gg"), "Content-Type", applyYAML)
	if r.code != http.StatusConflict || !strings.Contains(string(r.body), `conflict with \"alice\"`) {
		t.Fatalf("bob's apply of alice's shortNames: %d %s", r.code, r.body)
	}
	if r = do(t, "PATCH", path+"?fieldManager=alice", crd("gg"), "Content-Type", applyYAML); r.code != http.StatusOK {
		t.Fatalf("alice's re-apply: %d %s", r.code, r.body)
	}
	if got := get(r.object(t), "spec", "names", "shortNames", 0); got != "gg" {
		t.Errorf("shortNames after the re-apply: %v", got)
	}
	do(t, "DELETE", path, nil)
	eventually(t, "the CRD gone", func() bool { return do(t, "GET", path, nil).code == http.StatusNotFound })
}
