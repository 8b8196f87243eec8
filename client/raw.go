package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Raw sends one request in JSON to path (with query, and body as the JSON request body when it
// is not nil) through the client's rate limiter and retries, and returns the body of a 2xx
// answer; any other answer is returned as the API error it carries. It is for what the typed
// handles cannot express: discovery, and resources whose Go type the program does not know.
func (c *Client) Raw(ctx context.Context, method, path string, query url.Values, body []byte) ([]byte, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("client: path %q is not absolute", path)
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req := &request{method: method, path: path, query: query, body: body, accept: mimeJSON}
	if body != nil {
		req.contentType = mimeJSON
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, errorFromResponse(resp, data)
	}
	return data, nil
}

// UpdateSubresource replaces obj through one of its subresources ("status", "finalize").
func (r *Typed[T]) UpdateSubresource(ctx context.Context, obj T, subresource string, opts ...metav1.UpdateOptions) (T, error) {
	return r.write(ctx, http.MethodPut, r.forObject(obj).path(obj.GetName(), subresource), obj, first(opts))
}
