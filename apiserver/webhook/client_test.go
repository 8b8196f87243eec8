package webhook_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver/webhook"
)

// serverFor starts a TLS server whose certificate names dnsName, and returns it with the PEM
// of that certificate.
func serverFor(t *testing.T, dnsName string, h http.HandlerFunc) (*httptest.Server, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{dnsName}, IPAddresses: []net.IP{net.IPv6loopback, net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func echo(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	json.NewDecoder(r.Body).Decode(&in)
	in["path"], in["contentType"] = r.URL.Path, r.Header.Get("Content-Type")
	json.NewEncoder(w).Encode(in)
}

func TestCall(t *testing.T) {
	srv, ca := serverFor(t, "hook.example", echo)
	addr := strings.TrimPrefix(srv.URL, "https://")
	byService := func(_ context.Context, ns, name string, port int32) (string, error) {
		if ns != "hooks" || name != "conv" || port != 8443 {
			t.Errorf("resolved %s/%s:%d", ns, name, port)
		}
		return addr, nil
	}
	svcSrv, svcCA := serverFor(t, "conv.hooks.svc", echo)
	svcAddr := strings.TrimPrefix(svcSrv.URL, "https://")
	slow, slowCA := serverFor(t, "conv.hooks.svc", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	})
	failing, failingCA := serverFor(t, "conv.hooks.svc", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no conversion today", http.StatusInternalServerError)
	})
	// A Service's URL names <name>.<namespace>.svc, which is not in DNS: the client dials the
	// test servers' loopback addresses the resolver gives.
	svc := &webhook.Service{Namespace: "hooks", Name: "conv", Port: 8443, Path: "/convert"}
	cases := []struct {
		name    string
		cfg     webhook.Config
		resolve webhook.ResolveService
		timeout time.Duration
		wantErr string
	}{
		{name: "a Service, verified for its DNS name", cfg: webhook.Config{Service: svc, CABundle: svcCA},
			resolve: func(context.Context, string, string, int32) (string, error) { return svcAddr, nil }},
		{name: "a certificate for another name", cfg: webhook.Config{Service: svc, CABundle: ca}, resolve: byService,
			wantErr: "https://conv.hooks.svc:8443/convert"},
		{name: "a URL", cfg: webhook.Config{URL: srv.URL + "/convert", CABundle: ca}},
		{name: "too slow", cfg: webhook.Config{Service: svc, CABundle: slowCA}, timeout: 100 * time.Millisecond,
			resolve: func(context.Context, string, string, int32) (string, error) {
				return strings.TrimPrefix(slow.URL, "https://"), nil
			},
			wantErr: "context deadline exceeded"},
		{name: "an error status", cfg: webhook.Config{Service: svc, CABundle: failingCA},
			resolve: func(context.Context, string, string, int32) (string, error) {
				return strings.TrimPrefix(failing.URL, "https://"), nil
			},
			wantErr: "answered 500 Internal Server Error: no conversion today"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := webhook.New(tc.cfg, tc.resolve, tc.timeout)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var out map[string]any
			err = c.Call(context.Background(), map[string]any{"kind": "Review"}, &out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out["kind"] != "Review" || out["path"] != "/convert" || out["contentType"] != "application/json" {
				t.Errorf("the webhook saw %v", out)
			}
		})
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     webhook.Config
		wantErr string
	}{
		{"nothing", webhook.Config{}, "neither url nor service"},
		{"a caBundle that is no PEM", webhook.Config{URL: "https://x.example", CABundle: []byte("garbage")}, "no PEM certificate"},
	} {
		if _, err := webhook.New(tc.cfg, nil, 0); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}
