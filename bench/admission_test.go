package bench

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hookCalls counts allowAll's reviews.
var hookCalls atomic.Int64

// allowAll is a validating webhook that admits everything, answering as fast as it can.
func allowAll(w http.ResponseWriter, r *http.Request) {
	hookCalls.Add(1)
	var review struct {
		APIVersion string `json:"apiVersion"`
		Request    struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	json.NewEncoder(w).Encode(map[string]any{"apiVersion": review.APIVersion, "kind": "AdmissionReview",
		"response": map[string]any{"uid": review.Request.UID, "allowed": true}})
}

// BenchmarkAdmission compares creating ConfigMaps with no admission, with one validating
// webhook (a TLS server in this process that admits everything), with one CEL
// ValidatingAdmissionPolicy judging them and with one MutatingAdmissionPolicy labelling them
// (an apply configuration), on the same server. 16 clients.
func BenchmarkAdmission(b *testing.B) {
	ctx := context.Background()
	hook := httptest.NewTLSServer(http.HandlerFunc(allowAll))
	defer hook.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})
	for _, t := range targets(b) {
		for _, judge := range []string{"none", "validating-webhook", "cel-policy", "mutating-policy"} {
			hookCalls.Store(0)
			b.Run(t.name+"/"+judge, func(b *testing.B) {
				ns := fmt.Sprintf("bench-admission-%s-%d-%s", runID, b.N, judge)
				if _, err := t.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"bench-admission": ns}}}, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				if judge == "cel-policy" {
					policies := t.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies()
					bindings := t.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
					fail := admissionregistrationv1.Fail
					p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ns},
						Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
							FailurePolicy: &fail,
							MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
								RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
									Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
							Validations: []admissionregistrationv1.Validation{{Expression: "!has(object.data) || object.data.size() < 100", Message: "too many keys"}},
						}}
					if _, err := policies.Create(ctx, p, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					defer policies.Delete(ctx, ns, metav1.DeleteOptions{})
					binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: ns},
						Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: ns,
							ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
							MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench-admission": ns}}}}}
					if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					defer bindings.Delete(ctx, ns, metav1.DeleteOptions{})
				}
				if judge == "mutating-policy" {
					policies := t.cs.AdmissionregistrationV1().MutatingAdmissionPolicies()
					bindings := t.cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings()
					fail := admissionregistrationv1.Fail
					p := &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ns},
						Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
							FailurePolicy: &fail, ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
							MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
								RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
									Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
							Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
								ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"mutated": "yes"}}}`}}},
						}}
					if _, err := policies.Create(ctx, p, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					defer policies.Delete(ctx, ns, metav1.DeleteOptions{})
					binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: ns},
						Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: ns,
							MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench-admission": ns}}}}}
					if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					defer bindings.Delete(ctx, ns, metav1.DeleteOptions{})
				}
				if judge == "validating-webhook" {
					url := hook.URL + "/validate"
					none, fail := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail
					cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ns},
						Webhooks: []admissionregistrationv1.ValidatingWebhook{{
							Name: "allow.bench.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
							Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
								Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
							NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench-admission": ns}},
							SideEffects:       &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
						}}}
					webhooks := t.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
					if _, err := webhooks.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					defer webhooks.Delete(ctx, ns, metav1.DeleteOptions{})
				}
				cms := t.cs.CoreV1().ConfigMaps(ns)
				// Measured once the judge is in force (kube-apiserver learns policies and
				// webhooks from informers, a moment after they are created).
				deadline := time.Now().Add(10 * time.Second)
				for i := 0; judge != "none"; i++ {
					before := hookCalls.Load()
					data := map[string]string{}
					for k := range 100 {
						data[fmt.Sprint("k", k)] = "v"
					}
					created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("probe-", i)}, Data: data}, metav1.CreateOptions{})
					if (judge == "cel-policy" && apierrors.IsInvalid(err)) || (judge == "validating-webhook" && hookCalls.Load() > before) ||
						(judge == "mutating-policy" && err == nil && created.Labels["mutated"] == "yes") {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("%s not in force after 10s", judge)
					}
					time.Sleep(20 * time.Millisecond)
				}
				latencies(b, b.N, func(i int) error {
					_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
					return err
				})

			})
		}
	}
}
