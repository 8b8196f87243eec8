package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
)

func TestEchoAnswersWithThePodName(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveEcho(ctx, ln, "web-7d9f-abcde", 0) }()
	for _, path := range []string{"/", "/anything?x=1"} {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "web-7d9f-abcde\n" {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serveEcho after cancel: %v", err)
	}
}
