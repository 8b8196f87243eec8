package apiserver_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hostPortWebhook converts Endpoints between v1 (spec.hostPort: "host:port") and v2
// (spec.host, spec.port), as a conversion webhook served by a test server. mode picks how it
// misbehaves.
type hostPortWebhook struct {
	srv     *httptest.Server
	mode    atomic.Value // "ok", "block", "garbage", "wrong-uid", "fail", "drop"
	release chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	calls   []int // objects per review
}

func newHostPortWebhook(t *testing.T) *hostPortWebhook {
	h := &hostPortWebhook{release: make(chan struct{}), entered: make(chan struct{}, 16)}
	h.mode.Store("ok")
	h.srv = httptest.NewTLSServer(http.HandlerFunc(h.serve))
	t.Cleanup(func() {
		h.srv.CloseClientConnections()
		h.srv.Close()
	})
	return h
}

func (h *hostPortWebhook) caBundle() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw})
}

func (h *hostPortWebhook) reviews() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.calls...)
}

func (h *hostPortWebhook) serve(w http.ResponseWriter, r *http.Request) {
	var review struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Request    struct {
			UID               string           `json:"uid"`
			DesiredAPIVersion string           `json:"desiredAPIVersion"`
			Objects           []map[string]any `json:"objects"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.calls = append(h.calls, len(review.Request.Objects))
	h.mu.Unlock()
	mode := h.mode.Load().(string)
	switch mode {
	case "block":
		h.entered <- struct{}{}
		<-h.release
	case "garbage":
		fmt.Fprint(w, "this is not a ConversionReview")
		return
	}
	out := []map[string]any{}
	for _, o := range review.Request.Objects {
		spec, _ := o["spec"].(map[string]any)
		next := map[string]any{}
		if strings.HasSuffix(review.Request.DesiredAPIVersion, "/v1") {
			next["hostPort"] = fmt.Sprintf("%v:%v", spec["host"], spec["port"])
		} else {
			host, port, _ := net.SplitHostPort(fmt.Sprint(spec["hostPort"]))
			var n int
			fmt.Sscan(port, &n)
			next["host"], next["port"] = host, n
		}
		o["spec"], o["apiVersion"] = next, review.Request.DesiredAPIVersion
		out = append(out, o)
	}
	result := map[string]any{"status": "Success"}
	uid := review.Request.UID
	switch mode {
	case "wrong-uid":
		uid = "not-the-request"
	case "fail":
		result = map[string]any{"status": "Failure", "message": "cannot convert this endpoint"}
	case "drop":
		out = out[:0]
	}
	json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": review.APIVersion, "kind": review.Kind,
		"response": map[string]any{"uid": uid, "convertedObjects": out, "result": result},
	})
}

const endpointCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: hostports.{{g}}}
spec:
  group: {{g}}
  scope: Namespaced
  names: {plural: hostports, singular: hostport, kind: HostPort}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig: {url: "{{url}}", caBundle: "{{ca}}"}
  versions:
  - name: v1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {hostPort: {type: string}}}
  - name: v2
    served: true
    storage: true
    selectableFields: [{jsonPath: .spec.host}]
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              host: {type: string}
              port: {type: integer}
              protocol: {type: string, default: TCP}
`

func TestConversionWebhook(t *testing.T) {
	g := fmt.Sprintf("conv%d.example.com", time.Now().UnixNano()%100000)
	ns := namespace(t)
	hook := newHostPortWebhook(t)
	src := strings.NewReplacer("{{url}}", hook.srv.URL+"/convert", "{{ca}}", base64.StdEncoding.EncodeToString(hook.caBundle())).Replace(endpointCRD)
	createCRD(t, crdOf(t, g, src))
	v1 := "/apis/" + g + "/v1/namespaces/" + ns + "/hostports"
	v2 := "/apis/" + g + "/v2/namespaces/" + ns + "/hostports"
	obj := func(name, hostPort string) map[string]any {
		return map[string]any{"apiVersion": g + "/v1", "kind": "HostPort", "metadata": map[string]any{"name": name, "labels": map[string]any{"app": "web"}},
			"spec": map[string]any{"hostPort": hostPort}}
	}

	t.Run("objects written at v1 are stored at v2 and read at both", func(t *testing.T) {
		for i, hp := range []string{"a.example:80", "b.example:81", "c.example:82"} {
			if r := do(t, "POST", v1, obj(fmt.Sprintf("ep%d", i), hp)); r.code != http.StatusCreated {
				t.Fatalf("create at v1: %d %s", r.code, r.body)
			} else if got := get(r.object(t), "spec", "hostPort"); got != hp {
				t.Errorf("created object reads back as %v, want %s", got, hp)
			}
		}
		o := do(t, "GET", v2+"/ep1", nil).object(t)
		if get(o, "apiVersion") != g+"/v2" || get(o, "spec", "host") != "b.example" || get(o, "spec", "port") != 81.0 {
			t.Errorf("at v2: %v", o)
		}
		if get(o, "spec", "protocol") != "TCP" {
			t.Errorf("v2's default not filled on the converted object: %v", o["spec"])
		}
		if get(o, "metadata", "labels", "app") != "web" {
			t.Errorf("labels lost in conversion: %v", o["metadata"])
		}
		before := len(hook.reviews())
		list := do(t, "GET", v1, nil).object(t)
		items, _ := list["items"].([]any)
		if len(items) != 3 || get(items[2], "spec", "hostPort") != "c.example:82" || get(list, "apiVersion") != g+"/v1" {
			t.Fatalf("list at v1: %v", list)
		}
		if calls := hook.reviews()[before:]; len(calls) != 1 || calls[0] != 3 {
			t.Errorf("a list of 3 took reviews %v, want one of 3 objects", calls)
		}
		// A field selector of v2 on a v2 list, which needs no conversion.
		sel := do(t, "GET", v2+"?fieldSelector=spec.host%3Da.example", nil).object(t)
		if items, _ := sel["items"].([]any); len(items) != 1 {
			t.Errorf("field selector at v2: %v", sel)
		}
	})

	t.Run("updates at v1 keep the object whole", func(t *testing.T) {
		o := do(t, "GET", v1+"/ep0", nil).object(t)
		o["spec"] = map[string]any{"hostPort": "a.example:8080"}
		if r := do(t, "PUT", v1+"/ep0", o); r.code != http.StatusOK {
			t.Fatalf("update at v1: %d %s", r.code, r.body)
		}
		if p := get(do(t, "GET", v2+"/ep0", nil).object(t), "spec", "port"); p != 8080.0 {
			t.Errorf("port at v2 after the v1 update = %v", p)
		}
		patch := `{"spec":{"hostPort":"a.example:9090"}}`
		if r := do(t, "PATCH", v1+"/ep0", patch, "Content-Type", "application/merge-patch+json"); r.code != http.StatusOK || get(r.object(t), "spec", "hostPort") != "a.example:9090" {
			t.Errorf("merge patch at v1: %d %s", r.code, r.body)
		}
	})

	t.Run("a watch at v1 gets converted events", func(t *testing.T) {
		rv := get(do(t, "GET", v1, nil).object(t), "metadata", "resourceVersion").(string)
		events := watchLines(t, v1+"?watch=true&resourceVersion="+rv)
		if r := do(t, "POST", v2, map[string]any{"apiVersion": g + "/v2", "kind": "HostPort", "metadata": map[string]any{"name": "ep9"},
			"spec": map[string]any{"host": "z.example", "port": 99}}); r.code != http.StatusCreated {
			t.Fatalf("create at v2: %d %s", r.code, r.body)
		}
		var ev map[string]any
		select {
		case ev = <-events:
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event at v1 within 10 s")
		}
		if get(ev, "type") != "ADDED" || get(ev, "object", "spec", "hostPort") != "z.example:99" || get(ev, "object", "apiVersion") != g+"/v1" {
			t.Errorf("watch event at v1: %v", ev)
		}
	})

	t.Run("a webhook that answers wrongly fails the read, naming it", func(t *testing.T) {
		for mode, want := range map[string]string{
			"garbage":   "does not decode",
			"wrong-uid": "expected response.uid",
			"fail":      "cannot convert this endpoint",
			"drop":      "returned 0 objects, expected 1",
		} {
			hook.mode.Store(mode)
			r := do(t, "GET", v1+"/ep1", nil)
			msg, _ := get(r.object(t), "message").(string)
			if r.code != http.StatusInternalServerError || !strings.Contains(msg, "conversion webhook for "+g+"/v2, Kind=HostPort failed") || !strings.Contains(msg, want) {
				t.Errorf("%s: %d %s", mode, r.code, r.body)
			}
		}
		hook.mode.Store("ok")
		// What failed stored nothing: the object is as it was.
		if p := get(do(t, "GET", v2+"/ep1", nil).object(t), "spec", "port"); p != 81.0 {
			t.Errorf("ep1 changed: port %v", p)
		}
	})

	t.Run("a slow webhook holds up only its own requests", func(t *testing.T) {
		hook.mode.Store("block")
		stuck := make(chan response, 1)
		go func() { stuck <- do(t, "GET", v1+"/ep1", nil) }()
		select {
		case <-hook.entered:
		case r := <-stuck:
			t.Fatalf("the v1 read returned without calling the webhook: %d %s", r.code, r.body)
		}
		// While the v1 read waits for the webhook, the storage version and its watch cache
		// keep serving, and writes go through.
		if r := do(t, "GET", v2, nil); r.code != http.StatusOK {
			t.Errorf("list at v2 while the webhook is slow: %d %s", r.code, r.body)
		}
		if r := do(t, "POST", v2, map[string]any{"apiVersion": g + "/v2", "kind": "HostPort", "metadata": map[string]any{"name": "ep5"},
			"spec": map[string]any{"host": "e.example", "port": 85}}); r.code != http.StatusCreated {
			t.Errorf("create at v2 while the webhook is slow: %d %s", r.code, r.body)
		}
		select {
		case r := <-stuck:
			t.Fatalf("the v1 read returned before the webhook answered: %d %s", r.code, r.body)
		default:
		}
		hook.mode.Store("ok")
		close(hook.release)
		select {
		case r := <-stuck:
			if r.code != http.StatusOK || get(r.object(t), "spec", "hostPort") != "b.example:81" {
				t.Errorf("the v1 read once the webhook answered: %d %s", r.code, r.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the v1 read did not return within 10 s of the webhook's answer")
		}
	})

	t.Run("a webhook that is down fails reads and writes at v1 only", func(t *testing.T) {
		url := hook.srv.URL
		hook.srv.CloseClientConnections()
		hook.srv.Close()
		r := do(t, "GET", v1+"/ep1", nil)
		msg, _ := get(r.object(t), "message").(string)
		if r.code != http.StatusInternalServerError || !strings.Contains(msg, url+"/convert") {
			t.Errorf("get at v1 with the webhook down: %d %s", r.code, r.body)
		}
		if r := do(t, "POST", v1, obj("ep7", "g.example:87")); r.code != http.StatusInternalServerError {
			t.Errorf("create at v1 with the webhook down: %d %s", r.code, r.body)
		}
		if r := do(t, "GET", v2+"/ep7", nil); r.code != http.StatusNotFound {
			t.Errorf("the failed create stored something: %d %s", r.code, r.body)
		}
		if r := do(t, "GET", v2+"/ep1", nil); r.code != http.StatusOK {
			t.Errorf("get at v2 with the webhook down: %d %s", r.code, r.body)
		}
		// Deleting the CRD deletes its objects through the storage version.
		if r := do(t, "DELETE", crdsPath+"/hostports."+g, nil); r.code != http.StatusOK {
			t.Fatalf("delete CRD: %d %s", r.code, r.body)
		}
		eventually(t, "the CRD gone", func() bool { return do(t, "GET", crdsPath+"/hostports."+g, nil).code == http.StatusNotFound })
	})
}

// watchLines starts a watch and delivers its events.
func watchLines(t *testing.T, path string) <-chan map[string]any {
	t.Helper()
	req, err := http.NewRequest("GET", server.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	out := make(chan map[string]any, 16)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				out <- ev
			}
		}
	}()
	return out
}
