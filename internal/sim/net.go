package sim

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// errDropped is what a connection cut by a fault answers.
var errDropped = errors.New("sim: connection dropped by a fault")

// errLivelock fails every request once the watchdog called the run a
// livelock.
var errLivelock = errors.New("sim: a livelock: virtual time stands still")

// Network carries every replica's connections to the store, over in-memory
// pipes, and injects the faults that live between a client and Redis:
// requests held while Redis stalls, replies or requests delayed (by a fixed
// amount, or by one drawn per round trip, on either side), connections cut
// before a request is sent or after Redis applied it but before its reply
// came back, and a replica's connections closed for good when it is killed
// or its process restarts.
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
	gen    []int         // per replica: its process's number; older ones' dials are refused

	commands atomic.Int64 // commands that reached the server
	watch    watchdog     // calls a run whose virtual time stands still a livelock
}

// linkFaults are the faults armed on one replica's connections.
type linkFaults struct {
	dropBefore int           // the next so many requests are cut before they are sent
	dropAfter  int           // the next so many requests are applied, then their replies lost
	delayUntil time.Time     // replies read before this are delayed...
	delay      time.Duration // ...by this much
	delays     []delayRule   // delays drawn per round trip, or of requests
	rng        *rand.Rand    // draws them
}

// side is where a delayRule delays a round trip.
type side int

const (
	requests side = iota // on its way to Redis: the server reads its clock late
	replies              // on its way back: the server read its clock early
	oneSide              // on one of the two, drawn per round trip
)

// delayRule delays the round trips begun (requests, oneSide) or the replies
// read (replies) before until by d, or by an amount drawn from 0 to d for
// each when jitter is set.
type delayRule struct {
	until  time.Time
	d      time.Duration
	side   side
	jitter bool
}

// draw is how much the rule delays one round trip.
func (f *linkFaults) draw(r delayRule) time.Duration {
	if !r.jitter {
		return r.d
	}
	return time.Duration(f.rng.Int64N(int64(r.d) + 1))
}

// active drops the rules that ended before now and returns the others.
func (f *linkFaults) active(now time.Time) []delayRule {
	f.delays = slices.DeleteFunc(f.delays, func(r delayRule) bool { return !now.Before(r.until) })
	return f.delays
}

// NewNetwork returns a network to store for replicas replicas.
func NewNetwork(store *Store, replicas int) *Network {
	n := &Network{store: store, conns: map[*conn]struct{}{},
		faults: make([]*linkFaults, replicas), dead: make([]bool, replicas), gen: make([]int, replicas)}
	for i := range n.faults {
		n.faults[i] = &linkFaults{}
	}
	n.Seed(0)
	return n
}

// Seed sets where the delays drawn per round trip come from: each replica's
// link draws from a source of its own, seeded by seed.
func (n *Network) Seed(seed uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, f := range n.faults {
		f.rng = rand.New(rand.NewPCG(seed, 0x6e6574<<16|uint64(i)))
	}
}

// Commands returns how many commands reached the server so far.
func (n *Network) Commands() int64 { return n.commands.Load() }

// Dial opens a connection from replica's process gen (0 for the first,
// then what Restart returned) to the store. It fails for a killed replica
// and for a process that was restarted.
func (n *Network) Dial(replica, gen int) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead[replica] || gen != n.gen[replica] {
		return nil, errors.New("sim: replica is dead")
	}
	srv, err := n.store.dial()
	if err != nil {
		return nil, err
	}
	c := &conn{net: n, replica: replica, gen: gen, srv: srv, out: make(chan packet, 256), done: make(chan struct{})}
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

// DelayRequests delays every request replica writes during the next span
// by d, or, with jitter, each by an amount drawn from 0 to d. A request held
// longer than the next one on its connection still reaches the server
// first, as on a socket.
func (n *Network) DelayRequests(replica int, span, d time.Duration, jitter bool) {
	n.addDelay(replica, delayRule{until: time.Now().Add(span), d: d, side: requests, jitter: jitter})
}

// JitterReplies delays each reply to replica read during the next span by
// an amount drawn from 0 to d.
func (n *Network) JitterReplies(replica int, span, d time.Duration) {
	n.addDelay(replica, delayRule{until: time.Now().Add(span), d: d, side: replies, jitter: true})
}

// Load delays each round trip replica begins during the next span, as a
// loaded machine does, by an amount drawn from 0 to d, on one side drawn
// at random: the request's way to the server or the reply's way back.
func (n *Network) Load(replica int, span, d time.Duration) {
	n.addDelay(replica, delayRule{until: time.Now().Add(span), d: d, side: oneSide, jitter: true})
}

func (n *Network) addDelay(replica int, r delayRule) {
	n.mu.Lock()
	f := n.faults[replica]
	f.delays = append(f.delays, r)
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
	cut := n.connsOf(replica)
	n.mu.Unlock()
	closeConns(cut)
}

// Restart closes replica's connections, as the death of its process does,
// and returns the number of the process that replaces it: from now on only
// that process's dials are accepted for replica (even after a Kill). The
// faults armed on replica's link stay: they are its machine's.
func (n *Network) Restart(replica int) (gen int) {
	n.mu.Lock()
	n.dead[replica] = false
	n.gen[replica]++
	gen = n.gen[replica]
	cut := n.connsOf(replica)
	n.mu.Unlock()
	closeConns(cut)
	return gen
}

// connsOf lists replica's open connections; n.mu is held.
func (n *Network) connsOf(replica int) []*conn {
	var out []*conn
	for c := range n.conns {
		if c.replica == replica {
			out = append(out, c)
		}
	}
	return out
}

func closeConns(cs []*conn) {
	for _, c := range cs {
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

// onWrite decides the fate of a request from c: false cuts the connection
// before it is sent; dropReply arms the loss of its reply. It draws the
// delays of the round trip it begins, unless undelayed: its request's
// (hold) and, for a delay on one side, its reply's (later).
func (n *Network) onWrite(c *conn, undelayed bool) (send, dropReply bool, hold, later time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.faults[c.replica]
	if n.dead[c.replica] || c.gen != n.gen[c.replica] {
		return false, false, 0, 0
	}
	if f.dropBefore > 0 {
		f.dropBefore--
		return false, false, 0, 0
	}
	for _, r := range f.active(time.Now()) {
		switch {
		case undelayed:
		case r.side == requests:
			hold += f.draw(r)
		case r.side == oneSide && f.rng.IntN(2) == 0:
			hold += f.draw(r)
		case r.side == oneSide:
			later += f.draw(r)
		}
	}
	if f.dropAfter > 0 {
		f.dropAfter--
		return true, true, hold, later
	}
	return true, false, hold, later
}

// replyDelay is how long the reply replica is about to read is delayed.
func (n *Network) replyDelay(replica int) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.faults[replica]
	d := n.rtt / 2
	now := time.Now()
	if now.Before(f.delayUntil) {
		d += f.delay
	}
	for _, r := range f.active(now) {
		if r.side == replies {
			d += f.draw(r)
		}
	}
	return d
}

// lockedHandshake reports a request of a new connection's handshake
// (HELLO, CLIENT ...), which go-redis may send holding a mutex until its
// reply is read: a PubSub's while it reconnects (a Close then waits for
// it), the client's maintenance-notifications lock across CLIENT
// MAINT_NOTIFICATIONS (another connection's downgrade waits for it). A
// goroutine waiting for a mutex holds a synctest bubble's clock still: a
// request or reply held in virtual time would never come, and the run
// would never end (seeds 1069 and 1831, a PubSub reconnecting into a
// reply delay and into a stall). So a handshake takes no virtual time:
// no latency, delay or stall holds it (faults act on the commands that
// follow); a cut still cuts it.
func lockedHandshake(b []byte) bool {
	name := firstArg(b)
	return strings.EqualFold(name, "hello") || strings.EqualFold(name, "client")
}

// firstArg returns the first bulk string of the RESP request b: its
// command's name.
func firstArg(b []byte) string {
	i := 0
	if len(b) > 0 && b[0] == '*' {
		_, i = readInt(b, 1)
	}
	if i >= len(b) || b[i] != '$' {
		return ""
	}
	size, j := readInt(b, i+1)
	if size < 0 || j+size > len(b) {
		return ""
	}
	return string(b[j : j+size])
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
	gen     int      // the number of the replica's process that dialled it
	srv     net.Conn // the client end of the pipe the store serves
	out     chan packet

	mu        sync.Mutex
	done      chan struct{} // closed by Close
	closed    bool
	replied   bool          // the pending request's reply has begun to arrive
	dropReply bool          // the pending request's reply is to be lost
	pending   bool          // a request was written whose reply was not read yet
	later     time.Duration // the pending request's reply is delayed this much more (a delay on one side)
	undelayed bool          // the pending request is a handshake, which takes no virtual time (see lockedHandshake)
	readDL    time.Time
}

// packet is a request on its way: the server reads it no earlier than
// due; a handshake (undelayed) at once, even during a stall.
type packet struct {
	b         []byte
	due       time.Time
	undelayed bool
}

// forward hands requests to the server once no stall holds them; after
// Close it still delivers what was written before, then closes the pipe.
func (c *conn) forward() {
	defer c.net.forget(c)
	defer c.srv.Close()
	for {
		var p packet
		select {
		case p = <-c.out:
		case <-c.done:
			select {
			case p = <-c.out:
			default:
				return
			}
		}
		b := p.b
		if !p.undelayed {
			c.hold(p)
		}
		c.net.commands.Add(int64(countCommands(b)))
		if _, err := c.srv.Write(b); err != nil {
			return
		}
	}
}

// hold waits until request p may reach the server: the way there, its
// delay (those behind it wait for it, in order) and any stall.
func (c *conn) hold(p packet) {
	oneWay := c.net.oneWay()
	if oneWay > 0 {
		time.Sleep(oneWay)
	}
	if d := time.Until(p.due.Add(oneWay)); d > 0 {
		time.Sleep(d)
	}
	for {
		until := c.net.holdUntil()
		d := time.Until(until)
		if d <= 0 {
			return
		}
		time.Sleep(d)
	}
}

func (c *conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	c.mu.Unlock()
	undelayed := lockedHandshake(p)
	if c.net.watch.wrote(time.Now(), c.replica, firstArg(p)) {
		c.Close()
		return 0, errLivelock
	}
	send, dropReply, hold, later := c.net.onWrite(c, undelayed)
	if !send {
		c.Close()
		return 0, errDropped
	}
	c.mu.Lock()
	c.pending, c.replied, c.dropReply, c.later, c.undelayed = true, false, dropReply, later, undelayed
	c.mu.Unlock()
	pk := packet{b: append([]byte(nil), p...), undelayed: undelayed}
	if hold > 0 {
		pk.due = time.Now().Add(hold)
	}
	select {
	case c.out <- pk:
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
	later, undelayed := c.later, c.undelayed
	c.mu.Unlock()
	if first {
		d := later
		if !undelayed {
			d += c.net.replyDelay(c.replica)
		}
		if d > 0 {
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
