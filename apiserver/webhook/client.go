// Package webhook calls the HTTPS endpoints the apiserver hands work to: a CRD's conversion
// webhook and the admission webhooks. A webhook is named by a URL or by a Service in the
// cluster; it is called with a JSON review and answers with one, within a timeout.
//
// A Service reference is reached where the caller's ResolveService says (the apiserver's
// resolves it as kube-apiserver's default resolver does: the ClusterIP, which the host's
// service proxy carries, or an ExternalName's host), with TLS verified against the caBundle
// for the name <service>.<namespace>.svc.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// DefaultTimeout bounds a call that names no timeout of its own, as kube-apiserver's webhook
// clients do (30 s).
const DefaultTimeout = 30 * time.Second

// maxResponseBytes bounds what a webhook may answer.
const maxResponseBytes = 3 << 20

// Service is a webhook reached through a Service of the cluster.
type Service struct {
	Namespace, Name string
	Path            string
	Port            int32
}

// Config says where a webhook is and how its certificate is verified.
type Config struct {
	URL      string
	Service  *Service
	CABundle []byte
}

// ServiceOf is the Service of an API object's service reference: its port is 443 unless set.
func ServiceOf(namespace, name string, path *string, port *int32) *Service {
	s := &Service{Namespace: namespace, Name: name, Port: 443}
	if port != nil {
		s.Port = *port
	}
	if path != nil {
		s.Path = *path
	}
	return s
}

// ResolveService returns the host:port a Service's port is reached at.
type ResolveService func(ctx context.Context, namespace, name string, port int32) (string, error)

// Client calls one webhook.
type Client struct {
	url     string // for errors and requests; a Service's is https://name.namespace.svc:port/path
	service *Service
	resolve ResolveService
	http    *http.Client
	timeout time.Duration
}

// New builds the client of a webhook. resolve finds Services; it may be nil when cfg names a
// URL.
func New(cfg Config, resolve ResolveService, timeout time.Duration) (*Client, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(bytes.TrimSpace(cfg.CABundle)) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("caBundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	c := &Client{resolve: resolve, timeout: timeout}
	switch {
	case cfg.URL != "":
		c.url = cfg.URL
	case cfg.Service != nil:
		s := *cfg.Service
		if resolve == nil {
			return nil, errors.New("services cannot be resolved here")
		}
		c.service = &s
		host := s.Name + "." + s.Namespace + ".svc"
		tlsConfig.ServerName = host
		c.url = (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(int(s.Port))), Path: s.Path}).String()
	default:
		return nil, errors.New("neither url nor service is set")
	}
	transport := &http.Transport{
		TLSClientConfig:     tlsConfig,
		DialContext:         c.dial,
		MaxIdleConnsPerHost: 100, // the concurrent writes a busy server sends one webhook
		IdleConnTimeout:     90 * time.Second,
	}
	c.http = &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	return c, nil
}

// URL is the webhook's address, as errors name it.
func (c *Client) URL() string { return c.url }

// dial reaches a Service's webhook at the address its resolver gives, whatever host the URL
// names (name.namespace.svc is not in DNS here).
func (c *Client) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.service != nil {
		resolved, err := c.resolve(ctx, c.service.Namespace, c.service.Name, c.service.Port)
		if err != nil {
			return nil, err
		}
		addr = resolved
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Call posts req as JSON and decodes the answer into resp. The error of a call that fails says
// how: the address and the transport's error, or the HTTP status and the body's start.
func (c *Client) Call(ctx context.Context, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.url
	if q := "timeout=" + strconv.Itoa(int(c.timeout.Seconds())) + "s"; c.timeout >= time.Second {
		u += "?" + q
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return err
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("reading the answer of %s: %w", c.url, err)
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("the answer of %s is larger than %d bytes", c.url, maxResponseBytes)
	}
	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		return fmt.Errorf("%s answered %s: %.200s", c.url, hresp.Status, data)
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return fmt.Errorf("the answer of %s does not decode: %v", c.url, err)
	}
	return nil
}
