package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Claims is the payload of a service-account token, laid out as Kubernetes writes it. Bound
// tokens (TokenRequest) carry the registered claims and the "kubernetes.io" object; legacy
// tokens (the token controller's Secrets) carry only iss, sub and the four flat
// "kubernetes.io/serviceaccount/..." claims, and never expire.
type Claims struct {
	Issuer    string           `json:"iss,omitempty"`
	Subject   string           `json:"sub,omitempty"`
	Audience  Audience         `json:"aud,omitempty"`
	Expiry    *jwt.NumericDate `json:"exp,omitempty"`
	IssuedAt  *jwt.NumericDate `json:"iat,omitempty"`
	NotBefore *jwt.NumericDate `json:"nbf,omitempty"`
	ID        string           `json:"jti,omitempty"`

	Kubernetes *Private `json:"kubernetes.io,omitempty"`

	LegacyNamespace  string `json:"kubernetes.io/serviceaccount/namespace,omitempty"`
	LegacySecretName string `json:"kubernetes.io/serviceaccount/secret.name,omitempty"`
	LegacyName       string `json:"kubernetes.io/serviceaccount/service-account.name,omitempty"`
	LegacyUID        string `json:"kubernetes.io/serviceaccount/service-account.uid,omitempty"`
}

// Private is the "kubernetes.io" claim: the account and the one object (pod, secret or node)
// the token is bound to; a pod-bound token also names the pod's node.
type Private struct {
	Namespace      string           `json:"namespace,omitempty"`
	ServiceAccount Ref              `json:"serviceaccount,omitempty"`
	Pod            *Ref             `json:"pod,omitempty"`
	Secret         *Ref             `json:"secret,omitempty"`
	Node           *Ref             `json:"node,omitempty"`
	WarnAfter      *jwt.NumericDate `json:"warnafter,omitempty"`
}

// Ref names an object by name and UID.
type Ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Audience is the "aud" claim. Kubernetes always writes it as a list, even of one; a single
// string is read too, as RFC 7519 allows.
type Audience []string

// MarshalJSON writes the audience as a JSON array.
func (a Audience) MarshalJSON() ([]byte, error) { return json.Marshal([]string(a)) }

// UnmarshalJSON reads a JSON string or array of strings.
func (a *Audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = Audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("aud must be a string or an array of strings")
	}
	*a = many
	return nil
}

// LegacyIssuer is the "iss" of the token controller's secret-based tokens.
const LegacyIssuer = "kubernetes/serviceaccount"

// signedAlgorithms are the signature algorithms tokens are accepted with: those Kubernetes
// signs service-account tokens with.
var signedAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.ES512}

// Signer signs tokens with one private key, for one issuer.
type Signer struct {
	issuer string
	signer jose.Signer
}

// NewSigner signs as issuer with key: RS256 for an RSA key, ES256/384/512 for ECDSA by curve.
// The header carries the key's ID, so a verifier holding several keys tries only the one.
func NewSigner(issuer string, key crypto.Signer) (*Signer, error) {
	var alg jose.SignatureAlgorithm
	switch k := key.(type) {
	case *rsa.PrivateKey:
		alg = jose.RS256
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			alg = jose.ES256
		case elliptic.P384():
			alg = jose.ES384
		case elliptic.P521():
			alg = jose.ES512
		default:
			return nil, errors.New("ECDSA signing keys must use curve P-256, P-384 or P-521")
		}
	default:
		return nil, fmt.Errorf("unsupported signing key %T: want RSA or ECDSA", key)
	}
	kid, err := keyID(key.Public())
	if err != nil {
		return nil, err
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid, Algorithm: string(alg), Use: "sig"}}, nil)
	if err != nil {
		return nil, err
	}
	return &Signer{issuer: issuer, signer: s}, nil
}

// Issuer is the "iss" this signer writes.
func (s *Signer) Issuer() string { return s.issuer }

// Sign serializes c, with the signer's issuer, as a compact JWS.
func (s *Signer) Sign(c Claims) (string, error) {
	c.Issuer = s.issuer
	return jwt.Signed(s.signer).Claims(c).Serialize()
}

// PublicKey is a verification key and its key ID.
type PublicKey struct {
	ID  string
	Key crypto.PublicKey
}

// NewPublicKeys derives the key IDs of keys.
func NewPublicKeys(keys []crypto.PublicKey) ([]PublicKey, error) {
	out := make([]PublicKey, 0, len(keys))
	for _, k := range keys {
		id, err := keyID(k)
		if err != nil {
			return nil, err
		}
		out = append(out, PublicKey{ID: id, Key: k})
	}
	return out, nil
}

// unverifiedIssuer returns the "iss" of a compact JWS without checking its signature; it only
// decides whether a bearer token is a service-account token at all (others go to other
// authenticators).
func unverifiedIssuer(token string) (string, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if json.Unmarshal(payload, &c) != nil {
		return "", false
	}
	return c.Issuer, true
}

// errInvalidSignature is every signature failure: which key failed how is not the client's to know.
var errInvalidSignature = errors.New("invalid signature")

// verify checks token's signature against keys (those matching its key ID when it names one)
// and returns its claims.
func verify(token string, keys []PublicKey) (*Claims, error) {
	tok, err := jwt.ParseSigned(token, signedAlgorithms)
	if err != nil {
		return nil, fmt.Errorf("malformed token: %w", err)
	}
	kid := ""
	for _, h := range tok.Headers {
		if h.KeyID != "" {
			kid = h.KeyID
			break
		}
	}
	for _, k := range keys {
		if kid != "" && k.ID != kid {
			continue
		}
		var c Claims
		if err := tok.Claims(k.Key, &c); err == nil {
			return &c, nil
		}
	}
	return nil, errInvalidSignature
}
