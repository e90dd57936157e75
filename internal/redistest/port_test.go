package redistest

import (
	"errors"
	"net"
	"os/exec"
	"strconv"
	"testing"
)

// TestLaunchReportsTakenPort checks the detection behind startLocal's retry:
// a server whose port, or cluster bus port, is taken fails with errPortTaken.
func TestLaunchReportsTakenPort(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server not found on PATH", "install redis-server")
	}
	for _, cluster := range []bool{false, true} {
		t.Run("cluster="+strconv.FormatBool(cluster), func(t *testing.T) {
			port, err := freePort(cluster)
			if err != nil {
				t.Fatal(err)
			}
			taken := port
			if cluster {
				taken += 10000
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)))
			if err != nil {
				t.Skipf("port %d got taken meanwhile: %v", taken, err)
			}
			defer l.Close()

			s := startLocal(t, bin, cluster) // a running server, for its settings
			s.Kill(t)
			s.opts.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			err = s.launch()
			if !errors.Is(err, errPortTaken) {
				s.stop()
				t.Fatalf("launch with port %d taken: %v, want errPortTaken\n%s", taken, err, s.logTail())
			}
		})
	}
}
