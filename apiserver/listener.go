package apiserver

import (
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// tlsHandshakeRecord is the first byte of every TLS connection (a handshake record). No HTTP/1
// request starts with it: methods are letters, and an HTTP/2 preface starts with "PRI".
const tlsHandshakeRecord = 0x16

// sniffTimeout bounds the wait for a connection's first byte, as ReadHeaderTimeout bounds the
// wait for its request.
const sniffTimeout = 10 * time.Second

// dualListener serves TLS and plain HTTP on one port. A server that speaks plain HTTP on
// loopback (kubectl and the written kubeconfig use it) must also answer in-cluster clients,
// which always speak TLS to https://<kubernetes ClusterIP>:443; the proxy forwards those to this
// same port. Each accepted connection's first byte decides: a TLS handshake gets a *tls.Conn
// (which http.Server recognises, serving h2 when negotiated), anything else is plain.
//
// The first byte is read on a goroutine per connection, so a client that connects and stays
// silent holds up no one; it is dropped after sniffTimeout. Close ends every goroutine.
type dualListener struct {
	net.Listener
	tls *tls.Config

	conns     chan net.Conn
	done      chan struct{}
	acceptErr error // set before acceptDone is closed
	acceptEnd chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu      sync.Mutex
	sniffed map[net.Conn]struct{} // connections whose first byte is awaited
}

func newDualListener(l net.Listener, cfg *tls.Config) *dualListener {
	d := &dualListener{Listener: l, tls: cfg, conns: make(chan net.Conn), done: make(chan struct{}),
		acceptEnd: make(chan struct{}), sniffed: map[net.Conn]struct{}{}}
	d.wg.Add(1)
	go d.acceptLoop()
	return d
}

func (d *dualListener) acceptLoop() {
	defer d.wg.Done()
	for {
		c, err := d.Listener.Accept()
		if err != nil {
			d.acceptErr = err
			close(d.acceptEnd)
			return
		}
		d.mu.Lock()
		select {
		case <-d.done:
			d.mu.Unlock()
			c.Close()
			continue
		default:
		}
		d.sniffed[c] = struct{}{}
		d.mu.Unlock()
		d.wg.Go(func() { d.sniff(c) })
	}
}

func (d *dualListener) sniff(c net.Conn) {
	var first [1]byte
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	n, err := c.Read(first[:])
	_ = c.SetReadDeadline(time.Time{})
	d.mu.Lock()
	delete(d.sniffed, c)
	d.mu.Unlock()
	if err != nil || n == 0 {
		c.Close()
		return
	}
	var out net.Conn = &prefixedConn{Conn: c, prefix: first[:]}
	if first[0] == tlsHandshakeRecord {
		out = tls.Server(out, d.tls)
	}
	select {
	case d.conns <- out:
	case <-d.done:
		c.Close()
	}
}

// Accept returns the next connection, plain or TLS.
func (d *dualListener) Accept() (net.Conn, error) {
	select {
	case c := <-d.conns:
		return c, nil
	case <-d.done:
		return nil, net.ErrClosed
	case <-d.acceptEnd:
		return nil, d.acceptErr
	}
}

// Close stops accepting, closes connections still being sniffed and waits for every goroutine.
func (d *dualListener) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.mu.Lock()
		close(d.done)
		for c := range d.sniffed {
			c.Close()
		}
		d.mu.Unlock()
		err = d.Listener.Close()
		d.wg.Wait()
	})
	return err
}

// prefixedConn gives back the bytes already read from a connection before reading on.
type prefixedConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
