package redistest

import "testing"

// TestRESPValues: the Cutter counts a request's commands and reads on
// until each has its reply, so it must count whole values only.
func TestRESPValues(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"*1\r\n$5\r\nmulti\r\n*2\r\n$4\r\neval\r\n$1\r\nx\r\n*1\r\n$4\r\nexec\r\n", 3},
		{"+OK\r\n+QUEUED\r\n", 2},
		{"+OK\r\n+QUEUED\r\n*1\r\n:4\r\n", 3},
		{"+OK\r\n+QUEUED\r\n*2\r\n:4\r\n", 2},         // the EXEC reply not whole yet
		{"$5\r\nhel", 0},                              // a bulk string cut short
		{"$-1\r\n*-1\r\n_\r\n", 3},                    // nulls
		{"%1\r\n+k\r\n:1\r\n~2\r\n#t\r\n,1.5\r\n", 2}, // RESP3 map and set
		{"|1\r\n+ttl\r\n:3\r\n+OK\r\n", 1},            // an attribute and its value
		{"-ERR x\r\n=7\r\ntxt:abc\r\n", 2},
	} {
		if got := respValues([]byte(tc.in)); got != tc.want {
			t.Errorf("respValues(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
