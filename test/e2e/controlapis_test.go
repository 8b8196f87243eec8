//go:build linux

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"
)

// controlAPIsManifest has one object of each resource of the RBAC, certificates, flow-control,
// admission registration and API registration groups; %[1]s is the test's namespace, %[2]s a
// base64 PEM certificate request.
const controlAPIsManifest = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: %[1]s}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: read-pods, namespace: %[1]s}
subjects:
- {kind: User, name: jane}
- {kind: ServiceAccount, name: default, namespace: %[1]s}
roleRef: {kind: Role, name: pod-reader, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]s-monitoring}
aggregationRule:
  clusterRoleSelectors: [{matchLabels: {rbac.example.com/aggregate-to-monitoring: "true"}}]
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s-monitoring}
subjects: [{kind: Group, name: admins, apiGroup: rbac.authorization.k8s.io}]
roleRef: {kind: ClusterRole, name: %[1]s-monitoring, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: %[1]s-alice}
spec:
  request: %[2]s
  signerName: kubernetes.io/kube-apiserver-client
  expirationSeconds: 86400
  usages: [client auth]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: %[1]s-batch}
spec:
  type: Limited
  limited:
    limitResponse: {type: Queue, queuing: {}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: %[1]s-batch}
spec:
  priorityLevelConfiguration: {name: %[1]s-batch}
  distinguisherMethod: {type: ByNamespace}
  rules:
  - subjects: [{kind: ServiceAccount, serviceAccount: {name: "*", namespace: %[1]s}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: %[1]s-policy}
webhooks:
- name: pods.policy.example.com
  clientConfig: {service: {name: policy, namespace: %[1]s, path: /validate}}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[1]s}}
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: %[1]s-inject}
webhooks:
- name: inject.example.com
  clientConfig: {url: "https://inject.example.com/mutate"}
  rules: [{operations: [CREATE, UPDATE], apiGroups: [apps], apiVersions: [v1], resources: [deployments]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[1]s}}
  sideEffects: NoneOnDryRun
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: %[1]s-replicas}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}]
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[1]s}}
  validations: [{expression: "object.spec.replicas <= 5"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: %[1]s-replicas}
spec:
  policyName: %[1]s-replicas
  paramRef: {name: limits, namespace: %[1]s, parameterNotFoundAction: Deny}
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: %[1]s-label}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[1]s}}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'mutated': 'true'}}}"}
  reinvocationPolicy: Never
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: %[1]s-label}
spec:
  policyName: %[1]s-label
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.%[1]s.example.com}
spec:
  group: %[1]s.example.com
  version: v1beta1
  groupPriorityMinimum: 1000
  versionPriority: 15
  service: {name: example-api, namespace: %[1]s}
  insecureSkipTLSVerify: true
`

// certificateRequest is a base64 PEM certificate request for CN=alice, as a CSR's spec.request.
func certificateRequest(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// TestControlAPIs applies a manifest with an object of every RBAC, certificates, flow-control,
// admission registration and API registration resource, gets each back as kubectl shows it
// against kube-apiserver, and asks the authorization API what is allowed: everything, since
// kplane does not authorize yet.
func TestControlAPIs(t *testing.T) {
	k := newNamespace(t)
	all := kc{t: t} // cluster-scoped objects and -A
	ns := k.ns
	manifest := fmt.Sprintf(controlAPIsManifest, ns, certificateRequest(t))
	// The cluster-scoped objects outlive the namespace: the webhooks and policies among them
	// would judge the other tests' writes (their selectors keep them to this namespace
	// meanwhile).
	t.Cleanup(func() { all.run(manifest, "delete", "--ignore-not-found", "--wait=false", "-f", "-") })
	runSteps(t, []step{
		{"apply", func(t *testing.T) {
			out := all.okIn(manifest, "apply", "-f", "-")
			if n := strings.Count(out, " created\n"); n != 14 {
				t.Errorf("%d objects created, want 14:\n%s", n, out)
			}
		}},
		{"get", func(t *testing.T) {
			for _, c := range []struct {
				kind, name string
				cluster    bool
				header     []string
				cells      map[string]string
			}{
				{"roles", "pod-reader", false, []string{"NAME", "CREATED AT"}, nil},
				{"rolebindings", "read-pods", false, []string{"NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"},
					map[string]string{"ROLE": "Role/pod-reader", "USERS": "jane", "SERVICEACCOUNTS": ns + "/default"}},
				{"clusterroles", ns + "-monitoring", true, []string{"NAME", "CREATED AT"}, nil},
				{"clusterrolebindings", ns + "-monitoring", true, []string{"NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"},
					map[string]string{"ROLE": "ClusterRole/" + ns + "-monitoring", "GROUPS": "admins"}},
				{"csr", ns + "-alice", true, []string{"NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"},
					map[string]string{"SIGNERNAME": "kubernetes.io/kube-apiserver-client", "REQUESTEDDURATION": "24h", "CONDITION": "Pending"}},
				{"prioritylevelconfigurations", ns + "-batch", true, []string{"NAME", "TYPE", "NOMINALCONCURRENCYSHARES", "QUEUES", "HANDSIZE", "QUEUELENGTHLIMIT", "AGE"},
					map[string]string{"TYPE": "Limited", "NOMINALCONCURRENCYSHARES": "30", "QUEUES": "64", "HANDSIZE": "8", "QUEUELENGTHLIMIT": "50"}},
				{"flowschemas", ns + "-batch", true, []string{"NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "AGE", "MISSINGPL"},
					map[string]string{"PRIORITYLEVEL": ns + "-batch", "MATCHINGPRECEDENCE": "1000", "DISTINGUISHERMETHOD": "ByNamespace"}},
				{"validatingwebhookconfigurations", ns + "-policy", true, []string{"NAME", "WEBHOOKS", "AGE"}, map[string]string{"WEBHOOKS": "1"}},
				{"mutatingwebhookconfigurations", ns + "-inject", true, []string{"NAME", "WEBHOOKS", "AGE"}, map[string]string{"WEBHOOKS": "1"}},
				{"validatingadmissionpolicies", ns + "-replicas", true, []string{"NAME", "VALIDATIONS", "PARAMKIND", "AGE"},
					map[string]string{"VALIDATIONS": "1", "PARAMKIND": "v1/ConfigMap"}},
				{"validatingadmissionpolicybindings", ns + "-replicas", true, []string{"NAME", "POLICYNAME", "PARAMREF", "AGE"},
					map[string]string{"POLICYNAME": ns + "-replicas", "PARAMREF": ns + "/limits"}},
				{"mutatingadmissionpolicies", ns + "-label", true, []string{"NAME", "MUTATIONS", "PARAMKIND", "AGE"},
					map[string]string{"MUTATIONS": "1", "PARAMKIND": "<unset>"}},
				{"mutatingadmissionpolicybindings", ns + "-label", true, []string{"NAME", "POLICYNAME", "PARAMREF", "AGE"},
					map[string]string{"POLICYNAME": ns + "-label", "PARAMREF": "<unset>"}},
				{"apiservices", "v1beta1." + ns + ".example.com", true, []string{"NAME", "SERVICE", "AVAILABLE", "AGE"},
					map[string]string{"SERVICE": ns + "/example-api", "AVAILABLE": "False (NotProxied)"}},
				{"apiservices", "v1.rbac.authorization.k8s.io", true, []string{"NAME", "SERVICE", "AVAILABLE", "AGE"},
					map[string]string{"SERVICE": "Local", "AVAILABLE": "True"}},
				{"flowschemas", "catch-all", true, []string{"NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "AGE", "MISSINGPL"},
					map[string]string{"PRIORITYLEVEL": "catch-all", "MATCHINGPRECEDENCE": "10000", "DISTINGUISHERMETHOD": "ByUser"}},
			} {
				kk := k
				if c.cluster {
					kk = all
				}
				tab := parseTable(t, kk.ok("get", c.kind, c.name, "-o", "wide"))
				expectHeader(t, c.kind, tab, c.header...)
				row := tab.row(t, c.name)
				for col, want := range c.cells {
					if row[col] != want {
						t.Errorf("%s %s: %s = %q, want %q", c.kind, c.name, col, row[col], want)
					}
				}
			}
		}},
		{"approve", func(t *testing.T) {
			expectContains(t, "approve", all.ok("certificate", "approve", ns+"-alice"), "approved")
			all.expectJSONPath("csr/"+ns+"-alice", "{.status.conditions[0].type}", "Approved")
			r := all.fail("certificate", "deny", ns+"-alice")
			expectContains(t, "deny after approve", r.stderr, "already Approved")
		}},
		{"the mutating policy labels new ConfigMaps", func(t *testing.T) {
			k.ok("create", "configmap", "probe", "--from-literal=a=b")
			k.expectJSONPath("configmap/probe", "{.metadata.labels.mutated}", "true")
		}},
		{"the validating policy's expressions are type-checked against Deployments", func(t *testing.T) {
			policy := "validatingadmissionpolicy/" + ns + "-replicas"
			all.eventually(policy, "{.status.observedGeneration}", "1", 10*time.Second)
			all.ok("patch", policy, "--type=json", "-p", `[{"op":"replace","path":"/spec/validations/0/expression","value":"object.spec.replica <= 5"}]`)
			all.eventually(policy, "{.status.observedGeneration}", "2", 10*time.Second)
			expectContains(t, "typeChecking", all.jsonpath(policy, "{.status.typeChecking.expressionWarnings[0].warning}"),
				"apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'")
		}},
		{"roleRef is immutable", func(t *testing.T) {
			r := k.fail("patch", "rolebinding", "read-pods", "--type", "merge", "-p", `{"roleRef":{"name":"other"}}`)
			expectContains(t, "roleRef patch", r.stderr, "cannot change roleRef")
		}},
		{"invalid", func(t *testing.T) {
			r := all.failIn(`{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"FlowSchema","metadata":{"name":"`+ns+`-first"},
"spec":{"matchingPrecedence":1,"priorityLevelConfiguration":{"name":"exempt"}}}`, "create", "-f", "-")
			expectContains(t, "precedence 1", r.stderr, "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1")
		}},
		{"can-i", func(t *testing.T) {
			if out := strings.TrimSpace(k.ok("auth", "can-i", "create", "pods")); out != "yes" {
				t.Errorf("can-i create pods: %q", out)
			}
			if out := strings.TrimSpace(all.ok("auth", "can-i", "delete", "nodes", "--as", "jane")); out != "yes" {
				t.Errorf("can-i delete nodes as jane: %q", out)
			}
			expectContains(t, "can-i --list", k.ok("auth", "can-i", "--list"), "*.*")
		}},
	})
}
