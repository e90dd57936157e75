package sim

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// respConn is a raw RESP client over one of the network's connections.
type respConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialResp(t *testing.T, n *Network, replica, gen int) *respConn {
	t.Helper()
	c, err := n.Dial(replica, gen)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	return &respConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (rc *respConn) send(args ...string) {
	rc.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// reply reads one reply, flattened to its strings and numbers.
func (rc *respConn) reply() []string {
	rc.t.Helper()
	line, err := rc.r.ReadString('\n')
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch line[0] {
	case '*', '~', '>', '%': // arrays, sets, pushes, maps (RESP3, after HELLO 3)
		k, _ := strconv.Atoi(line[1:])
		if line[0] == '%' {
			k *= 2
		}
		var out []string
		for range k {
			out = append(out, rc.reply()...)
		}
		return out
	case '$':
		size, _ := strconv.Atoi(line[1:])
		b := make([]byte, size+2)
		if _, err := io.ReadFull(rc.r, b); err != nil {
			rc.t.Fatalf("read: %v", err)
		}
		return []string{string(b[:size])}
	default:
		return []string{line[1:]}
	}
}

// timeTrip sends TIME and returns how long after sending the server read
// its clock (to its microsecond: up to 1µs early), and how long the round
// trip took.
func (rc *respConn) timeTrip() (server, rtt time.Duration) {
	rc.t.Helper()
	sent := time.Now()
	rc.send("TIME")
	r := rc.reply()
	recv := time.Now()
	sec, _ := strconv.ParseInt(r[0], 10, 64)
	usec, _ := strconv.ParseInt(r[1], 10, 64)
	at := time.Unix(sec, usec*1000)
	return at.Sub(sent), recv.Sub(sent)
}

func TestNetworkDelaySides(t *testing.T) {
	for _, tc := range []struct {
		name   string
		arm    func(n *Network)
		server time.Duration // when the server reads its clock, after the send
	}{
		{"replies", func(n *Network) { n.DelayReplies(0, time.Minute, 80*time.Millisecond) }, 0},
		{"requests", func(n *Network) { n.DelayRequests(0, time.Minute, 80*time.Millisecond, false) }, 80 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := NewStore()
				defer store.Close()
				n := NewNetwork(store, 1)
				tc.arm(n)
				rc := dialResp(t, n, 0, 0)
				defer rc.c.Close()
				server, rtt := rc.timeTrip()
				if rtt != 80*time.Millisecond || !near(server, tc.server) {
					t.Errorf("round trip %s, server read its clock %s after the send; want 80ms, %s", rtt, server, tc.server)
				}
				time.Sleep(time.Minute)
				if server, rtt := rc.timeTrip(); rtt != 0 || !near(server, 0) {
					t.Errorf("after the span: round trip %s, server %s; want 0, 0", rtt, server)
				}
			})
		})
	}
}

// near reports whether a TIME reading d is d0, to its microsecond.
func near(d, d0 time.Duration) bool { return d <= d0 && d > d0-time.Microsecond }

// TestNetworkDelayedRequestsInOrder: requests held by delays drawn per
// round trip still reach the server in the order they were written.
func TestNetworkDelayedRequestsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := NewStore()
		defer store.Close()
		n := NewNetwork(store, 1)
		n.Seed(7)
		n.DelayRequests(0, time.Minute, 100*time.Millisecond, true)
		rc := dialResp(t, n, 0, 0)
		defer rc.c.Close()
		start := time.Now()
		const k = 30
		for i := range k {
			rc.send("RPUSH", "l", strconv.Itoa(i))
			time.Sleep(time.Millisecond)
		}
		rc.send("LRANGE", "l", "0", "-1")
		for range k {
			rc.reply()
		}
		got := rc.reply()
		for i, v := range got {
			if v != strconv.Itoa(i) {
				t.Fatalf("applied out of order: %v", got)
			}
		}
		if len(got) != k {
			t.Fatalf("applied %d of %d", len(got), k)
		}
		if el := time.Since(start); el < 40*time.Millisecond || el > 130*time.Millisecond {
			t.Errorf("took %s: delays drawn up to 100ms", el)
		}
	})
}

// TestNetworkLoad: under load each round trip is late on one side only, by
// up to the load's delay, and both sides come up.
func TestNetworkLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := NewStore()
		defer store.Close()
		n := NewNetwork(store, 2)
		n.Seed(3)
		n.Load(0, time.Minute, 50*time.Millisecond)
		n.JitterReplies(1, time.Minute, 50*time.Millisecond)
		rc := dialResp(t, n, 0, 0)
		defer rc.c.Close()
		early, late := 0, 0
		for range 200 {
			server, rtt := rc.timeTrip()
			if rtt > 50*time.Millisecond {
				t.Fatalf("round trip %s > 50ms", rtt)
			}
			switch {
			case rtt == 0:
			case near(server, 0):
				early++ // the reply was late
			case near(server, rtt):
				late++ // the request was
			default:
				t.Fatalf("late on both sides: server read its clock %s into a round trip of %s", server, rtt)
			}
		}
		if early < 50 || late < 50 {
			t.Errorf("replies late %d times, requests %d, of 200", early, late)
		}
		other := dialResp(t, n, 1, 0)
		defer other.c.Close()
		var shortest, longest time.Duration = time.Hour, 0
		for range 50 {
			server, rtt := other.timeTrip()
			if !near(server, 0) {
				t.Fatalf("a jittered reply delay held a request: %s", server)
			}
			shortest, longest = min(shortest, rtt), max(longest, rtt)
		}
		if shortest > 10*time.Millisecond || longest < 40*time.Millisecond || longest > 50*time.Millisecond {
			t.Errorf("jittered replies took %s to %s, want from about 0 to 50ms", shortest, longest)
		}
	})
}

// TestNetworkRestart: a restarted replica's old process can no longer dial
// or write; its new one can, even after a kill.
func TestNetworkRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := NewStore()
		defer store.Close()
		n := NewNetwork(store, 1)
		old := dialResp(t, n, 0, 0)
		gen := n.Restart(0)
		if _, err := old.c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err == nil {
			t.Errorf("the old process wrote on a connection its restart closed")
		}
		if _, err := n.Dial(0, 0); err == nil {
			t.Errorf("the old process dialled after the restart")
		}
		rc := dialResp(t, n, 0, gen)
		rc.send("PING")
		if r := rc.reply(); r[0] != "PONG" {
			t.Errorf("PING: %v", r)
		}
		n.Kill(0)
		if _, err := n.Dial(0, gen); err == nil {
			t.Errorf("a killed process dialled")
		}
		next := dialResp(t, n, 0, n.Restart(0))
		next.send("PING")
		if r := next.reply(); r[0] != "PONG" {
			t.Errorf("PING: %v", r)
		}
		next.c.Close()
	})
}

// TestNetworkSparesLockedHandshake: a connection's handshake, which
// go-redis may hold a mutex across, takes no virtual time, whatever holds
// the other requests (see lockedHandshake).
func TestNetworkSparesLockedHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := NewStore()
		defer store.Close()
		n := NewNetwork(store, 1)
		n.SetLatency(time.Millisecond)
		n.Load(0, time.Minute, 50*time.Millisecond)
		n.JitterReplies(0, time.Minute, 50*time.Millisecond)
		n.DelayRequests(0, time.Minute, 50*time.Millisecond, false)
		n.DelayReplies(0, time.Minute, 50*time.Millisecond)
		n.Stall(time.Minute)
		rc := dialResp(t, n, 0, 0)
		defer rc.c.Close()
		for range 20 {
			for _, req := range [][]string{{"hello", "3"}, {"client", "maint_notifications", "on", "moving-endpoint-type", "none"}} {
				start := time.Now()
				rc.send(req...)
				rc.reply()
				if d := time.Since(start); d != 0 {
					t.Fatalf("%s took %s", req[0], d)
				}
			}
		}
		start := time.Now()
		rc.send("TIME")
		rc.reply()
		if d := time.Since(start); d < time.Minute {
			t.Errorf("a command after the handshake took %s, through a stall of a minute", d)
		}
		if !lockedHandshake([]byte("*3\r\n$6\r\nCLIENT\r\n$19\r\nMAINT_NOTIFICATIONS\r\n$2\r\non\r\n")) ||
			!lockedHandshake([]byte("*2\r\n$5\r\nhello\r\n$1\r\n3\r\n")) || lockedHandshake([]byte("*1\r\n$4\r\nTIME\r\n")) ||
			lockedHandshake([]byte("*2\r\n$3\r\nGET\r\n$5\r\nhello\r\n")) {
			t.Errorf("lockedHandshake tells the wrong requests")
		}
	})
}
