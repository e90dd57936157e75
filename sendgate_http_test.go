package throttler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/fakeapi"
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
				var reslotted uint64
				for _, th := range ths {
					waitIdle(t, th)
					reslotted += th.Stats().Reslotted
				}
				st := api.Stats()
				if most := fakeapi.MaxInWindow(api.Arrivals(), time.Second); most > limit || st.Rejected > 0 {
					t.Fatalf("the API saw %d calls in a window of %d, and refused %d", most, limit, st.Rejected)
				}
				if reslotted == 0 {
					t.Fatalf("no call took a new slot at its connection: the test did not try what it is for")
				}
				t.Logf("%d calls accepted, %d reslotted", st.Accepted, reslotted)
			})
		})
	}
}
