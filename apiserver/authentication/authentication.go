// Package authentication tells who sent a request to the API server, as kube-apiserver does for
// bearer tokens: the static token file (--token-auth-file) and the token authenticators the
// server is built with (service-account tokens, see package serviceaccount), tried in order.
//
// A request that presents a token nobody accepts is refused with 401 Unauthorized, even on a
// server that lets requests without credentials through (kplane on loopback without a token
// file): as in Kubernetes, a bad credential is never silently downgraded to anonymous.
// Authenticated users belong to system:authenticated; a request without credentials that is let
// through is system:anonymous in system:unauthenticated.
package authentication

import (
	"context"
	"crypto/subtle"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// The groups Kubernetes gives every request by whether it authenticated.
const (
	AllAuthenticated   = "system:authenticated"
	AllUnauthenticated = "system:unauthenticated"
	AnonymousUser      = "system:anonymous"
)

// Anonymous is the user of a request without credentials.
var Anonymous = authenticationv1.UserInfo{Username: AnonymousUser, Groups: []string{AllUnauthenticated}}

// Response is an accepted token: its user and the audiences it was accepted for.
type Response struct {
	User      authenticationv1.UserInfo
	Audiences []string
}

// TokenAuthenticator checks bearer tokens. ok=false with a nil error means the token is not of
// this authenticator's kind; an error means it is, and it is invalid (expired, forged, revoked).
// audiences are the audiences the caller accepts the token for (the API's own for requests).
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string, audiences []string) (r *Response, ok bool, err error)
}

// ErrInvalidToken is the answer when no authenticator recognised a token.
var ErrInvalidToken = errors.New("invalid bearer token")

// Union tries each authenticator in order; the first that accepts the token decides. The
// accepted user is added to system:authenticated.
type Union []TokenAuthenticator

// AuthenticateToken implements TokenAuthenticator.
func (u Union) AuthenticateToken(ctx context.Context, token string, audiences []string) (*Response, bool, error) {
	var errs []error
	for _, a := range u {
		r, ok, err := a.AuthenticateToken(ctx, token, audiences)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			if !slices.Contains(r.User.Groups, AllAuthenticated) {
				r.User.Groups = append(r.User.Groups, AllAuthenticated)
			}
			return r, true, nil
		}
	}
	if len(errs) == 0 {
		return nil, false, ErrInvalidToken
	}
	return nil, false, errors.Join(errs...)
}

// BearerToken returns the token of an "Authorization: Bearer <token>" header. A header of
// another scheme, or without a token, presents no bearer token (false), as in Kubernetes.
func BearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, _ := strings.Cut(strings.TrimSpace(h), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", false
	}
	return token, true
}

type userKey struct{}

// WithUser returns ctx carrying the request's user.
func WithUser(ctx context.Context, u authenticationv1.UserInfo) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user WithUser put in ctx.
func UserFrom(ctx context.Context) (authenticationv1.UserInfo, bool) {
	u, ok := ctx.Value(userKey{}).(authenticationv1.UserInfo)
	return u, ok
}

// StaticTokens are the users of kube-apiserver's --token-auth-file, by token.
type StaticTokens struct {
	tokens []staticToken
}

type staticToken struct {
	token string
	user  authenticationv1.UserInfo
}

// AuthenticateToken implements TokenAuthenticator. Every token is compared in constant time,
// so the time taken tells nothing about how close a guess came.
func (s *StaticTokens) AuthenticateToken(_ context.Context, token string, audiences []string) (*Response, bool, error) {
	var found *staticToken
	for i := range s.tokens {
		if subtle.ConstantTimeCompare([]byte(s.tokens[i].token), []byte(token)) == 1 {
			found = &s.tokens[i]
		}
	}
	if found == nil {
		return nil, false, nil
	}
	u := found.user
	u.Groups = slices.Clone(u.Groups)
	// A static token is good for any audience the caller asks about.
	return &Response{User: u, Audiences: audiences}, true, nil
}

// First is the file's first token (the one a written kubeconfig uses); "" for nil.
func (s *StaticTokens) First() string {
	if s == nil || len(s.tokens) == 0 {
		return ""
	}
	return s.tokens[0].token
}

// LoadTokenFile reads a kube-apiserver token file: CSV lines of token,user,uid[,"group1,group2"].
func LoadTokenFile(path string) (*StaticTokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--token-auth-file: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	r.Comment = '#'
	s := &StaticTokens{}
	for line := 1; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("--token-auth-file %s: %w", path, err)
		}
		if len(rec) < 3 || rec[0] == "" || rec[1] == "" {
			return nil, fmt.Errorf("--token-auth-file %s line %d: want token,user,uid[,groups]", path, line)
		}
		u := authenticationv1.UserInfo{Username: rec[1], UID: rec[2]}
		if len(rec) > 3 {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					u.Groups = append(u.Groups, g)
				}
			}
		}
		s.tokens = append(s.tokens, staticToken{token: rec[0], user: u})
	}
	if len(s.tokens) == 0 {
		return nil, fmt.Errorf("--token-auth-file %s has no tokens", path)
	}
	return s, nil
}
