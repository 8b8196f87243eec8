package apiserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/storage"
)

// One embedded etcd and apiserver serve the whole package; each test works in its own namespace.
var server *testserver.Server

func TestMain(m *testing.M) {
	var err error
	server, err = testserver.Start(func(o *apiserver.Options) {
		o.ServiceClusterIPRange = "10.0.0.0/16"
		o.Cache = storage.CacheOptions{BookmarkInterval: time.Second, FreshnessTimeout: time.Second}
	})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	_ = server.Stop()
	os.Exit(code)
}

// response is a decoded HTTP answer.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

// do sends one request; body may be a string, []byte or any JSON-marshalable value.
func do(t *testing.T, method, path string, body any, headers ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, server.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}
}

// namespace creates a namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = fmt.Sprintf("%s-%d", strings.Trim(name, "-"), time.Now().UnixNano()%100000)
	r := do(t, "POST", "/api/v1/namespaces", map[string]any{"metadata": map[string]any{"name": name}})
	if r.code != http.StatusCreated {
		t.Fatalf("create namespace %s: %d %s", name, r.code, r.body)
	}
	return name
}

// get reads a nested field of a decoded JSON object: get(m, "metadata", "name").
func get(m any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, ok := m.(map[string]any)
			if !ok {
				return nil
			}
			m = mm[k]
		case int:
			l, ok := m.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			m = l[k]
		}
	}
	return m
}
