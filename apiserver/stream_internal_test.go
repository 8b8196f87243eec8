package apiserver

import (
	"net/url"
	"testing"
)

// TestStreamParams: the options of pods/exec, attach and portforward, read from the query,
// become the kubelet's query parameters; booleans as Kubernetes' parameter codec reads them.
func TestStreamParams(t *testing.T) {
	cases := []struct {
		subresource, query, want string
		bad                      bool
	}{
		{"exec", "command=sh&command=-c&command=echo+hi&stdin=true&stdout=1&stderr=false&tty=0&container=main", "command=sh&command=-c&command=echo+hi&input=1&output=1", false},
		{"exec", "stdout=yes&tty=", "output=1&tty=1", false}, // anything but absent, 0 and false is true
		{"attach", "stdin=true&stdout=true&stderr=true&tty=true&command=ignored", "error=1&input=1&output=1&tty=1", false},
		{"portforward", "ports=8080&ports=81,82", "port=8080%2C81%2C82", false},
		{"portforward", "", "", false},
		{"portforward", "ports=http", "", true},
		{"portforward", "ports=99999999999", "", true},
		{"portforward", "ports=0", "", true},
		{"portforward", "ports=65536", "", true},
		{"portforward", "ports=65535", "port=65535", false},
	}
	for _, tc := range cases {
		q, _ := url.ParseQuery(tc.query)
		opts, err := parseStreamOptions(tc.subresource, q)
		var got url.Values
		if err == nil {
			got, err = opts.params(tc.subresource)
		}
		if (err != nil) != tc.bad {
			t.Errorf("%s?%s: error %v", tc.subresource, tc.query, err)
			continue
		}
		if err == nil && got.Encode() != tc.want {
			t.Errorf("%s?%s: %s, want %s", tc.subresource, tc.query, got.Encode(), tc.want)
		}
	}
}
