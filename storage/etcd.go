// Package storage keeps API objects in etcd v3 and serves lists and watches from a per-resource
// watch cache in front of it. A resource served at several versions has one Store (one etcd
// key per object, one watch cache) and a Converted view per other version, which converts
// objects per request, outside the cache's lock.
package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
)

// Etcd is a connection to etcd, embedded in this process or external.
type Etcd struct {
	Client *clientv3.Client
	server *embed.Etcd
}

// EmbeddedOptions configures an etcd that runs inside this process.
type EmbeddedOptions struct {
	Dir string
	// NoFsync trades durability for speed; for tests only.
	NoFsync bool
	// Tick is raft's tick (0: 20 ms); the election timeout is five ticks. A fresh member
	// elects itself within one to six ticks, the longest part of its start: tests that start
	// a member each shorten it, at the cost of more idle wake-ups (one per tick).
	Tick time.Duration
}

// StartEmbedded starts an etcd member with its data under opts.Dir (created if missing, reused
// if present) and returns an in-process client to it.
func StartEmbedded(opts EmbeddedOptions) (*Etcd, error) {
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd data dir: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "kplane"
	cfg.Dir = filepath.Join(opts.Dir, "etcd")
	cfg.UnsafeNoFsync = opts.NoFsync
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// A member with no peers elects itself: a short election timeout makes a restart ready in
	// a fraction of the default second.
	tick := uint(20)
	if opts.Tick > 0 {
		tick = uint(max(opts.Tick.Milliseconds(), 1))
	}
	cfg.TickMs, cfg.ElectionMs = tick, 5*tick
	// The member only talks to this process, but etcd insists on client and peer listeners:
	// give it free loopback ports. Between finding a port free and etcd binding it another
	// process may take it (many test binaries starting members at once): then try others.
	var e *embed.Etcd
	for attempt := 1; ; attempt++ {
		clientURL, err := freeLoopbackURL()
		if err != nil {
			return nil, err
		}
		peerURL, err := freeLoopbackURL()
		if err != nil {
			return nil, err
		}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err = embed.StartEtcd(cfg)
		if err == nil {
			break
		}
		if attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("start embedded etcd: %w", err)
		}
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("embedded etcd did not become ready within 60s")
	}
	return &Etcd{Client: v3client.New(e.Server), server: e}, nil
}

// Endpoint is the client URL of an embedded member ("" for an external cluster), so other
// processes (or tests playing an external cluster) can reach it.
func (e *Etcd) Endpoint() string {
	if e.server == nil || len(e.server.Clients) == 0 {
		return ""
	}
	return "http://" + e.server.Clients[0].Addr().String()
}

// Connect dials an external etcd cluster.
func Connect(ctx context.Context, endpoints []string) (*Etcd, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	// Fail fast with a clear message when nothing answers.
	probe, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Get(probe, "/registry/health"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %v does not answer: %w", endpoints, err)
	}
	return &Etcd{Client: cli}, nil
}

// Close closes the client and stops the embedded member, if any.
func (e *Etcd) Close() {
	e.Client.Close()
	if e.server != nil {
		e.server.Close()
	}
}

// RunCompactor compacts etcd every interval up to the revision seen one interval earlier, so
// clients always have at least one interval of history to resume watches from. It returns when
// ctx is cancelled.
func (e *Etcd) RunCompactor(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		resp, err := e.Client.Get(ctx, "compact_rev_key")
		if err != nil {
			slog.Warn("compactor: read revision", "err", err)
			continue
		}
		if last > 0 {
			if _, err := e.Client.Compact(ctx, last); err != nil && !isCompacted(err) {
				slog.Warn("compactor: compact", "revision", last, "err", err)
			} else {
				slog.Debug("compacted etcd", "revision", last)
			}
		}
		last = resp.Header.Revision
	}
}

func freeLoopbackURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, fmt.Errorf("find a free port for etcd: %w", err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
}
