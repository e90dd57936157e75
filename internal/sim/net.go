package sim

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errDropped is what a connection cut by a fault answers.
var errDropped = errors.New("sim: connection dropped by a fault")

// Network carries every replica's connections to the store, over in-memory
// pipes, and injects the faults that live between a client and Redis:
// requests held while Redis stalls, replies delayed, connections cut before a
// request is sent or after Redis applied it but before its reply came back,
// and a replica's connections closed for good when it is killed.
//
// Requests are buffered as a kernel's socket buffer would: a client's write
// returns at once, and a forwarding goroutine per connection hands the bytes
// to the server when no stall holds them. Bytes written before a connection
// closed still reach the server (they were on the wire), so a request can be
// applied after its client gave up on it, as with real Redis.
type Network struct {
	store *Store

	mu     sync.Mutex
	conns  map[*conn]struct{}
	stall  time.Time     // requests reach the server no earlier than this
	rtt    time.Duration // the round trip without faults: half each way
	faults []*linkFaults // per replica
	dead   []bool        // per replica: killed, dials refused

	commands atomic.Int64 // commands that reached the server
}

// linkFaults are the faults armed on one replica's connections.
type linkFaults struct {
	dropBefore int           // the next so many requests are cut before they are sent
	dropAfter  int           // the next so many requests are applied, then their replies lost
	delayUntil time.Time     // replies read before this are delayed...
	delay      time.Duration // ...by this much
}

// NewNetwork returns a network to store for replicas replicas.
func NewNetwork(store *Store, replicas int) *Network {
	n := &Network{store: store, conns: map[*conn]struct{}{},
		faults: make([]*linkFaults, replicas), dead: make([]bool, replicas)}
	for i := range n.faults {
		n.faults[i] = &linkFaults{}
	}
	return n
}

// Commands returns how many commands reached the server so far.
func (n *Network) Commands() int64 { return n.commands.Load() }

// Dial opens a connection from replica to the store. It fails for a killed
// replica.
func (n *Network) Dial(replica int) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead[replica] {
		return nil, errors.New("sim: replica is dead")
	}
	srv, err := n.store.dial()
	if err != nil {
		return nil, err
	}
	c := &conn{net: n, replica: replica, srv: srv, out: make(chan []byte, 256), done: make(chan struct{})}
	n.conns[c] = struct{}{}
	go c.forward()
	return c, nil
}

// SetLatency gives every round trip rtt without faults: a request reaches
// the server half of it after it was written, and its reply the client the
// other half after the server answered. A new network has none: its round
// trips take no virtual time.
func (n *Network) SetLatency(rtt time.Duration) {
	n.mu.Lock()
	n.rtt = rtt
	n.mu.Unlock()
}

func (n *Network) oneWay() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rtt / 2
}

// Stall holds every request until now+d: Redis answers nothing meanwhile.
func (n *Network) Stall(d time.Duration) {
	n.mu.Lock()
	n.stall = maxTime(n.stall, time.Now().Add(d))
	n.mu.Unlock()
}

// DelayReplies delays every reply to replica read during the next span by d.
func (n *Network) DelayReplies(replica int, span, d time.Duration) {
	n.mu.Lock()
	f := n.faults[replica]
	f.delayUntil, f.delay = time.Now().Add(span), d
	n.mu.Unlock()
}

// DropBefore cuts replica's connection on each of its next k requests,
// before the request is sent.
func (n *Network) DropBefore(replica, k int) {
	n.mu.Lock()
	n.faults[replica].dropBefore += k
	n.mu.Unlock()
}

// DropAfter lets each of replica's next k requests reach Redis and be
// applied, then cuts the connection before the reply is read.
func (n *Network) DropAfter(replica, k int) {
	n.mu.Lock()
	n.faults[replica].dropAfter += k
	n.mu.Unlock()
}

// Kill closes replica's connections and refuses its dials from now on.
func (n *Network) Kill(replica int) {
	n.mu.Lock()
	n.dead[replica] = true
	var cut []*conn
	for c := range n.conns {
		if c.replica == replica {
			cut = append(cut, c)
		}
	}
	n.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// CloseAll closes every open connection, as a Redis restart or failover does.
func (n *Network) CloseAll() {
	n.mu.Lock()
	var cut []*conn
	for c := range n.conns {
		cut = append(cut, c)
	}
	n.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// holdUntil returns when requests may reach the server.
func (n *Network) holdUntil() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stall
}

// onWrite decides the fate of a request from replica: false cuts the
// connection before it is sent; dropReply arms the loss of its reply.
func (n *Network) onWrite(replica int) (send, dropReply bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.faults[replica]
	if n.dead[replica] {
		return false, false
	}
	if f.dropBefore > 0 {
		f.dropBefore--
		return false, false
	}
	if f.dropAfter > 0 {
		f.dropAfter--
		return true, true
	}
	return true, false
}

// replyDelay is how long the reply replica is about to read is delayed.
func (n *Network) replyDelay(replica int) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.faults[replica]
	d := n.rtt / 2
	if time.Now().Before(f.delayUntil) {
		d += f.delay
	}
	return d
}

func (n *Network) forget(c *conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// conn is the client's end of a connection.
type conn struct {
	net     *Network
	replica int
	srv     net.Conn // the client end of the pipe the store serves
	out     chan []byte

	mu        sync.Mutex
	done      chan struct{} // closed by Close
	closed    bool
	replied   bool // the pending request's reply has begun to arrive
	dropReply bool // the pending request's reply is to be lost
	pending   bool // a request was written whose reply was not read yet
	readDL    time.Time
}

// forward hands requests to the server once no stall holds them; after
// Close it still delivers what was written before, then closes the pipe.
func (c *conn) forward() {
	defer c.net.forget(c)
	defer c.srv.Close()
	for {
		var b []byte
		select {
		case b = <-c.out:
		case <-c.done:
			select {
			case b = <-c.out:
			default:
				return
			}
		}
		if d := c.net.oneWay(); d > 0 {
			time.Sleep(d)
		}
		for {
			until := c.net.holdUntil()
			d := time.Until(until)
			if d <= 0 {
				break
			}
			time.Sleep(d)
		}
		c.net.commands.Add(int64(countCommands(b)))
		if _, err := c.srv.Write(b); err != nil {
			return
		}
	}
}

func (c *conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	c.mu.Unlock()
	send, dropReply := c.net.onWrite(c.replica)
	if !send {
		c.Close()
		return 0, errDropped
	}
	c.mu.Lock()
	c.pending, c.replied, c.dropReply = true, false, dropReply
	c.mu.Unlock()
	b := append([]byte(nil), p...)
	select {
	case c.out <- b:
		return len(p), nil
	case <-c.done:
		return 0, net.ErrClosed
	}
}

func (c *conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	first := c.pending && !c.replied
	c.replied = true
	drop := first && c.dropReply
	dl := c.readDL
	c.mu.Unlock()
	if first {
		if d := c.net.replyDelay(c.replica); d > 0 {
			if !dl.IsZero() && time.Now().Add(d).After(dl) {
				time.Sleep(max(0, time.Until(dl)))
				return 0, os.ErrDeadlineExceeded
			}
			time.Sleep(d)
		}
	}
	n, err := c.srv.Read(p)
	if drop && n > 0 {
		// Redis applied the request and answered; the answer is lost.
		c.Close()
		return 0, errDropped
	}
	if errors.Is(err, io.ErrClosedPipe) {
		err = net.ErrClosed
	}
	return n, err
}

func (c *conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
		// Unblock a reader: the pipe's read side ends with the pipe.
		c.srv.SetReadDeadline(time.Now())
	}
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.srv.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr { return c.srv.RemoteAddr() }

func (c *conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	c.readDL = t
	return c.srv.SetReadDeadline(t)
}

// SetWriteDeadline is accepted and ignored: writes never block (they are
// buffered until the forwarder sends them).
func (c *conn) SetWriteDeadline(time.Time) error { return nil }

// countCommands counts the RESP arrays (commands) in a request buffer; a
// pipeline sends several in one write.
func countCommands(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		if b[i] != '*' {
			return n // not a request we understand: count what we saw
		}
		args, j := readInt(b, i+1)
		i = j
		for range args {
			if i >= len(b) || b[i] != '$' {
				return n
			}
			size, k := readInt(b, i+1)
			i = k + size + 2
		}
		n++
	}
	return n
}

// readInt reads a decimal number ending in \r\n at b[i:], returning it and
// the index after the \r\n.
func readInt(b []byte, i int) (int, int) {
	v := 0
	for i < len(b) && b[i] != '\r' {
		v = v*10 + int(b[i]-'0')
		i++
	}
	return v, i + 2
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
