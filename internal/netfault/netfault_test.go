package netfault

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// upstream is a test server: it serves each connection with handle, and
// records the error each connection's handler ended with.
type upstream struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// echo copies what it reads back, until its client goes.
func echo(c net.Conn) error {
	_, err := io.Copy(c, c)
	return err
}

func startUpstream(t *testing.T, handle func(net.Conn) error) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ln: ln}
	u.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Go(func() {
				defer c.Close()
				err := handle(c)
				u.mu.Lock()
				u.errs = append(u.errs, err)
				u.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		u.wg.Wait()
	})
	return u
}

// errors returns the errors the handlers ended with so far.
func (u *upstream) errors() []error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]error(nil), u.errs...)
}

func listen(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg on c and reads as many bytes back, and returns how
// long that took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	began := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("read %q, want %q", got, msg)
	}
	return time.Since(began)
}

// eventually polls cond until it holds, or fails after 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
	}
}

func TestForwards(t *testing.T) {
	u := startUpstream(t, echo)
	p := listen(t, u.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("hello"))
	if got := p.Counts(); got != (Counts{Accepted: 1, Open: 1}) {
		t.Errorf("Counts = %+v, want one accepted and open", got)
	}
	c.Close()
	eventually(t, "the link closed after its client", func() bool { return p.Counts().Open == 0 })
	if errs := u.errors(); len(errs) != 1 || errs[0] != nil {
		t.Errorf("upstream saw %v, want one clean end", errs)
	}
}

func TestDelay(t *testing.T) {
	u := startUpstream(t, echo)
	p := listen(t, u.ln.Addr().String())
	c := dial(t, p)
	p.SetDelay(60*time.Millisecond, 40*time.Millisecond)
	if took := roundTrip(t, c, []byte("x")); took < 100*time.Millisecond {
		t.Errorf("round trip with 60ms up and 40ms down took %s", took)
	}
	p.SetDelay(0, 80*time.Millisecond)
	if took := roundTrip(t, c, []byte("y")); took < 80*time.Millisecond {
		t.Errorf("round trip with 80ms down took %s", took)
	}
}

// A chunk never overtakes an earlier one, whatever its jitter.
func TestJitterKeepsOrder(t *testing.T) {
	u := startUpstream(t, echo)
	p := listen(t, u.ln.Addr().String())
	p.SetJitter(5*time.Millisecond, 5*time.Millisecond)
	c := dial(t, p)
	var want bytes.Buffer
	for i := range 200 {
		msg := fmt.Sprintf("%d,", i)
		want.WriteString(msg)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // chunks of different sizes
		}
	}
	got := make([]byte, want.Len())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("bytes out of order:\n got %s\nwant %s", got, want.Bytes())
	}
}

func TestRate(t *testing.T) {
	u := startUpstream(t, echo)
	p := listen(t, u.ln.Addr().String())
	p.SetRate(40_000)
	c := dial(t, p)
	msg := bytes.Repeat([]byte("0123456789"), 2_000) // 20,000 bytes: 0.5s each way
	if took := roundTrip(t, c, msg); took < 480*time.Millisecond {
		t.Errorf("20,000 bytes at 40,000 B/s echoed in %s", took)
	}
}

func TestHandshake(t *testing.T) {
	u := startUpstream(t, echo)
	p := listen(t, u.ln.Addr().String())
	old := dial(t, p)
	roundTrip(t, old, []byte("warm"))
	p.SetHandshake(50 * time.Millisecond)
	p.SetDelay(10*time.Millisecond, 10*time.Millisecond)
	began := time.Now()
	c := dial(t, p)
	roundTrip(t, c, []byte("x"))
	if took := time.Since(began); took < 70*time.Millisecond {
		t.Errorf("a new connection's first round trip took %s, want at least the 50ms handshake and 10ms each way", took)
	}
	// A connection accepted before the setting pays the delays only.
	roundTrip(t, old, []byte("still"))
}

func TestStall(t *testing.T) {
	u := startUpstream(t, echo)
	p := listen(t, u.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("before"))
	p.Stall(150 * time.Millisecond)
	if took := roundTrip(t, c, []byte("held, not lost")); took < 150*time.Millisecond {
		t.Errorf("a round trip in a 150ms stall took %s", took)
	}
	if got := p.Counts(); got.Reset != 0 || got.Open != 1 {
		t.Errorf("Counts = %+v after a stall", got)
	}
}

func TestReset(t *testing.T) {
	u := startUpstream(t, echo)
	p := listen(t, u.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("before"))
	const d = 300 * time.Millisecond
	began := time.Now()
	p.Reset(d)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read on a reset connection: %v, want ECONNRESET", err)
	}
	eventually(t, "the upstream side reset", func() bool {
		errs := u.errors()
		return len(errs) == 1 && errors.Is(errs[0], syscall.ECONNRESET)
	})

	// Within d, a new connection is reset as it comes (its connect may
	// fail already, on loopback).
	if again, err := net.Dial("tcp", p.Addr()); err == nil {
		_, werr := again.Write([]byte("x"))
		again.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, rerr := again.Read(make([]byte, 1))
		again.Close()
		if time.Since(began) < d && werr == nil && rerr == nil {
			t.Errorf("a connection made within the reset was served")
		}
	}

	time.Sleep(time.Until(began.Add(d + 10*time.Millisecond)))
	roundTrip(t, dial(t, p), []byte("after"))
	if got := p.Counts(); got.Accepted != 3 || got.Reset != 2 || got.Open != 1 {
		t.Errorf("Counts = %+v, want 3 accepted, 2 reset, 1 open", got)
	}
}

// When the target closes, the client gets every byte still held, then
// EOF.
func TestEndPassedOnAfterTheBytes(t *testing.T) {
	u := startUpstream(t, func(c net.Conn) error {
		_, err := c.Write([]byte("bye"))
		return err
	})
	p := listen(t, u.ln.Addr().String())
	p.SetDelay(0, 30*time.Millisecond)
	c := dial(t, p)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Errorf("read %q, %v; want bye, then EOF", got, err)
	}
	c.Close()
	eventually(t, "the link closed", func() bool { return p.Counts().Open == 0 })
}

// Close ends every connection, even one whose bytes a stall holds, and
// waits for every goroutine (TestMain checks that none is left).
func TestClose(t *testing.T) {
	u := startUpstream(t, echo)
	p, err := Listen(u.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	roundTrip(t, conns[0], []byte("x"))
	p.Stall(time.Hour)
	for _, c := range conns {
		if _, err := c.Write([]byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 8)); err == nil {
			t.Errorf("connection %d read %d bytes after Close", i, n)
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("the proxy accepts after Close")
	}
}

// CutReplies lets requests through and loses the replies: the target gets
// what the client sent, and the client's read fails with a reset; once d
// has passed, replies go through again.
func TestCutReplies(t *testing.T) {
	got := make(chan string, 4)
	u := startUpstream(t, func(c net.Conn) error {
		buf := make([]byte, 16)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return err
			}
			got <- string(buf[:n])
			if _, err := c.Write(buf[:n]); err != nil {
				return err
			}
		}
	})
	p := listen(t, u.ln.Addr().String())
	roundTrip(t, dial(t, p), []byte("before"))
	<-got
	const d = 300 * time.Millisecond
	began := time.Now()
	p.CutReplies(d)
	c := dial(t, p)
	if _, err := c.Write([]byte("applied")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read of a reply cut: %v, want ECONNRESET", err)
	}
	select {
	case s := <-got:
		if s != "applied" {
			t.Errorf("the target got %q, want %q", s, "applied")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the target")
	}
	time.Sleep(time.Until(began.Add(d + 10*time.Millisecond)))
	roundTrip(t, dial(t, p), []byte("after"))
	<-got
	if n := p.Counts().Reset; n != 1 {
		t.Errorf("Counts().Reset = %d, want 1", n)
	}
}
