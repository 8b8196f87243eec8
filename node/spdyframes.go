package node

import (
	"net"
	"sync"
)

// spdyFrames is a connection carrying SPDY/3.1 whose writes go out a frame at a time.
// spdystream writes each frame as several Write calls (the header's fields, then the data),
// each of which would otherwise be a system call and a TCP segment of its own, or, in a
// WebSocket tunnel, a message of its own: three per data frame, the bulk of the agent's CPU
// time when port-forwarding. Every SPDY frame, control or data, starts with an 8-byte header
// whose last 3 bytes are the length of what follows, so complete frames are easy to find.
type spdyFrames struct {
	net.Conn
	// out sends one frame given in two parts (what was buffered, and the rest taken from the
	// caller's slice without a copy).
	out func(head, rest []byte) error

	mu      sync.Mutex
	pending []byte // the start of the frame being written
	need    int    // bytes of the current frame still to come after pending; -1: its header is incomplete
}

// spdyFrameHeader is the size of every SPDY frame's header.
const spdyFrameHeader = 8

func newSPDYFrames(c net.Conn, out func(head, rest []byte) error) *spdyFrames {
	return &spdyFrames{Conn: c, out: out, need: -1}
}

// writeBuffers sends head and rest to c in one system call where c is a TCP connection.
func writeBuffers(c net.Conn) func(head, rest []byte) error {
	return func(head, rest []byte) error {
		bufs := net.Buffers{head, rest}
		_, err := bufs.WriteTo(c)
		return err
	}
}

func (f *spdyFrames) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		if f.need < 0 { // still in the header
			k := min(spdyFrameHeader-len(f.pending), len(p))
			f.pending = append(f.pending, p[:k]...)
			p = p[k:]
			if len(f.pending) < spdyFrameHeader {
				break
			}
			h := f.pending
			f.need = int(h[5])<<16 | int(h[6])<<8 | int(h[7])
		}
		if len(p) < f.need { // the frame ends in a later write: keep what is here
			f.pending = append(f.pending, p...)
			f.need -= len(p)
			break
		}
		if err := f.out(f.pending, p[:f.need]); err != nil {
			return n - len(p), err
		}
		p = p[f.need:]
		f.pending, f.need = f.pending[:0], -1
	}
	return n, nil
}
