// Package serviceaccount is the API server's side of service-account identity, as Kubernetes
// v1.36 does it:
//
//   - keys.go: the signing key (made into the data dir on first start; RSA or ECDSA PEM from
//     --service-account-signing-key-file) and the verification keys (--service-account-key-file).
//   - jwt.go: tokens are JWS compact JWTs (github.com/go-jose/go-jose/v4), with Kubernetes'
//     claims: iss, sub system:serviceaccount:<ns>:<name>, aud (always a list), exp, iat, nbf,
//     jti and the "kubernetes.io" claim (namespace, serviceaccount, and the pod, secret or node
//     the token is bound to); the header's kid is the SHA-256 of the public key.
//   - request.go: the TokenRequest API (serviceaccounts/<name>/token): audiences default to the
//     API audiences, lifetimes from 10 minutes to 2^32 s (default 1 h), bound objects must
//     exist with the UID given; the kubelet's 3607 s pod-bound requests get a year-long token
//     with warnafter, as Kubernetes' --service-account-extend-token-expiration (on) does.
//     LegacyToken signs the token controller's secret-based tokens (iss kubernetes/serviceaccount).
//   - admission.go: the ServiceAccount admission plugin for new pods: serviceAccountName
//     defaulted to "default", the account must exist (403 otherwise; deviation: a missing
//     "default" account is admitted, see AdmitPod), its imagePullSecrets taken, and unless
//     automountServiceAccountToken is false the projected kube-api-access-<random> volume
//     (token, ca.crt from kube-root-ca.crt, namespace) mounted at MountPath in every container.
//   - authenticator.go: bearer tokens of the configured issuers (and legacy ones) signed by a
//     known key are checked for time, audience, and against the live objects they name: the
//     account with its UID, the bound pod, secret or node with its UID (a legacy token: its
//     Secret, which must still hold it). Deleting or replacing any of them revokes the token.
//
// Not done: the OIDC discovery documents (/.well-known/openid-configuration,
// /openid/v1/jwks), --service-account-max-token-expiration, external signers, the caching of
// authentication results; in admission, the enforce-mountable-secrets annotation, and the
// secret references of mirror pods.
package serviceaccount
