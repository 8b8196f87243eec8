// Package client is a generic REST client for the Kubernetes API over the k8s.io/api types: one
// typed handle per resource, protobuf on the wire, client-side rate limiting and retries.
//
//	c, err := client.FromKubeconfig("")
//	pods := client.Resource[*corev1.Pod](c, "pods").Namespace("default")
//	p, err := pods.Get(ctx, "web-1")
//
// For resources whose Go type a program does not know (custom resources, or every resource
// at once), ServerResources discovers what the server serves (from the aggregated discovery
// documents, cached by ETag) and Metadata gives a handle that reads, watches, patches and
// deletes any resource's objects as PartialObjectMetadata.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kplane/kplane/scheme"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config describes how to reach an API server.
type Config struct {
	// Host is the server's base URL, e.g. https://127.0.0.1:6443.
	Host string
	// Transport carries requests, with TLS and credentials in place; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// QPS and Burst limit the requests this client sends; 0 means the controller manager's
	// defaults (20 and 30); a negative QPS turns the limit off.
	QPS   float32
	Burst int
	// UserAgent identifies the program; empty means "kplane".
	UserAgent string
	// Timeout bounds each non-watch request; 0 means none beyond the context's.
	Timeout time.Duration
	// CAData is the PEM the server's certificate is verified with, if any (kept for those who
	// hand it on, as the controller manager publishes it in kube-root-ca.crt).
	CAData []byte
}

// Client sends requests to one API server.
type Client struct {
	host      *url.URL
	http      *http.Client
	limiter   *rate.Limiter // nil: unlimited
	userAgent string
	timeout   time.Duration
	caData    []byte
	// discovery keeps the last aggregated discovery documents, shared by the copies
	// WithUserAgent makes.
	discovery *discoveryCache
}

// New makes a client from cfg.
func New(cfg Config) (*Client, error) {
	host, err := url.Parse(cfg.Host)
	if err != nil || host.Scheme == "" || host.Host == "" {
		return nil, fmt.Errorf("client: invalid host %q", cfg.Host)
	}
	transport := cfg.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	c := &Client{host: host, http: &http.Client{Transport: transport}, userAgent: cfg.UserAgent, timeout: cfg.Timeout, caData: cfg.CAData,
		discovery: &discoveryCache{}}
	if c.userAgent == "" {
		c.userAgent = "kplane"
	}
	qps, burst := cfg.QPS, cfg.Burst
	if qps == 0 {
		qps = 20
	}
	if burst == 0 {
		burst = 30
	}
	if qps > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(qps), burst)
	}
	return c, nil
}

// CloseIdleConnections closes the connections this client (and the copies WithUserAgent made)
// keeps open, so that a program that stops using a server leaves no connection goroutines.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// CAData is the PEM this client verifies the server's certificate with (nil: none given).
func (c *Client) CAData() []byte { return c.caData }

// WithUserAgent returns a client to the same server over the same connections, with its own
// rate limiter (same QPS and burst) and the given user agent: what Kubernetes' controller
// manager gives each controller, so that one busy controller does not starve the others.
func (c *Client) WithUserAgent(userAgent string) *Client {
	d := *c
	d.userAgent = userAgent
	if c.limiter != nil {
		d.limiter = rate.NewLimiter(c.limiter.Limit(), c.limiter.Burst())
	}
	return &d
}

// FromKubeconfig loads a kubeconfig (path, else $KUBECONFIG, else ~/.kube/config) or, when
// there is none, the in-cluster service account config, and makes a client from it with the
// given QPS and burst (0 = defaults).
func FromKubeconfig(path string, qps float32, burst int) (*Client, error) {
	return FromKubeconfigAndMaster(path, "", qps, burst)
}

// FromKubeconfigAndMaster is FromKubeconfig with the server's address replaced by master when
// it is not empty (the --master flag of Kubernetes components).
func FromKubeconfigAndMaster(path, master string, qps float32, burst int) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	overrides := &clientcmd.ConfigOverrides{}
	overrides.ClusterInfo.Server = master
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil && path == "" && master == "" && clientcmd.IsEmptyConfig(err) {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("client: load config: %w", err)
	}
	caData := cfg.CAData
	if len(caData) == 0 && cfg.CAFile != "" {
		if caData, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("client: load config: %w", err)
		}
	}
	transport, err := transportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: transport: %w", err)
	}
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	return New(Config{Host: host, Transport: transport, QPS: qps, Burst: burst, UserAgent: cfg.UserAgent, Timeout: cfg.Timeout, CAData: caData})
}

// maxIdleConnsPerHost is how many idle connections to the server a client keeps. Over HTTP/1.1
// (a plain-HTTP server, as `kplane up`'s on loopback) each request in flight has a connection
// of its own, and one not kept idle is closed when its request ends: client-go's 25 made a
// burst of 100 pod starts in the node agent dial and close connections all the time.
const maxIdleConnsPerHost = 128

// transportFor is client-go's transport for cfg (TLS, credentials, user agent) on a base
// transport of our own that keeps more idle connections (maxIdleConnsPerHost).
func transportFor(cfg *rest.Config) (http.RoundTripper, error) {
	if cfg.Transport != nil || cfg.Dial != nil || cfg.Proxy != nil {
		return rest.TransportFor(cfg)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = tlsConfig
	base.MaxIdleConnsPerHost = maxIdleConnsPerHost
	return rest.HTTPWrappersForConfig(cfg, base)
}

const (
	mimeJSON     = scheme.MediaTypeJSON
	mimeProtobuf = scheme.MediaTypeProtobuf
	accept       = mimeProtobuf + ", " + mimeJSON
)

var (
	protobufSerializer    = scheme.Protobuf
	rawProtobufSerializer = scheme.RawProtobuf
	jsonSerializer        = scheme.JSON
	parameterCodec        = runtime.NewParameterCodec(scheme.Scheme)
)

// request is one API call.
type request struct {
	method      string
	path        string
	query       url.Values
	body        []byte
	contentType string
	accept      string // empty: protobuf, then JSON
	// ifNoneMatch is the ETag of the answer the client holds already.
	ifNoneMatch string
}

// idempotent requests may be sent again after a connection error.
func (r *request) idempotent() bool {
	return r.method == http.MethodGet || r.method == http.MethodPut || r.method == http.MethodDelete
}

const maxRetries = 5

// do sends req, waiting for the rate limiter, and retries 429s (any method: the server did not
// act on them) and connection errors (idempotent methods only) with jittered exponential
// backoff. The caller closes the response body.
func (c *Client) do(ctx context.Context, req *request) (*http.Response, error) {
	u := *c.host
	u.Path = strings.TrimSuffix(u.Path, "/") + req.path
	u.RawQuery = req.query.Encode()
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if c.limiter != nil {
			if err := c.limiter.Wait(ctx); err != nil {
				return nil, err
			}
		}
		var body io.Reader
		if req.body != nil {
			body = bytes.NewReader(req.body)
		}
		hreq, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
		if err != nil {
			return nil, err
		}
		if req.accept != "" {
			hreq.Header.Set("Accept", req.accept)
		} else {
			hreq.Header.Set("Accept", accept)
		}
		hreq.Header.Set("User-Agent", c.userAgent)
		if req.ifNoneMatch != "" {
			hreq.Header.Set("If-None-Match", req.ifNoneMatch)
		}
		if req.contentType != "" {
			hreq.Header.Set("Content-Type", req.contentType)
		}
		resp, err := c.http.Do(hreq)
		retry := attempt < maxRetries && ctx.Err() == nil
		switch {
		case err != nil && retry && req.idempotent() && isConnectionError(err):
		case err != nil:
			return nil, err
		case resp.StatusCode == http.StatusTooManyRequests && retry:
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		default:
			return resp, nil
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if resp != nil {
			// The server's Retry-After is the least we wait.
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				wait = max(wait, time.Duration(s)*time.Second)
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func isConnectionError(err error) bool {
	var netErr net.Error
	var opErr *net.OpError
	return errors.As(err, &opErr) || (errors.As(err, &netErr) && netErr.Timeout()) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// call sends req and decodes a successful response into into (if not nil).
func (c *Client) call(ctx context.Context, req *request, into runtime.Object) error {
	contentType, data, err := c.callRaw(ctx, req)
	if err != nil || into == nil {
		return err
	}
	return decode(contentType, data, into)
}

// callRaw sends req and returns a successful response's content type and body.
func (c *Client) callRaw(ctx context.Context, req *request) (contentType string, data []byte, err error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(resp.Body)
	if err != nil {
		return "", nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", nil, errorFromResponse(resp, data)
	}
	return resp.Header.Get("Content-Type"), data, nil
}

// Healthz asks the server's /healthz endpoint once; nil means it answered "ok".
func (c *Client) Healthz(ctx context.Context) error {
	resp, err := c.do(ctx, &request{method: http.MethodGet, path: "/healthz"})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %d %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return nil
}

// isMetadataOnly reports whether into is the metadata-only form of objects or lists.
func isMetadataOnly(into runtime.Object) bool {
	switch into.(type) {
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		return true
	}
	return false
}

func decode(contentType string, data []byte, into runtime.Object) error {
	mt := contentType
	if mt != mimeProtobuf && mt != mimeJSON {
		mt, _, _ = mime.ParseMediaType(contentType)
	}
	if mt == mimeJSON && isMetadataOnly(into) {
		// Whatever the server sent (the metadata only, or the whole object or list when it
		// ignored the Accept header), its metadata is what is kept.
		if err := json.Unmarshal(data, into); err != nil {
			return fmt.Errorf("client: decode %s response: %w", mt, err)
		}
		return nil
	}
	if mt == mimeProtobuf {
		if done, err := decodeProtobuf(data, into, nil, nil); done {
			return err
		}
	}
	dec := runtime.Decoder(jsonSerializer)
	if mt == mimeProtobuf {
		dec = protobufSerializer
	}
	got, _, err := dec.Decode(data, nil, into)
	if err != nil {
		return fmt.Errorf("client: decode %s response: %w", mt, err)
	}
	if got != into {
		// The server sent another kind (a handle on the wrong resource): not a success.
		return fmt.Errorf("client: the response is a %s, not a %T", got.GetObjectKind().GroupVersionKind().Kind, into)
	}
	return nil
}

// errorFromResponse turns a failed response into an *apierrors.StatusError: the server's Status
// when it sent one, else a generic error for the HTTP code.
func errorFromResponse(resp *http.Response, data []byte) error {
	status := &metav1.Status{}
	if err := decode(resp.Header.Get("Content-Type"), data, status); err == nil && status.Kind == "Status" && status.Status == metav1.StatusFailure {
		if status.Code == 0 {
			status.Code = int32(resp.StatusCode)
		}
		return &apierrors.StatusError{ErrStatus: *status}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, resp.Request.Method, schema.GroupResource{}, "", msg, 0, true)
}

func encodeBody(obj runtime.Object) ([]byte, error) {
	var buf bytes.Buffer
	if err := protobufSerializer.Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("client: encode %T: %w", obj, err)
	}
	return buf.Bytes(), nil
}

func queryOf(opts runtime.Object) (url.Values, error) {
	if opts == nil {
		return url.Values{}, nil
	}
	return parameterCodec.EncodeParameters(opts, metav1.SchemeGroupVersion)
}
