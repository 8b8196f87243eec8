package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// WebhookServer is where the test's own admission webhooks are expected to serve: Start
// points every webhook of the installed configurations that names a Service (as kubebuilder's
// config/webhook manifests do) at https://Host:Port/<the Service's path>, trusting the
// certificate in CertDir, as envtest's WebhookInstallOptions does. A controller-runtime
// manager serves there with
//
//	webhook.NewServer(webhook.Options{Host: env.WebhookServer.Host, Port: env.WebhookServer.Port, CertDir: env.WebhookServer.CertDir})
//
// Webhooks that name a URL are installed as written.
type WebhookServer struct {
	// Host is 127.0.0.1.
	Host string
	// Port was free when Start chose it; nothing listens there until the test does.
	Port int
	// CertDir holds tls.crt and tls.key: a self-signed certificate for 127.0.0.1 and
	// localhost, valid for a day, and its key.
	CertDir string
	// CAData is the certificate in PEM, the caBundle the rewritten webhooks carry.
	CAData []byte
}

// Addr is Host:Port.
func (w WebhookServer) Addr() string { return net.JoinHostPort(w.Host, strconv.Itoa(w.Port)) }

// newWebhookServer chooses a free loopback port and writes a serving certificate into dir.
func newWebhookServer(dir string) (WebhookServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return WebhookServer{}, fmt.Errorf("webhook server port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return WebhookServer{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return WebhookServer{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:        true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return WebhookServer{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return WebhookServer{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return WebhookServer{}, err
	}
	ws := WebhookServer{Host: "127.0.0.1", Port: port, CertDir: dir, CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	return ws, errors.Join(
		os.WriteFile(filepath.Join(dir, "tls.crt"), ws.CAData, 0o600),
		os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
}

// pointAt rewrites the webhooks of a webhook configuration manifest that name a Service to
// call ws instead. Other fields are kept as written, unknown ones included, so the server
// judges the configuration as the user wrote it.
func (ws WebhookServer) pointAt(m manifest) (manifest, error) {
	var cfg map[string]any
	if err := json.Unmarshal(m.json, &cfg); err != nil {
		return m, fmt.Errorf("%s: %w", m.source, err)
	}
	hooks, _ := cfg["webhooks"].([]any)
	changed := false
	for _, h := range hooks {
		hook, _ := h.(map[string]any)
		cc, _ := hook["clientConfig"].(map[string]any)
		svc, _ := cc["service"].(map[string]any)
		if svc == nil {
			continue
		}
		path, _ := svc["path"].(string)
		if path != "" && path[0] != '/' {
			path = "/" + path
		}
		delete(cc, "service")
		cc["url"] = "https://" + ws.Addr() + path
		cc["caBundle"] = base64.StdEncoding.EncodeToString(ws.CAData)
		changed = true
	}
	if !changed {
		return m, nil
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return m, fmt.Errorf("%s: %w", m.source, err)
	}
	m.json = js
	return m, nil
}
