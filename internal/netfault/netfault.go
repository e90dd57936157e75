// Package netfault is a TCP proxy that puts network faults between a
// client and a server, for tests and benchmarks: latency and jitter in
// each direction, a slow link, the round trip of a TCP handshake, resets
// and stalls. Toxiproxy's toxics are the model (latency, jitter,
// bandwidth, reset_peer, timeout), kept to what this module measures.
//
// Each connection the proxy accepts is forwarded to the target on a new
// upstream connection of its own. In each direction, one goroutine reads
// chunks and stamps each with the time it is due (its read time plus the
// delays in force), and another writes them to the other side in order,
// once due and while no stall holds them: a chunk never overtakes one read
// before it. Bytes held are kept in memory, up to a bounded queue per
// direction, beyond which the proxy stops reading (as a full TCP window
// would). Settings apply to the bytes read after they are set.
package netfault

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections to a target, with the faults set by its
// methods. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // ends at Close: cancels dials under way
	cancel context.CancelFunc

	cfg        atomic.Pointer[config]
	resetUntil atomic.Int64 // Unix ns: connections are reset until then
	cutUntil   atomic.Int64 // Unix ns: a reply resets its connection until then
	stallUntil atomic.Int64 // Unix ns: nothing is forwarded until then

	mu     sync.Mutex // guards links, closed and changes to cfg
	links  map[*link]struct{}
	closed bool

	wg       sync.WaitGroup // every goroutine the proxy started
	accepted atomic.Int64
	resets   atomic.Int64
}

// config is the settings in force; replaced whole on each change.
type config struct {
	delay, jitter [2]time.Duration // by direction: up, down
	rate          int              // bytes per second per direction; 0: unlimited
	handshake     time.Duration
}

// The directions of a connection.
const (
	up   = 0 // client to target
	down = 1 // target to client
)

// Listen starts a proxy on 127.0.0.1 on a free port that forwards every
// connection it accepts to target (host:port), without faults until they
// are set. Close it with Close.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.cfg.Store(&config{})
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients dial: 127.0.0.1 and the proxy's port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection (client and upstream
// sides) without delivering the bytes still held, and returns once every
// goroutine of the proxy has ended. It returns the listener's Close error;
// calls after the first return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	for _, l := range links {
		l.end(closed)
	}
	p.wg.Wait()
	return err
}

// SetDelay delays every chunk read from now on by up (client to target)
// or down (target to client): it is delivered no earlier than its read
// time plus the delay, and never before a chunk read before it. Negative
// values count as 0.
func (p *Proxy) SetDelay(up, down time.Duration) {
	p.update(func(c *config) { c.delay = [2]time.Duration{max(up, 0), max(down, 0)} })
}

// SetJitter adds to the delay of every chunk read from now on a uniform
// random extra in [0, up] (client to target) or [0, down] (target to
// client), drawn per chunk; a chunk still never overtakes one read before
// it (it waits for it instead). Negative values count as 0.
func (p *Proxy) SetJitter(up, down time.Duration) {
	p.update(func(c *config) { c.jitter = [2]time.Duration{max(up, 0), max(down, 0)} })
}

// SetRate makes each direction of each connection a link of
// bytesPerSecond: a chunk read from now on is sent once the bytes before
// it have been, takes len/bytesPerSecond to send, and its delay (see
// SetDelay) counts from its last byte. 0 (or less): unlimited.
func (p *Proxy) SetRate(bytesPerSecond int) {
	p.update(func(c *config) { c.rate = max(bytesPerSecond, 0) })
}

// SetHandshake makes every connection accepted from now on send no byte,
// either way, before d after it was accepted (each chunk then takes its
// delay, see SetDelay): the round trip of a TCP handshake, which a
// client's connect does not wait for here (the proxy's listener completes
// it at once), so that its first bytes go as if the connection had taken
// d to open. Negative values count as 0.
func (p *Proxy) SetHandshake(d time.Duration) {
	p.update(func(c *config) { c.handshake = max(d, 0) })
}

// update changes the settings in force for the chunks read after it.
func (p *Proxy) update(f func(*config)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := *p.cfg.Load()
	f(&c)
	p.cfg.Store(&c)
}

// Reset resets every open connection now, on both sides (a TCP RST to the
// client and to the target, the bytes held dropped), and for d resets
// every connection as soon as it is accepted or carries data, so that a
// client that dials again within d fails; connections made after d work.
// A Reset within an earlier one's d extends it, never shortens it.
func (p *Proxy) Reset(d time.Duration) {
	extend(&p.resetUntil, time.Now().Add(max(d, 0)))
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.end(reset)
	}
}

// CutReplies, for d from now, resets a connection as soon as its target
// sends it anything, on both sides, the bytes dropped: what the client
// sent went through (the target applied it), and its answer is lost, as a
// link that breaks while the reply is on its way loses it. Connections
// carry requests as before; the first reply after d goes through. A call
// within an earlier one's d extends it, never shortens it.
func (p *Proxy) CutReplies(d time.Duration) {
	extend(&p.cutUntil, time.Now().Add(max(d, 0)))
}

// Stall forwards no byte, in either direction of any connection, for d
// from now: the bytes read meanwhile are held, in order, and delivered
// once it is over (each no earlier than it was due). A chunk whose write
// had already begun when Stall was called still goes. A Stall within an
// earlier one extends it, never shortens it.
func (p *Proxy) Stall(d time.Duration) {
	extend(&p.stallUntil, time.Now().Add(max(d, 0)))
}

// extend moves the time held in v (Unix ns) to t, when t is later.
func extend(v *atomic.Int64, t time.Time) {
	ns := t.UnixNano()
	for {
		old := v.Load()
		if old >= ns || v.CompareAndSwap(old, ns) {
			return
		}
	}
}

// Counts are a proxy's connection counters.
type Counts struct {
	// Accepted is how many client connections the proxy accepted.
	Accepted int64
	// Reset is how many of them it reset (Reset, at once or within its
	// d, and CutReplies); a reset passed on from one side to the other is
	// not counted.
	Reset int64
	// Open is how many are open now.
	Open int
}

// Counts returns the proxy's connection counters.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	open := len(p.links)
	p.mu.Unlock()
	return Counts{Accepted: p.accepted.Load(), Reset: p.resets.Load(), Open: open}
}

// resetting reports whether connections are to be reset at now.
func (p *Proxy) resetting(now time.Time) bool { return now.UnixNano() < p.resetUntil.Load() }

// accept accepts connections until Close, each served by serve.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			// A temporary failure (out of file descriptors): try again.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c, time.Now())
	}
}

// serve forwards the client connection c, accepted at at, to a new
// upstream connection.
func (p *Proxy) serve(c net.Conn, at time.Time) {
	defer p.wg.Done()
	if p.resetting(at) {
		p.resets.Add(1)
		abort(c)
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	s, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	l := &link{p: p, conns: [2]net.Conn{c, s}, open: at.Add(p.cfg.Load().handshake), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	if p.resetting(time.Now()) { // a Reset came while we dialed
		l.end(reset)
	}
	for _, dir := range []int{up, down} {
		q := make(chan chunk, queueLen)
		p.wg.Add(2)
		go l.read(dir, q)
		go l.write(dir, q)
	}
}

// queueLen is how many chunks a direction holds before it stops reading.
const queueLen = 64

// chunk is bytes read, due for delivery at due.
type chunk struct {
	data []byte
	due  time.Time
}

// link is one proxied connection: the client's and the upstream one.
type link struct {
	p     *Proxy
	conns [2]net.Conn // [up]: read from the client; [down]: from the target
	open  time.Time   // nothing is sent before (SetHandshake)
	done  chan struct{}
	once  sync.Once
	ended atomic.Int32 // directions whose source ended and were delivered
}

// How a link ends.
type ending int

const (
	closed ending = iota // both sides closed
	reset                // both sides reset by Reset (counted)
	passOn               // both sides reset: one side reset the link
)

// end ends the link once: closes (or resets) both sides and drops what is
// held.
func (l *link) end(how ending) {
	l.once.Do(func() {
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
		if how == reset {
			l.p.resets.Add(1)
		}
		for _, c := range l.conns {
			if how == closed {
				c.Close()
			} else {
				abort(c)
			}
		}
		close(l.done)
	})
}

// abort closes c with a TCP RST (SO_LINGER 0).
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// read reads direction dir's source into q, each chunk stamped with when
// it is due, until the source ends (q is then closed: the writer delivers
// what is held and passes the end on) or the link ends.
func (l *link) read(dir int, q chan<- chunk) {
	defer l.p.wg.Done()
	defer close(q)
	src := l.conns[dir]
	buf := make([]byte, 32<<10)
	var last, free time.Time // the last chunk's due; when the link is free to send (SetRate)
	for {
		cfg := l.p.cfg.Load()
		size := len(buf)
		if cfg.rate > 0 {
			// About 20ms of the link's bytes a chunk, so that a slow link
			// trickles rather than delivers in lumps.
			size = min(size, max(cfg.rate/50, 1))
		}
		n, err := src.Read(buf[:size])
		if n > 0 {
			now := time.Now()
			cfg := l.p.cfg.Load() // the settings in force when the bytes came
			if l.p.resetting(now) || dir == down && now.UnixNano() < l.p.cutUntil.Load() {
				l.end(reset)
				return
			}
			// Sent once the connection is open, and, on a slow link,
			// once the bytes before it are; then on its way for the delay.
			sent := later(now, l.open)
			if cfg.rate > 0 {
				sent = later(sent, free).Add(time.Duration(n) * time.Second / time.Duration(cfg.rate))
				free = sent
			}
			due := sent.Add(cfg.delay[dir])
			if j := cfg.jitter[dir]; j > 0 {
				due = due.Add(rand.N(j + 1))
			}
			due = later(due, last)
			last = due
			select {
			case q <- chunk{data: append([]byte(nil), buf[:n]...), due: due}:
			case <-l.done:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				// Reset by its peer (or ended by the link): pass it on.
				l.end(passOn)
			}
			return
		}
	}
}

// write delivers direction dir's chunks from q to its destination, each
// once due and no stall holds it, in order; once q is closed and
// drained, it half-closes the destination, and the second direction to
// get there closes the link.
func (l *link) write(dir int, q <-chan chunk) {
	defer l.p.wg.Done()
	dst := l.conns[1-dir]
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-q:
		case <-l.done:
			return
		}
		if !ok {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			if l.ended.Add(1) == 2 {
				l.end(closed)
			}
			return
		}
		for {
			wait := time.Until(later(c.due, time.Unix(0, l.p.stallUntil.Load())))
			if wait <= 0 {
				break
			}
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		if _, err := dst.Write(c.data); err != nil {
			l.end(passOn)
			return
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
