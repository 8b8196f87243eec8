package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// newEchoCommand is the built-in demo workload: an HTTP server that answers every request with
// the name of the pod it runs in, so that traffic through a Service shows which pod served it.
func newEchoCommand() *cobra.Command {
	port := 8080
	cmd := &cobra.Command{
		Use:   "echo",
		Short: "Answer every HTTP request with this pod's name ($POD_NAME), on $POD_IP:--port",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			name := os.Getenv("POD_NAME")
			if name == "" {
				name, _ = os.Hostname()
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("POD_IP"), strconv.Itoa(port)))
			if err != nil {
				return err
			}
			slog.Info("echo listening", "addr", ln.Addr().String(), "name", name)
			return serveEcho(ctx, ln, name, drainDelay)
		},
	}
	cmd.Flags().IntVar(&port, "port", port, "port to listen on")
	return cmd
}

// drainDelay is how long echo keeps accepting after SIGTERM. The pod's endpoints are removed
// once it is deleted, but proxies may still send a few connections its way for a moment;
// closing the listener at once would reset those (what preStop sleeps are for in Kubernetes).
const drainDelay = time.Second

// serveEcho answers on ln until ctx is cancelled, and for drain longer.
func serveEcho(ctx context.Context, ln net.Listener, name string, drain time.Duration) error {
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintln(w, name)
		}),
	}
	go func() {
		<-ctx.Done()
		time.Sleep(drain)
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
