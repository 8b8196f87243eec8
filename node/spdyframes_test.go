package node

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// TestSPDYFrames: however a frame's bytes are split into writes, each complete frame (header
// and payload) goes out in one piece, in order, and nothing goes out before its frame is whole.
func TestSPDYFrames(t *testing.T) {
	frame := func(first uint32, payload string) []byte {
		b := binary.BigEndian.AppendUint32(nil, first)
		b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
		return append(b, payload...)
	}
	data := frame(5, "hello, stream 5")
	ping := frame(0x80030006, "ping") // a control frame
	empty := frame(7, "")             // a data frame with no payload (FIN)
	big := frame(9, string(bytes.Repeat([]byte("x"), 100000)))
	all := bytes.Join([][]byte{data, ping, empty, big}, nil)
	splits := map[string][]int{
		"as spdystream writes them": {4, 4, len(data) - 8, 4, 4, 4, 4, 4, 4, 4, len(big) - 8},
		"all at once":               {len(all)},
		"byte by byte":              nil,
		"across frames":             {3, 20, 17, 50},
	}
	for name, sizes := range splits {
		var sent [][]byte
		f := newSPDYFrames(nil, func(head, rest []byte) error {
			sent = append(sent, append(append([]byte(nil), head...), rest...))
			return nil
		})
		rest := all
		for i := 0; len(rest) > 0; i++ {
			n := 1
			if sizes != nil {
				n = len(rest)
				if i < len(sizes) {
					n = min(sizes[i], len(rest))
				}
			}
			if w, err := f.Write(rest[:n]); err != nil || w != n {
				t.Fatalf("%s: Write = %d, %v", name, w, err)
			}
			rest = rest[n:]
		}
		want := [][]byte{data, ping, empty, big}
		if len(sent) != len(want) {
			t.Errorf("%s: %d writes, want %d", name, len(sent), len(want))
			continue
		}
		for i := range want {
			if !bytes.Equal(sent[i], want[i]) {
				t.Errorf("%s: write %d is %d bytes, want frame %d (%d bytes)", name, i, len(sent[i]), i, len(want[i]))
			}
		}
	}
}

// TestWriteBuffers: a frame in two parts reaches the peer whole.
func TestWriteBuffers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = writeBuffers(a)([]byte("head"), []byte("rest")) }()
	got := make([]byte, 8)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "headrest" {
		t.Errorf("read %q, %v", got, err)
	}
}
