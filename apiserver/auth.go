package apiserver

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kplane/kplane/apiserver/authentication"
	"github.com/kplane/kplane/apiserver/serviceaccount"
	"github.com/kplane/kplane/internal/selfsigned"
	"sigs.k8s.io/yaml"
)

// ensureTokenFile loads path, creating it with one random admin token first if it is missing.
func ensureTokenFile(path string) (*authentication.StaticTokens, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		line := hex.EncodeToString(b) + ",admin,admin,\"system:masters\"\n"
		if err := writeFileAtomic(path, []byte(line), 0o600); err != nil {
			return nil, fmt.Errorf("write token file: %w", err)
		}
	}
	return authentication.LoadTokenFile(path)
}

// serviceAccounts loads (or, without --service-account-signing-key-file, makes in the data dir)
// the key service-account tokens are signed with, and the keys they are verified with: those
// of --service-account-key-file plus the signing key's own public half, so that the server
// always accepts what it issues. It returns the signing key's file too.
func serviceAccounts(o Options) (*ServiceAccountConfig, string, error) {
	keyFile := o.ServiceAccountSigningKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(o.DataDir, "sa.key")
		if err := serviceaccount.EnsurePrivateKey(keyFile); err != nil {
			return nil, "", fmt.Errorf("service-account signing key: %w", err)
		}
	}
	key, err := serviceaccount.LoadPrivateKey(keyFile)
	if err != nil {
		return nil, "", fmt.Errorf("--service-account-signing-key-file: %w", err)
	}
	issuers := o.ServiceAccountIssuers
	if len(issuers) == 0 || slices.Contains(issuers, "") {
		return nil, "", errors.New("--service-account-issuer must not be empty")
	}
	signer, err := serviceaccount.NewSigner(issuers[0], key)
	if err != nil {
		return nil, "", fmt.Errorf("--service-account-signing-key-file: %w", err)
	}
	pubs := []crypto.PublicKey{key.Public()}
	for _, f := range o.ServiceAccountKeyFiles {
		more, err := serviceaccount.LoadPublicKeys(f)
		if err != nil {
			return nil, "", fmt.Errorf("--service-account-key-file: %w", err)
		}
		pubs = append(pubs, more...)
	}
	keys, err := serviceaccount.NewPublicKeys(pubs)
	if err != nil {
		return nil, "", err
	}
	audiences := o.APIAudiences
	if len(audiences) == 0 {
		audiences = issuers
	}
	return &ServiceAccountConfig{Signer: signer, Issuers: issuers, Keys: keys, APIAudiences: audiences}, keyFile, nil
}

// serverTLS loads the given certificate, or a self-signed one kept in the data dir (made on
// first start, and made again when it lacks a name in-cluster clients use: the service range
// changed). It returns the TLS configuration, the PEM clients should trust and its file.
func serverTLS(o Options, serviceIP net.IP) (*tls.Config, []byte, string, error) {
	certFile, keyFile := o.TLSCertFile, o.TLSPrivateKeyFile
	if certFile == "" {
		certFile, keyFile = filepath.Join(o.DataDir, "tls.crt"), filepath.Join(o.DataDir, "tls.key")
		if !namesAll(certFile, serviceIP) {
			if err := selfSign(certFile, keyFile, o.BindAddress, serviceIP); err != nil {
				return nil, nil, "", err
			}
		}
	} else if keyFile == "" {
		return nil, nil, "", errors.New("--tls-cert-file needs --tls-private-key-file")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, "", fmt.Errorf("load TLS certificate: %w", err)
	}
	caPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, "", err
	}
	// h2 as kube-apiserver offers it: client-go multiplexes its requests and watches over one
	// connection when it can.
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	return cfg, caPEM, certFile, nil
}

// inClusterNames are the DNS names pods reach the API server by (the kubernetes service).
var inClusterNames = []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// namesAll reports whether the certificate in file exists and is valid for the in-cluster names
// and serviceIP.
func namesAll(file string, serviceIP net.IP) bool {
	data, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	for _, name := range append(slices.Clone(inClusterNames), serviceIP.String()) {
		if cert.VerifyHostname(name) != nil {
			return false
		}
	}
	return true
}

// selfSign makes a self-signed certificate (its own CA) for this host: loopback, the bind address
// (or, bound to every address, each of the host's), the host name, and what in-cluster clients
// dial: the kubernetes service's ClusterIP and DNS names.
func selfSign(certFile, keyFile, bind string, serviceIP net.IP) error {
	dnsNames := append([]string{"localhost"}, inClusterNames...)
	if host, err := os.Hostname(); err == nil {
		dnsNames = append(dnsNames, host)
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback, serviceIP}
	if ip := net.ParseIP(bind); ip != nil && !ip.IsUnspecified() {
		ips = append(ips, ip)
	} else if addrs, err := net.InterfaceAddrs(); err == nil {
		// Bound to every address: the certificate names every address this host has.
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				ips = append(ips, n.IP)
			}
		}
	}
	certPEM, keyPEM, err := selfsigned.New("kplane-apiserver", dnsNames, ips, 10*365*24*time.Hour)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certFile, certPEM, 0o644)
}

// kubeconfigFor renders a kubeconfig for kubectl and client-go.
func kubeconfigFor(url string, caPEM []byte, token string) ([]byte, error) {
	cluster := map[string]any{"server": url}
	if len(caPEM) > 0 {
		cluster["certificate-authority-data"] = base64.StdEncoding.EncodeToString(bytes.TrimSpace(caPEM))
	}
	user := map[string]any{}
	if token != "" {
		user["token"] = token
	}
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"clusters":        []any{map[string]any{"name": "kplane", "cluster": cluster}},
		"users":           []any{map[string]any{"name": "kplane-admin", "user": user}},
		"contexts":        []any{map[string]any{"name": "kplane", "context": map[string]any{"cluster": "kplane", "user": "kplane-admin", "namespace": "default"}}},
		"current-context": "kplane",
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return []byte(strings.TrimSpace(string(out)) + "\n"), nil
}
