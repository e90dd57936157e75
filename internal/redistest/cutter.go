package redistest

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"syscall"
)

// Cutter loses replies the way a network that resets a connection does:
// armed with Cut, the next replies to a request that holds the bytes it
// matches are read from the server, so the request was applied, and then
// the connection is closed and the read fails with ECONNRESET, as a reset
// after the server answered makes it fail. A client reaches the server
// through a Cutter's Dial (redis.Options.Dialer). It is safe for
// concurrent use.
type Cutter struct {
	armed atomic.Int64
	cuts  atomic.Int64
	match atomic.Pointer[[]byte]
}

// Cut arms c to lose the replies to the next n requests written after it
// that hold match (a command's name as go-redis writes it, in lower case,
// as "exec" or "evalsha"; empty: any request).
func (c *Cutter) Cut(n int, match string) {
	m := []byte(match)
	c.match.Store(&m)
	c.armed.Store(int64(n))
}

// Cuts returns how many replies c has lost.
func (c *Cutter) Cuts() int { return int(c.cuts.Load()) }

// Dial dials addr over TCP, through c.
func (c *Cutter) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: conn, c: c}, nil
}

// cutConn is one connection through a Cutter. A connection is used by one
// goroutine at a time (go-redis's pool hands it out so).
type cutConn struct {
	net.Conn
	c       *Cutter
	matched bool // the last request written holds the match
}

func (cc *cutConn) Write(p []byte) (int, error) {
	if m := cc.c.match.Load(); m != nil {
		cc.matched = bytes.Contains(p, *m)
	}
	return cc.Conn.Write(p)
}

func (cc *cutConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if err != nil || !cc.matched {
		return n, err
	}
	for {
		left := cc.c.armed.Load()
		if left <= 0 {
			return n, err
		}
		if cc.c.armed.CompareAndSwap(left, left-1) {
			break
		}
	}
	cc.matched = false
	cc.c.cuts.Add(1)
	cc.Conn.Close()
	return 0, &net.OpError{Op: "read", Net: "tcp", Addr: cc.RemoteAddr(), Err: syscall.ECONNRESET}
}
