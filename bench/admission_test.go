package bench

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// allowAll is a validating webhook that admits everything, answering as fast as it can.
func allowAll(w http.ResponseWriter, r *http.Request) {
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

// BenchmarkAdmission compares creating ConfigMaps with no admission webhook and with one
// validating webhook (a TLS server in this process that admits everything) that judges them,
// on the same server. 16 clients.
func BenchmarkAdmission(b *testing.B) {
	ctx := context.Background()
	hook := httptest.NewTLSServer(http.HandlerFunc(allowAll))
	defer hook.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})
	for _, t := range targets(b) {
		for _, withHook := range []bool{false, true} {
			name := t.name + "/none"
			if withHook {
				name = t.name + "/validating-webhook"
			}
			b.Run(name, func(b *testing.B) {
				ns := fmt.Sprintf("bench-admission-%s-%d-%t", runID, b.N, withHook)
				if _, err := t.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"bench-admission": ns}}}, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				if withHook {
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
				latencies(b, b.N, func(i int) error {
					_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
					return err
				})
			})
		}
	}
}
