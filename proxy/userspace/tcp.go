package userspace

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

const protoTCP = "TCP"

func (p *Proxier) listenTCP(key listenerKey, r route) (*boundListener, error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(key.addr, uint16(key.port))))
	if err != nil {
		return nil, err
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.acceptTCP(ln, r)
	}()
	return &boundListener{route: r, close: func() { _ = ln.Close() }}, nil
}

// acceptTCP serves one listener until it is closed.
func (p *Proxier) acceptTCP(ln *net.TCPListener, r route) {
	var backoff time.Duration
	for {
		conn, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: wait a little rather than spin, since
			// the condition usually lasts a while.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("userspace proxy: accept failed", "servicePort", r.sp.name.String(), "err", err, "retryIn", backoff)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveTCP(conn, r)
		}()
	}
}

// serveTCP connects one client to an endpoint and relays between them until both sides are
// done.
func (p *Proxier) serveTCP(client *net.TCPConn, r route) {
	clientIP := remoteIP(client)
	candidates := r.sp.candidates(r.external, clientIP, p.opts.DialAttempts)
	if len(candidates) == 0 {
		// Refuse at once: the client sees a reset instead of waiting for a timeout.
		p.metrics.connections.WithLabelValues(protoTCP, resultNoEndpoints).Inc()
		reset(client)
		return
	}
	backend, endpoint := p.dialFirst(candidates, r)
	if backend == nil {
		p.metrics.connections.WithLabelValues(protoTCP, resultDialFailed).Inc()
		reset(client)
		return
	}
	r.sp.connected(r.external, clientIP, endpoint)
	p.metrics.connections.WithLabelValues(protoTCP, resultForwarded).Inc()
	active := p.metrics.active.WithLabelValues(protoTCP)
	active.Inc()
	defer active.Dec()

	// On Close, cut the connection; AfterFunc starts no goroutine until then.
	stop := context.AfterFunc(p.ctx, func() {
		_ = client.Close()
		_ = backend.Close()
	})
	defer stop()
	p.relay(client, backend)
}

// dialFirst connects to the first candidate that accepts, or returns nil when none did.
func (p *Proxier) dialFirst(candidates []netip.AddrPort, r route) (*net.TCPConn, netip.AddrPort) {
	dialer := net.Dialer{Timeout: p.opts.DialTimeout}
	for _, ep := range candidates {
		conn, err := dialer.DialContext(p.ctx, "tcp", ep.String())
		if err == nil {
			return conn.(*net.TCPConn), ep
		}
		if p.ctx.Err() != nil {
			return nil, netip.AddrPort{}
		}
		p.metrics.dialFailures.WithLabelValues(protoTCP).Inc()
		p.log.Debug("userspace proxy: endpoint did not accept", "servicePort", r.sp.name.String(), "endpoint", ep.String(), "err", err)
	}
	return nil, netip.AddrPort{}
}

// relay copies both ways until both directions have ended, then closes both connections.
func (p *Proxier) relay(client, backend *net.TCPConn) {
	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(done)
		pipe(backend, client)
	}()
	pipe(client, backend)
	<-done
	_ = client.Close()
	_ = backend.Close()
}

// pipe copies src to dst until src ends (see copyStream). When src ends cleanly, the end is
// passed on as a half-close, so request/response protocols that close their sending side keep
// working; on an error (a reset, say) both connections are reset, which passes the abort on
// and also ends the other direction.
func pipe(dst, src *net.TCPConn) {
	if err := copyStream(dst, src); err != nil {
		reset(src)
		reset(dst)
		return
	}
	_ = dst.CloseWrite()
}

// remoteIP is the client's address, for affinity; the zero Addr (all such clients share one
// affinity entry) if the socket cannot tell, rather than a panic.
func remoteIP(conn *net.TCPConn) netip.Addr {
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// reset closes conn with a RST rather than a FIN.
func reset(conn *net.TCPConn) {
	_ = conn.SetLinger(0)
	_ = conn.Close()
}
