package testenv

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kplane/kplane/internal/selfsigned"
)

// WebhookServer is where the test's own webhooks are expected to serve: Start points every
// webhook it installs that names a Service (admission webhooks as kubebuilder's
// config/webhook manifests name them, and CRDs' conversion webhooks) at
// https://Host:Port/<the Service's path>, trusting the certificate in CertDir, as envtest's
// WebhookInstallOptions does. A controller-runtime manager serves there with
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
	certPEM, keyPEM, err := selfsigned.New("kplane-testenv-webhooks", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, 24*time.Hour)
	if err != nil {
		return WebhookServer{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return WebhookServer{}, err
	}
	ws := WebhookServer{Host: "127.0.0.1", Port: port, CertDir: dir, CAData: certPEM}
	return ws, errors.Join(
		os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600),
		os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600))
}

// pointAt rewrites the webhooks of a manifest that name a Service to call ws instead: the
// admission webhooks of a webhook configuration, the conversion webhook of a CRD. Other fields
// are kept as written, unknown ones included, so the server judges the object as the user
// wrote it.
func (ws WebhookServer) pointAt(m manifest) (manifest, error) {
	var obj map[string]any
	if err := json.Unmarshal(m.json, &obj); err != nil {
		return m, fmt.Errorf("%s: %w", m.source, err)
	}
	var configs []map[string]any
	switch m.meta.Kind {
	case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		hooks, _ := obj["webhooks"].([]any)
		for _, h := range hooks {
			hook, _ := h.(map[string]any)
			configs = append(configs, field(hook, "clientConfig"))
		}
	case "CustomResourceDefinition":
		configs = append(configs, field(field(field(field(obj, "spec"), "conversion"), "webhook"), "clientConfig"))
	}
	changed := false
	for _, cc := range configs {
		svc := field(cc, "service")
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
	js, err := json.Marshal(obj)
	if err != nil {
		return m, fmt.Errorf("%s: %w", m.source, err)
	}
	m.json = js
	return m, nil
}

// field is the object under key of m, nil if m is nil or holds none there.
func field(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}
