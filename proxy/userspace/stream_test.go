package userspace

import (
	"bytes"
	"io"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// waitNoBuffers waits until no relay buffer is in use.
func waitNoBuffers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for inUse.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of relay buffers still in use", inUse.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdleConnectionsHoldNoBuffer: connections that have carried a little traffic and now wait
// hold no relay buffer; a bulk transfer takes buffers and gives them all back.
func TestIdleConnectionsHoldNoBuffer(t *testing.T) {
	p, _ := newTestProxier(t, Options{})
	echo := startEchoBackend(t)
	svc := servicePortSpec(portName("echo", corev1.ProtocolTCP), serviceIP(t), servicePortNumber)
	apply(t, p, oneService(svc, ready(echo)))
	addr := netip.AddrPortFrom(svc.ClusterIP, uint16(svc.Port))

	for range 20 {
		c := dialTCP(t, addr, netip.Addr{})
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 5)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
			t.Fatalf("echo: %q %v", got, err)
		}
	}
	waitNoBuffers(t) // 20 connections open and idle

	c := dialTCP(t, addr, netip.Addr{})
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	data := bytes.Repeat([]byte("0123456789abcdef"), 2<<20) // 32 MB
	go func() { _, _ = c.Write(data); _ = c.CloseWrite() }()
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("bulk echo: %d bytes, %v", n, err)
	}
	waitNoBuffers(t)
}

// TestBufferBudget: the large buffers taken at once never exceed the budget; past it, smaller
// ones are handed out; everything put back leaves nothing in use.
func TestBufferBudget(t *testing.T) {
	waitNoBuffers(t)
	type taken struct {
		b     *[]byte
		class int
	}
	var all []taken
	largest := len(bufferSizes) - 1
	large := 0 // bytes in large buffers taken
	for range 2 * largeBudget / bufferSizes[largest] {
		b, class := getBuffer(largest)
		if len(*b) != bufferSizes[class] {
			t.Fatalf("class %d buffer of %d bytes", class, len(*b))
		}
		all = append(all, taken{b, class})
		if class >= firstLarge {
			if large += len(*b); large > largeBudget {
				t.Fatalf("%d bytes in large buffers, budget %d", large, largeBudget)
			}
		}
	}
	if last := all[len(all)-1].class; last >= firstLarge {
		t.Errorf("past the budget a class %d buffer was handed out", last)
	}
	for _, tk := range all {
		putBuffer(tk.b, tk.class)
	}
	if n := inUse.Load(); n != 0 {
		t.Errorf("%d bytes still in use", n)
	}

	// With room for less than the largest size but for the next one, that one is handed out.
	all = all[:0]
	for range largeBudget/bufferSizes[largest] - 1 {
		b, class := getBuffer(largest)
		all = append(all, taken{b, class})
	}
	b, class := getBuffer(firstLarge - 1) // small ones count too
	all = append(all, taken{b, class})
	b, class = getBuffer(largest)
	all = append(all, taken{b, class})
	if class != largest-1 {
		t.Errorf("class %d handed out with room for class %d", class, largest-1)
	}
	for _, tk := range all {
		putBuffer(tk.b, tk.class)
	}
	if n := inUse.Load(); n != 0 {
		t.Errorf("%d bytes still in use", n)
	}
	runtime.GC() // let the pools drop what this test made
}

func TestNextClass(t *testing.T) {
	top := len(bufferSizes) - 1
	for _, tc := range []struct {
		got, n int
		full   bool
		want   int
	}{
		{0, bufferSizes[0], true, 1},       // a full read grows
		{top, bufferSizes[top], true, top}, // up to the largest
		{2, bufferSizes[2] / 2, false, 2},  // half full stays
		{2, bufferSizes[2] / 16, false, 1}, // a sixteenth shrinks
		{0, 5, false, 0},                   // down to the smallest
		{1, bufferSizes[1] / 16, false, 0},
	} {
		if got := nextClass(tc.got, tc.n, tc.full); got != tc.want {
			t.Errorf("nextClass(%d, %d, %v) = %d, want %d", tc.got, tc.n, tc.full, got, tc.want)
		}
	}
}
