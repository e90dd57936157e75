package throttler

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/fakeapi"
	"github.com/go-throttler/throttler/internal/redistest"
)

// slowHandshakes is a listener whose connections read nothing for delay
// after they are accepted: each new connection's TLS handshake takes that
// much longer, as one to an API far away does, while a connection kept
// alive answers at once.
type slowHandshakes struct {
	net.Listener
	delay time.Duration
}

func (l slowHandshakes) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowFirstRead{Conn: c, delay: l.delay}, nil
}

type slowFirstRead struct {
	net.Conn
	delay time.Duration
	once  sync.Once
}

func (c *slowFirstRead) Read(p []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.delay) })
	return c.Conn.Read(p)
}

// Calls admitted on time by every replica reach a strict API within its
// limit though new connections take 300ms to set up (TLS with a slow
// handshake) and the replicas' transports keep Go's default two idle
// connections per host, so that bursts keep dialing: the Transport holds
// each request at its connection, and one that came too late takes a new
// slot. Over HTTP/1.1 and HTTP/2, on every backend. The buffer is 200ms,
// so that a machine loaded by the race detector and other tests has 100ms
// to write a request once its connection came, and a new connection is
// still three times as late as that.
func TestTransportColdConnectionsAtTheAPI(t *testing.T) {
	redistest.Long(t)
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", h2), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, dial dialer, key string) {
				const limit, replicas, goroutines = 20, 3, 10
				api := fakeapi.New(limit, time.Second)
				srv := httptest.NewUnstartedServer(api)
				srv.Listener = slowHandshakes{Listener: srv.Listener, delay: 300 * time.Millisecond}
				srv.EnableHTTP2 = h2
				srv.StartTLS()
				defer srv.Close()

				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
				defer cancel()
				var wg sync.WaitGroup
				ths := make([]*Throttler, replicas)
				for r := range replicas {
					ths[r] = mustNew(t, dial(), key, limit, time.Second, WithBuffer(200*time.Millisecond))
					base := srv.Client().Transport.(*http.Transport).Clone() // MaxIdleConnsPerHost: Go's default, 2
					defer base.CloseIdleConnections()
					client := &http.Client{Transport: ths[r].RoundTripper(base)}
					for range goroutines {
						wg.Go(func() {
							for ctx.Err() == nil {
								req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
								req.Header.Set(fakeapi.ReplicaHeader, fmt.Sprint(r))
								resp, err := client.Do(req)
								if err != nil {
									if !errors.Is(err, context.DeadlineExceeded) {
										t.Errorf("replica %d: %v", r, err)
									}
									return
								}
								io.Copy(io.Discard, resp.Body)
								resp.Body.Close()
							}
						})
					}
				}
				wg.Wait()
				var reslotted, late uint64
				for _, th := range ths {
					waitIdle(t, th)
					reslotted += th.Stats().Sends.Reslotted
					late += th.Stats().Sends.SentLate
				}
				st := api.Stats()
				// A refusal the library counted a late send for passes, and
				// is logged: under the race detector on a loaded machine,
				// an HTTP/2 stream is at times written more than the
				// allowance (100ms) after its connection came, past the
				// gate; the library cannot hold the scheduler to its slot,
				// but tells (Stats.Sends.SentLate).
				if most := fakeapi.MaxInWindow(api.Arrivals(), time.Second); most > limit || uint64(st.Rejected) > late {
					var at []string
					for _, r := range api.Rejections() {
						at = append(at, fmt.Sprintf("%s (replica %s)", r.At.Sub(start).Round(time.Millisecond), r.Replica))
					}
					t.Fatalf("the API saw %d calls in a window of %d, and refused %d (%d sends late by the library's count; refused at %v after the start)", most, limit, st.Rejected, late, at)
				}
				if reslotted == 0 {
					t.Fatalf("no call took a new slot at its connection: the test did not try what it is for")
				}
				t.Logf("%d calls accepted, %d reslotted, %d written late (%d refused)", st.Accepted, reslotted, late, st.Rejected)
			})
		})
	}
}

// A request net/http writes twice (its first connection, reused, closed by
// the server once the request was read, without an answer; net/http then
// writes an idempotent request again on a new connection) takes a slot of
// its own for the second write: the server read both, and every window of
// its arrivals, the unanswered ones included, holds the limit. On every
// backend.
func TestTransportSecondWriteTakesASlot(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const limit, interval = 1, 300 * time.Millisecond
		var conns sync.WaitGroup
		defer conns.Wait()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var mu sync.Mutex
		var arrivals []int64 // µs, every request the server read
		conns.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				conns.Go(func() {
					defer c.Close()
					r := bufio.NewReader(c)
					for n := 1; ; n++ {
						req, err := http.ReadRequest(r)
						if err != nil {
							return
						}
						mu.Lock()
						arrivals = append(arrivals, time.Now().UnixMicro())
						mu.Unlock()
						io.Copy(io.Discard, req.Body)
						if n == 2 {
							return // the second request on a connection: read, never answered
						}
						if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
							return
						}
					}
				})
			}
		})
		th := mustNew(t, dial(), key, limit, interval, WithBuffer(40*time.Millisecond))
		client := &http.Client{Transport: th.RoundTripper(&http.Transport{})}
		defer client.CloseIdleConnections()
		for range 3 {
			resp, err := client.Get("http://" + ln.Addr().String() + "/")
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		s := th.Stats()
		mu.Lock()
		got := slices.Clone(arrivals)
		mu.Unlock()
		if len(got) < 4 {
			t.Fatalf("the server read %d requests for 3 calls: no request was written twice", len(got))
		}
		// Judged on the local clock, which the server shares.
		if m := core.MaxInWindow(got, interval.Microseconds()); m > limit {
			t.Fatalf("the server read %d requests within %s of each other (arrivals %v), limit %d", m, interval, got, limit)
		}
		if s.Sends.Reslotted == 0 || s.Sends.SentLate != 0 {
			t.Fatalf("%d sends reslotted, %d late: want the second writes to take slots of their own", s.Sends.Reslotted, s.Sends.SentLate)
		}
	})
}
