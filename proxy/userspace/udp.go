package userspace

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

const protoUDP = "UDP"

// maxDatagram is the largest UDP payload over IPv4 or IPv6 without jumbograms.
const maxDatagram = 65535

// udpListener serves one UDP service address. Each client address gets a session: a connected
// socket to the endpoint chosen for it, whose replies go back to the client from the service
// address (the listener's socket), as the client expects.
type udpListener struct {
	p     *Proxier
	conn  *net.UDPConn
	route route

	mu       sync.Mutex
	sessions map[netip.AddrPort]*udpSession
}

type udpSession struct {
	client   netip.AddrPort
	endpoint netip.AddrPort
	backend  *net.UDPConn
	// generation is the service port's endpoint generation at which endpoint was last known
	// to be current.
	generation atomic.Uint64
	// lastActive is the UnixNano time of the last datagram either way.
	lastActive atomic.Int64
}

func (p *Proxier) listenUDP(key listenerKey, r route) (*boundListener, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(key.addr, uint16(key.port))))
	if err != nil {
		return nil, err
	}
	u := &udpListener{p: p, conn: conn, route: r, sessions: make(map[netip.AddrPort]*udpSession)}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		u.serve()
	}()
	return &boundListener{route: r, close: func() { _ = conn.Close() }}, nil
}

// serve reads client datagrams until the listener is closed, then ends every session.
func (u *udpListener) serve() {
	defer u.endAll()
	buf := make([]byte, maxDatagram)
	for {
		n, client, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || u.p.ctx.Err() != nil {
				return
			}
			u.p.log.Debug("userspace proxy: UDP read failed", "servicePort", u.route.sp.name.String(), "err", err)
			continue
		}
		u.forward(buf[:n], client)
	}
}

// forward sends one client datagram on through the client's session, starting one if needed.
func (u *udpListener) forward(datagram []byte, client netip.AddrPort) {
	s := u.session(client)
	if s == nil {
		return
	}
	if _, err := s.backend.Write(datagram); err != nil {
		// Typically an ICMP port-unreachable from an earlier datagram: end the session so
		// that the next datagram picks an endpoint afresh.
		u.p.metrics.udpDropped.WithLabelValues(dropSendFailed).Inc()
		u.end(s)
	}
}

// session returns the client's session, touched, or a new one; nil (the datagram dropped)
// when the service port has no endpoint for it.
func (u *udpListener) session(client netip.AddrPort) *udpSession {
	u.mu.Lock()
	s := u.sessions[client]
	if s != nil {
		// Touching under mu, against expire's check under mu, means a session that gets a
		// datagram is never expired in between.
		s.lastActive.Store(time.Now().UnixNano())
	}
	u.mu.Unlock()

	sp, external := u.route.sp, u.route.external
	if s != nil {
		current, gen := sp.stillCurrent(external, s.endpoint, s.generation.Load())
		if current {
			s.generation.Store(gen)
			return s
		}
		u.end(s)
	}

	gen := sp.generation.Load()
	clientIP := client.Addr().Unmap()
	candidates := sp.candidates(external, clientIP, u.p.opts.DialAttempts)
	if len(candidates) == 0 {
		u.p.metrics.connections.WithLabelValues(protoUDP, resultNoEndpoints).Inc()
		u.p.metrics.udpDropped.WithLabelValues(dropNoEndpoints).Inc()
		return nil
	}
	for _, ep := range candidates {
		backend, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ep))
		if err != nil {
			u.p.metrics.dialFailures.WithLabelValues(protoUDP).Inc()
			u.p.log.Debug("userspace proxy: cannot open UDP socket to endpoint", "servicePort", sp.name.String(), "endpoint", ep.String(), "err", err)
			continue
		}
		s = &udpSession{client: client, endpoint: ep, backend: backend}
		s.generation.Store(gen)
		s.lastActive.Store(time.Now().UnixNano())
		u.mu.Lock()
		u.sessions[client] = s
		u.mu.Unlock()
		sp.connected(external, clientIP, ep)
		u.p.metrics.connections.WithLabelValues(protoUDP, resultForwarded).Inc()
		u.p.metrics.active.WithLabelValues(protoUDP).Inc()
		u.p.wg.Add(1)
		go func() {
			defer u.p.wg.Done()
			defer u.p.metrics.active.WithLabelValues(protoUDP).Dec()
			u.relayReplies(s)
		}()
		return s
	}
	u.p.metrics.connections.WithLabelValues(protoUDP, resultDialFailed).Inc()
	u.p.metrics.udpDropped.WithLabelValues(dropSendFailed).Inc()
	return nil
}

// relayReplies sends the endpoint's datagrams back to the client until the session is idle
// for the idle timeout, its socket fails (the endpoint is gone), or it is ended.
func (u *udpListener) relayReplies(s *udpSession) {
	defer u.end(s)
	idle := u.p.opts.UDPIdleTimeout
	buf := make([]byte, maxDatagram)
	for {
		_ = s.backend.SetReadDeadline(time.Unix(0, s.lastActive.Load()).Add(idle))
		n, err := s.backend.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !u.expire(s) {
				continue
			}
			return
		}
		s.lastActive.Store(time.Now().UnixNano())
		if _, err := u.conn.WriteToUDPAddrPort(buf[:n], s.client); err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// expire removes s if it has been idle for the idle timeout, and reports whether it did.
func (u *udpListener) expire(s *udpSession) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if time.Since(time.Unix(0, s.lastActive.Load())) < u.p.opts.UDPIdleTimeout {
		return false
	}
	if u.sessions[s.client] == s {
		delete(u.sessions, s.client)
	}
	return true
}

// end removes s and closes its socket, which ends its relayReplies. Ending twice is harmless.
func (u *udpListener) end(s *udpSession) {
	u.mu.Lock()
	if u.sessions[s.client] == s {
		delete(u.sessions, s.client)
	}
	u.mu.Unlock()
	_ = s.backend.Close()
}

func (u *udpListener) endAll() {
	u.mu.Lock()
	sessions := u.sessions
	u.sessions = make(map[netip.AddrPort]*udpSession)
	u.mu.Unlock()
	for _, s := range sessions {
		_ = s.backend.Close()
	}
}
