// Package memconn is an in-memory network connection that a
// testing/synctest bubble can run on: the simulator's Redis links and
// throttlertest's are made of it.
package memconn

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Pair returns the two ends of an in-memory connection whose
// writes never block: each direction is an unbounded buffer, as a socket's
// are in effect for the few kilobytes a Redis client and server exchange.
// net.Pipe's synchronous writes could deadlock the store: miniredis writes
// under its client's lock, Pub/Sub pushes included, and a pipe write waits
// for a reader who may be waiting for that lock. Waits are on channels and
// timers, which a synctest bubble sees as durably blocked.
func Pair() (net.Conn, net.Conn) {
	ab, ba := newHalf(), newHalf()
	return &bufConn{r: ba, w: ab}, &bufConn{r: ab, w: ba}
}

// half is one direction of a Pair.
type half struct {
	mu       sync.Mutex
	buf      []byte
	closed   bool
	deadline time.Time
	ready    chan struct{} // signalled when buf, closed or deadline changes
}

func newHalf() *half { return &half{ready: make(chan struct{}, 1)} }

func (h *half) signal() {
	select {
	case h.ready <- struct{}{}:
	default:
	}
}

func (h *half) write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, io.ErrClosedPipe
	}
	h.buf = append(h.buf, p...)
	h.signal()
	return len(p), nil
}

func (h *half) read(p []byte) (int, error) {
	for {
		h.mu.Lock()
		if len(h.buf) > 0 {
			n := copy(p, h.buf)
			h.buf = h.buf[n:]
			if len(h.buf) > 0 {
				h.signal() // more for the next read
			}
			h.mu.Unlock()
			return n, nil
		}
		if h.closed {
			h.mu.Unlock()
			return 0, io.EOF
		}
		dl := h.deadline
		h.mu.Unlock()
		var expired <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			expired = t.C
			defer t.Stop()
		}
		select {
		case <-h.ready:
		case <-expired:
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (h *half) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.signal()
}

func (h *half) setDeadline(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deadline = t
	h.signal()
}

// bufConn is one end of a Pair.
type bufConn struct {
	r, w *half
}

func (c *bufConn) Read(p []byte) (int, error)  { return c.r.read(p) }
func (c *bufConn) Write(p []byte) (int, error) { return c.w.write(p) }

// Close ends both directions: the peer reads what was written, then EOF.
func (c *bufConn) Close() error {
	c.r.close()
	c.w.close()
	return nil
}

func (c *bufConn) LocalAddr() net.Addr  { return pipeAddr{} }
func (c *bufConn) RemoteAddr() net.Addr { return pipeAddr{} }

func (c *bufConn) SetDeadline(t time.Time) error {
	c.r.setDeadline(t)
	return nil
}

func (c *bufConn) SetReadDeadline(t time.Time) error {
	c.r.setDeadline(t)
	return nil
}

// SetWriteDeadline does nothing: writes never block.
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "memconn" }
func (pipeAddr) String() string  { return "memconn" }
