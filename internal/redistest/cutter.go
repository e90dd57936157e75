package redistest

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
)

// Cutter loses replies the way a network that resets a connection does:
// armed with Cut, the replies to a request that holds the bytes it matches
// are read from the server, every command's (so the whole request was
// applied, a transaction's EXEC included), and then the connection is
// closed and the read fails with ECONNRESET, as a reset after the server
// answered makes it fail. A client reaches the server
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
	sent    int  // commands written since the last reply was read whole
	replies []byte
}

func (cc *cutConn) Write(p []byte) (int, error) {
	if m := cc.c.match.Load(); m != nil {
		cc.matched = bytes.Contains(p, *m)
	}
	cc.sent += respValues(p)
	return cc.Conn.Write(p)
}

func (cc *cutConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if err != nil || !cc.matched {
		cc.sent = 0
		return n, err
	}
	for {
		left := cc.c.armed.Load()
		if left <= 0 {
			cc.sent = 0
			return n, err
		}
		if cc.c.armed.CompareAndSwap(left, left-1) {
			break
		}
	}
	// Read on until every command written has its reply: the server has
	// then applied them all (a reply to MULTI alone tells nothing of the
	// EXEC behind it).
	cc.replies = append(cc.replies[:0], p[:n]...)
	buf := make([]byte, 4096)
	for respValues(cc.replies) < cc.sent {
		m, err := cc.Conn.Read(buf)
		if err != nil {
			break
		}
		cc.replies = append(cc.replies, buf[:m]...)
	}
	cc.matched, cc.sent = false, 0
	cc.c.cuts.Add(1)
	cc.Conn.Close()
	return 0, &net.OpError{Op: "read", Net: "tcp", Addr: cc.RemoteAddr(), Err: syscall.ECONNRESET}
}

// respValues counts the whole RESP values (RESP2 or RESP3) at the top level
// of b: the commands of a request, or the replies to them.
func respValues(b []byte) int {
	n := 0
	for {
		rest, ok := respSkip(b)
		if !ok {
			return n
		}
		b, n = rest, n+1
	}
}

// respSkip returns what follows the RESP value b starts with, or false
// when b does not hold it whole.
func respSkip(b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return nil, false
	}
	end := bytes.Index(b, []byte("\r\n"))
	if end < 0 {
		return nil, false
	}
	kind, line, rest := b[0], b[1:end], b[end+2:]
	size := func() int {
		v, err := strconv.Atoi(string(line))
		if err != nil {
			return -1
		}
		return v
	}
	elems := 0
	switch kind {
	case '$', '=', '!': // a bulk string, verbatim string or bulk error
		l := size()
		if l < 0 {
			return rest, true // a RESP2 null
		}
		if len(rest) < l+2 {
			return nil, false
		}
		return rest[l+2:], true
	case '*', '~', '>': // an array, set or push
		elems = size()
	case '%', '|': // a map or attribute: pairs
		elems = 2 * size()
	default: // a line: +, -, :, _, ,, #, (
		return rest, true
	}
	for range max(elems, 0) {
		var ok bool
		if rest, ok = respSkip(rest); !ok {
			return nil, false
		}
	}
	if kind == '|' {
		return respSkip(rest) // an attribute precedes the value it describes
	}
	return rest, true
}
