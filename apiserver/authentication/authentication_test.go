package authentication

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
)

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		header, token string
		ok            bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer  abc ", "abc", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic YWxpY2U6cHc=", "", false},
		{"", "", false},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", tc.header)
		if token, ok := BearerToken(r); token != tc.token || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.header, token, ok, tc.token, tc.ok)
		}
	}
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.csv")
	data := "# comment\ns3cret,alice,1,\"system:masters,dev\"\nother,bob,2\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.First() != "s3cret" {
		t.Errorf("first token %q", s.First())
	}
	u := Union{s}
	r, ok, err := u.AuthenticateToken(context.Background(), "s3cret", []string{"api"})
	want := authenticationv1.UserInfo{Username: "alice", UID: "1", Groups: []string{"system:masters", "dev", AllAuthenticated}}
	if !ok || err != nil || !reflect.DeepEqual(r.User, want) || !reflect.DeepEqual(r.Audiences, []string{"api"}) {
		t.Errorf("alice: %+v %v %v", r, ok, err)
	}
	// The file's users are not changed by what callers do with a response.
	r.User.Groups[0] = "changed"
	if r, _, _ := u.AuthenticateToken(context.Background(), "s3cret", nil); r.User.Groups[0] != "system:masters" {
		t.Errorf("groups shared with a caller: %v", r.User.Groups)
	}
	if _, ok, err := u.AuthenticateToken(context.Background(), "guess", nil); ok || !errors.Is(err, ErrInvalidToken) {
		t.Errorf("unknown token: %v %v", ok, err)
	}
	for _, bad := range []string{"", "token,only\n", ",alice,1\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTokenFile(path); err == nil {
			t.Errorf("token file %q accepted", bad)
		}
	}
}
