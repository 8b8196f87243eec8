package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnsurePrivateKey makes sure path holds a private key, generating an ECDSA P-256 key there
// (PEM, mode 0600) when the file does not exist. P-256 rather than kubeadm's RSA 2048: ES256 is
// one of the algorithms Kubernetes signs and verifies service-account tokens with, and the key
// takes microseconds to make, where RSA takes up to a second on every fresh data dir.
func EnsurePrivateKey(path string) error {
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// LoadPrivateKey reads the first private key (RSA or ECDSA, PKCS#1, SEC 1 or PKCS#8 PEM) in path:
// the format of kube-apiserver's --service-account-signing-key-file and
// kube-controller-manager's --service-account-private-key-file.
func LoadPrivateKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if key, ok := parsePrivateKey(block); ok {
			return key, nil
		}
	}
	return nil, fmt.Errorf("%s: no RSA or ECDSA private key in PEM form", path)
}

// LoadPublicKeys reads every key in path, as kube-apiserver's --service-account-key-file does:
// public keys, certificates (their public key) and private keys (their public half).
func LoadPublicKeys(path string) ([]crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []crypto.PublicKey
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if key, ok := parsePrivateKey(block); ok {
			keys = append(keys, key.Public())
			continue
		}
		switch block.Type {
		case "PUBLIC KEY":
			if key, err := x509.ParsePKIXPublicKey(block.Bytes); err == nil {
				keys = append(keys, key)
			}
		case "RSA PUBLIC KEY":
			if key, err := x509.ParsePKCS1PublicKey(block.Bytes); err == nil {
				keys = append(keys, key)
			}
		case "CERTIFICATE":
			if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
				keys = append(keys, cert.PublicKey)
			}
		}
	}
	keys = supportedOnly(keys)
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no RSA or ECDSA key in PEM form", path)
	}
	return keys, nil
}

func supportedOnly(keys []crypto.PublicKey) []crypto.PublicKey {
	out := keys[:0]
	for _, k := range keys {
		switch k.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey:
			out = append(out, k)
		}
	}
	return out
}

func parsePrivateKey(block *pem.Block) (crypto.Signer, bool) {
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		return key, err == nil
	case "EC PRIVATE KEY":
		key, err := x509.ParseECPrivateKey(block.Bytes)
		return key, err == nil
	case "PRIVATE KEY":
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, false
		}
		switch k := key.(type) {
		case *rsa.PrivateKey:
			return k, true
		case *ecdsa.PrivateKey:
			return k, true
		}
	}
	return nil, false
}

// keyID names a public key in a token's "kid" header as Kubernetes does: the unpadded
// base64url SHA-256 of its PKIX DER form, so verifiers can pick the key without learning it.
func keyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}
