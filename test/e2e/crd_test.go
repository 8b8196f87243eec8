//go:build linux

package e2e

import (
	"strings"
	"testing"
)

const cronTabCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.e2e.example.com
spec:
  group: e2e.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        description: CronTab runs an image on a schedule.
        properties:
          spec:
            type: object
            required: [cronSpec]
            properties:
              cronSpec:
                type: string
                description: The schedule, in cron format.
                pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'
              image: {type: string, default: busybox}
              replicas: {type: integer, minimum: 1, maximum: 10, default: 1}
          status:
            type: object
            properties:
              replicas: {type: integer}
`

// TestCustomResourceDefinitions walks a CRD's life with kubectl: applied and Established,
// custom resources created, defaulted, pruned, rejected with causes, listed with their
// printer columns, found through their short name and category, explained, scaled, their
// status written, and deleted with the CRD.
func TestCustomResourceDefinitions(t *testing.T) {
	k := newNamespace(t)
	cluster := kc{t: t}
	runSteps(t, []step{
		{"apply and wait for Established", func(t *testing.T) {
			expectContains(t, "apply", cluster.okIn(cronTabCRD, "apply", "-f", "-"), "customresourcedefinition.apiextensions.k8s.io/crontabs.e2e.example.com created")
			cluster.ok("wait", "--for=condition=Established", "crd/crontabs.e2e.example.com", "--timeout=10s")
			expectContains(t, "api-resources", cluster.ok("api-resources", "--api-group=e2e.example.com"), "crontabs", "ct", "e2e.example.com/v1", "CronTab")
		}},
		{"create: defaulted, unknown fields refused", func(t *testing.T) {
			r := k.failIn("apiVersion: e2e.example.com/v1\nkind: CronTab\nmetadata: {name: c1}\nspec: {cronSpec: '* * * * */5', color: red}\n", "apply", "-f", "-")
			expectContains(t, "unknown field", r.stderr, `unknown field "spec.color"`)
			k.okIn("apiVersion: e2e.example.com/v1\nkind: CronTab\nmetadata: {name: c1}\nspec: {cronSpec: '* * * * */5'}\n", "apply", "-f", "-")
			k.expectJSONPath("crontab/c1", "{.spec.image} {.spec.replicas}", "busybox 1")
			out := k.okIn("apiVersion: e2e.example.com/v1\nkind: CronTab\nmetadata: {name: c2}\nspec: {cronSpec: '0 * * * *', color: red}\n", "apply", "--validate=false", "-f", "-")
			expectContains(t, "apply without validation", out, "crontab.e2e.example.com/c2 created")
			k.expectJSONPath("ct/c2", "{.spec}", `{"cronSpec":"0 * * * *","image":"busybox","replicas":1}`)
		}},
		{"invalid objects rejected with causes", func(t *testing.T) {
			r := k.failIn("apiVersion: e2e.example.com/v1\nkind: CronTab\nmetadata: {name: bad}\nspec: {cronSpec: nope, replicas: 20}\n", "apply", "-f", "-")
			expectContains(t, "invalid", r.stderr, `The CronTab "bad" is invalid`, `spec.cronSpec: Invalid value: "nope"`,
				"spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10")
			k.expectNotFound("crontab/bad")
		}},
		{"printer columns, short name, category", func(t *testing.T) {
			tab := parseTable(t, k.ok("get", "ct"))
			expectHeader(t, "get ct", tab, "NAME", "SPEC", "REPLICAS", "AGE")
			if row := tab.row(t, "c1"); row["SPEC"] != "* * * * */5" || row["REPLICAS"] != "1" {
				t.Errorf("row c1: %v", row)
			}
			expectContains(t, "get all", k.ok("get", "all"), "crontab.e2e.example.com/c1")
		}},
		{"explain", func(t *testing.T) {
			out := k.ok("explain", "crontabs.spec")
			expectContains(t, "explain", out, "cronSpec", "The schedule, in cron format.", "replicas")
		}},
		{"scale and status", func(t *testing.T) {
			k.ok("scale", "crontab/c1", "--replicas=3")
			k.expectJSONPath("crontab/c1", "{.spec.replicas} {.metadata.generation}", "3 2")
			k.ok("patch", "crontab/c1", "--subresource=status", "--type=merge", "-p", `{"status":{"replicas":3}}`)
			k.expectJSONPath("crontab/c1", "{.status.replicas}", "3")
			r := k.fail("scale", "crontab/c1", "--replicas=-1")
			expectContains(t, "negative scale", r.stderr+r.stdout, "replicas")
		}},
		{"deleting the CRD deletes its objects", func(t *testing.T) {
			cluster.ok("delete", "crd", "crontabs.e2e.example.com", "--timeout=20s")
			r := k.fail("get", "crontabs.e2e.example.com")
			if !strings.Contains(r.stderr, "the server doesn't have a resource type") && !strings.Contains(r.stderr, "NotFound") {
				t.Errorf("custom resources still served:\n%s", r)
			}
		}},
	})
}
