package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestBuiltinResources: a manifest with one object of each resource kplane serves without a
// controller of its own (and an events.k8s.io Event) applies, applies again unchanged, and
// kubectl get shows each as it shows the same object against kube-apiserver v1.36 (the
// expected cells below are that server's, but for AGE).
func TestBuiltinResources(t *testing.T) {
	k := newNamespace(t)
	data, err := os.ReadFile("testdata/builtins.yaml")
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.ReplaceAll(string(data), "${NS}", k.ns)
	created := []string{
		"podtemplate/web-template", "event.events.k8s.io/web-event", "ingressclass.networking.k8s.io/builtins-nginx",
		"ingress.networking.k8s.io/web", "networkpolicy.networking.k8s.io/web-allow", "servicecidr.networking.k8s.io/builtins-cidr",
		"ipaddress.networking.k8s.io/10.250.0.10", "runtimeclass.node.k8s.io/builtins-gvisor", "priorityclass.scheduling.k8s.io/builtins-high",
		"csidriver.storage.k8s.io/hostpath.csi.example.com", "csinode.storage.k8s.io/builtins-node",
		"csistoragecapacity.storage.k8s.io/node-1-capacity", "volumeattachment.storage.k8s.io/builtins-va",
		"volumeattributesclass.storage.k8s.io/builtins-fast", "deviceclass.resource.k8s.io/gpu.example.com",
		"resourceclaim.resource.k8s.io/gpu-claim", "resourceclaimtemplate.resource.k8s.io/gpu-template",
		"resourceslice.resource.k8s.io/builtins-node-gpu.example.com",
	}
	out := k.okIn(manifest, "apply", "-f", "-")
	for _, obj := range created {
		expectContains(t, "first apply", out, obj+" created")
	}
	// kubectl computes a non-empty patch for these four on every apply; against
	// kube-apiserver v1.36 they are reported configured the second time too.
	reconfigured := []string{"networkpolicy.networking.k8s.io/web-allow", "ipaddress.networking.k8s.io/10.250.0.10",
		"resourceclaim.resource.k8s.io/gpu-claim", "resourceclaimtemplate.resource.k8s.io/gpu-template"}
	out = k.okIn(manifest, "apply", "-f", "-")
	for _, obj := range created {
		want := " unchanged"
		if slices.Contains(reconfigured, obj) {
			want = " configured"
		}
		expectContains(t, "second apply", out, obj+want)
	}

	for _, tc := range []struct {
		resource, name string
		header         []string
		cells          map[string]string
	}{
		{"podtemplates", "web-template", []string{"NAME", "CONTAINERS", "IMAGES", "POD LABELS"},
			map[string]string{"CONTAINERS": "web", "IMAGES": "nginx:1.27", "POD LABELS": "app=web"}},
		{"events.events.k8s.io", "web-event", []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE", "FIRST SEEN", "COUNT", "NAME"},
			map[string]string{"TYPE": "Normal", "REASON": "Applied", "OBJECT": "configmap/web", "SOURCE": "example.com/builtins, builtins-1",
				"MESSAGE": "applied from a manifest", "COUNT": "1"}},
		{"ingressclasses", "builtins-nginx", []string{"NAME", "CONTROLLER", "PARAMETERS", "AGE"},
			map[string]string{"CONTROLLER": "example.com/ingress-nginx", "PARAMETERS": "<none>"}},
		{"ingresses", "web", []string{"NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"},
			map[string]string{"CLASS": "builtins-nginx", "HOSTS": "web.example.com", "ADDRESS": "", "PORTS": "80, 443"}},
		{"networkpolicies", "web-allow", []string{"NAME", "POD-SELECTOR", "AGE"}, map[string]string{"POD-SELECTOR": "app=web"}},
		{"servicecidrs", "builtins-cidr", []string{"NAME", "CIDRS", "AGE"}, map[string]string{"CIDRS": "10.250.0.0/24"}},
		{"ipaddresses", "10.250.0.10", []string{"NAME", "PARENTREF"}, map[string]string{"PARENTREF": "services/default/web"}},
		{"runtimeclasses", "builtins-gvisor", []string{"NAME", "HANDLER", "AGE"}, map[string]string{"HANDLER": "runsc"}},
		{"priorityclasses", "builtins-high", []string{"NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"},
			map[string]string{"VALUE": "1000000", "GLOBAL-DEFAULT": "false", "PREEMPTIONPOLICY": "PreemptLowerPriority"}},
		{"priorityclasses", "system-node-critical", nil, map[string]string{"VALUE": "2000001000"}},
		{"csidrivers", "hostpath.csi.example.com", []string{"NAME", "ATTACHREQUIRED", "PODINFOONMOUNT", "STORAGECAPACITY", "TOKENREQUESTS", "REQUIRESREPUBLISH", "MODES", "AGE"},
			map[string]string{"ATTACHREQUIRED": "false", "PODINFOONMOUNT": "true", "STORAGECAPACITY": "false", "TOKENREQUESTS": "<unset>",
				"REQUIRESREPUBLISH": "false", "MODES": "Persistent,Ephemeral"}},
		{"csinodes", "builtins-node", []string{"NAME", "DRIVERS", "AGE"}, map[string]string{"DRIVERS": "1"}},
		{"csistoragecapacities", "node-1-capacity", []string{"NAME", "CREATED AT"}, nil},
		{"volumeattachments", "builtins-va", []string{"NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"},
			map[string]string{"ATTACHER": "hostpath.csi.example.com", "PV": "pv-1", "NODE": "node-1", "ATTACHED": "false"}},
		{"volumeattributesclasses", "builtins-fast", []string{"NAME", "DRIVERNAME", "AGE"}, map[string]string{"DRIVERNAME": "hostpath.csi.example.com"}},
		{"deviceclasses", "gpu.example.com", []string{"NAME", "AGE"}, nil},
		{"resourceclaims", "gpu-claim", []string{"NAME", "STATE", "AGE"}, map[string]string{"STATE": "pending"}},
		{"resourceclaimtemplates", "gpu-template", []string{"NAME", "AGE"}, nil},
		{"resourceslices", "builtins-node-gpu.example.com", []string{"NAME", "NODE", "DRIVER", "POOL", "AGE"},
			map[string]string{"NODE": "node-1", "DRIVER": "gpu.example.com", "POOL": "node-1"}},
	} {
		t.Run(tc.resource+"/"+tc.name, func(t *testing.T) {
			tab := parseTable(t, k.ok("get", tc.resource, tc.name, "-o", "wide"))
			if tc.header != nil {
				expectHeader(t, tc.resource, tab, tc.header...)
			}
			row := tab.row(t, tc.name)
			for col, want := range tc.cells {
				if row[col] != want {
					t.Errorf("%s %s: %s is %q, want %q", tc.resource, tc.name, col, row[col], want)
				}
			}
		})
	}

	// Defaults as kube-apiserver fills them, and the same event through core/v1.
	k.expectJSONPath("networkpolicy/web-allow", "{.spec.policyTypes[0]} {.spec.ingress[0].ports[0].protocol}", "Ingress TCP")
	k.expectJSONPath("csidriver/hostpath.csi.example.com", "{.spec.fsGroupPolicy} {.spec.seLinuxMount}", "ReadWriteOnceWithFSType false")
	k.expectJSONPath("resourceclaim/gpu-claim", "{.spec.devices.requests[0].exactly.allocationMode} {.spec.devices.requests[0].exactly.count}", "ExactCount 1")
	k.expectJSONPath("event.v1./web-event", "{.message} {.involvedObject.name} {.reportingComponent}", "applied from a manifest web example.com/builtins")

	// Invalid objects get the server's causes.
	r := k.failIn("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: system-mine}\nvalue: 5\n", "apply", "-f", "-")
	expectContains(t, "reserved class name", r.stderr, "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only")
	r = k.failIn("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: empty}\nspec: {}\n", "apply", "-f", "-")
	expectContains(t, "ingress without rules", r.stderr, "either `defaultBackend` or `rules` must be specified")

	// Deleting through kubectl removes them again (the manifest's cluster-scoped objects too).
	out = k.okIn(manifest, "delete", "-f", "-")
	for _, obj := range created {
		kind, name, _ := strings.Cut(obj, "/")
		expectContains(t, "delete", out, kind+` "`+name+`" deleted`)
	}

	tab := parseTable(t, k.ok("get", "componentstatuses"))
	expectHeader(t, "componentstatuses", tab, "NAME", "STATUS", "MESSAGE", "ERROR")
	if row := tab.row(t, "etcd-0"); row["STATUS"] != "Healthy" || row["MESSAGE"] != "ok" {
		t.Errorf("etcd-0: %v", row)
	}
}
