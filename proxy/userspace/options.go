package userspace

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Proxier. The zero value is usable.
type Options struct {
	// NodeAddresses are the addresses NodePorts listen on. Empty means every address of the
	// node: one wildcard socket per NodePort.
	NodeAddresses []netip.Addr

	// Logger receives the proxier's log lines; slog.Default() when nil.
	Logger *slog.Logger
	// Registerer gets the proxier's metrics; none are registered when nil.
	Registerer prometheus.Registerer

	// UDPIdleTimeout ends a UDP session (the client's socket to its backend) after this long
	// without a datagram in either direction. Default 60 s.
	UDPIdleTimeout time.Duration
	// DialTimeout bounds one attempt to connect to an endpoint. Default 2 s.
	DialTimeout time.Duration
	// DialAttempts is how many endpoints a new TCP connection tries before it is given up.
	// Default 8: during a rollout several endpoints at once may refuse (a new pod not
	// listening yet, an old one shutting down), and a refusal costs next to nothing.
	DialAttempts int
}

const (
	defaultUDPIdleTimeout = 60 * time.Second
	defaultDialTimeout    = 2 * time.Second
	defaultDialAttempts   = 8
)

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.UDPIdleTimeout <= 0 {
		o.UDPIdleTimeout = defaultUDPIdleTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.DialAttempts <= 0 {
		o.DialAttempts = defaultDialAttempts
	}
	return o
}
