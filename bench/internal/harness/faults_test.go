package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

// TestSmokeFar runs far-h1 shrunk to 2 processes and one joining, 4
// goroutines each, for 3s, through the whole harness: the API over TLS
// behind the proxy, the replicas' traces, the admissions read from Redis
// and matched to the calls, and the figures. It checks the plumbing, not
// the targets (windows over the limit at the API are what the scenario
// measures).
func TestSmokeFar(t *testing.T) {
	rep, row := smoke(t, "far-h1", nil, func(sc *Scenario) {
		sc.Procs, sc.Goroutines, sc.Duration, sc.JoinAt, sc.Warmup = 3, 4, 3*time.Second, time.Second, time.Second
	})
	f := row.Far
	if f == nil {
		t.Fatalf("row %+v, want the far figures", row)
	}
	switch {
	case row.Admitted == 0 || f.Calls == 0:
		t.Fatalf("%d admitted, %d calls traced", row.Admitted, f.Calls)
	case row.Errors != 0 || row.APIErrors != 0:
		t.Fatalf("%d wait errors, %d API errors: %s", row.Errors, row.APIErrors, row.FirstError)
	case f.Accepted+f.Refused != row.APICalls || f.Protos["HTTP/1.1"] != row.APICalls:
		t.Errorf("%d calls at the API: %d accepted, %d refused, by protocol %v", row.APICalls, f.Accepted, f.Refused, f.Protos)
	case f.Admissions == 0 || f.AdmissionsMax == 0 || f.Matched == 0 || f.Matched > f.Calls:
		t.Errorf("admissions read from Redis: %d (max %d in a window), %d of %d calls matched", f.Admissions, f.AdmissionsMax, f.Matched, f.Calls)
	case f.New.Calls == 0 || f.New.GotConnScore == nil || f.New.WroteScore == nil || f.Dial == nil || f.Dial.Min <= 0:
		t.Errorf("calls on new connections: %+v, dial %+v", f.New, f.Dial)
	case f.UtilRun <= 0 || row.Utilization == nil || *row.Utilization != f.UtilAfter:
		t.Errorf("utilization %v over the run, %v after two windows, row %v", f.UtilRun, f.UtilAfter, row.Utilization)
	case row.Attrib == nil || row.Attrib.Scored == 0:
		t.Errorf("attribution: %+v", row.Attrib)
	}
	// The joining process started at JoinAt, cold.
	joiner := row.PerProcPerInterval[2]
	if joiner[0] != 0 || f.PerReplica[2].Calls == 0 || f.PerReplica[2].NewConns == 0 {
		t.Errorf("the joining process: calls by interval %v, %+v", joiner, f.PerReplica[2])
	}
	checkStats(t, row, 3)
	md := rep.Markdown()
	for _, want := range []string{"| far | impl |", "| far-h1 | throttler | new |", "far-h1/throttler, replica 2: Admitted="} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestSmokeRedisReset runs redis-reset shrunk to 2 processes x 10
// goroutines on 20 per 1s for 2.5s, resets every 500ms: each replica's
// Redis link goes through its own proxy, which resets connections, and
// the Wait errors, shares and proxy counts are filled in.
func TestSmokeRedisReset(t *testing.T) {
	rep, row := smoke(t, "redis-reset", []string{"throttler"}, func(sc *Scenario) {
		sc.Procs, sc.Goroutines, sc.Limit, sc.Duration, sc.Warmup = 2, 10, 20, 2500*time.Millisecond, 500*time.Millisecond
		f := *sc.Fault
		f.First, f.Every = 500*time.Millisecond, 500*time.Millisecond
		sc.Fault = &f
	})
	f := row.Fault
	if f == nil {
		t.Fatalf("row %+v, want the fault figures", row)
	}
	var msgs int64
	for _, m := range f.Messages {
		msgs += m.N
	}
	switch {
	case row.Admitted == 0 || row.APICalls == 0:
		t.Fatalf("%d admitted, %d calls at the API", row.Admitted, row.APICalls)
	case f.WaitErrors != row.Errors || f.Deadline+f.RedisTimeout+f.Other != f.WaitErrors || msgs != f.WaitErrors:
		t.Errorf("%d Wait errors (row: %d): %d deadline, %d timeout, %d other, %d by message", f.WaitErrors, row.Errors, f.Deadline, f.RedisTimeout, f.Other, msgs)
	case len(f.Proxies) != 2 || f.Proxies[0].Accepted == 0 || f.Proxies[0].Reset == 0 || f.Proxies[1].Reset == 0:
		t.Errorf("proxies: %+v, want both used and reset", f.Proxies)
	case len(f.Shares) != 2 || f.EqualShare != 0.5 || f.Shares[0]+f.Shares[1] < 0.999:
		t.Errorf("shares %v, equal share %v", f.Shares, f.EqualShare)
	}
	checkStats(t, row, 2)
	if md := rep.Markdown(); !strings.Contains(md, "| redis-reset | throttler | ") || !strings.Contains(md, "| redis faults | impl |") {
		t.Errorf("no redis faults table in:\n%s", md)
	}
}

// checkStats checks that row holds each of its procs replicas' Stats.
func checkStats(t *testing.T, row Row, procs int) {
	t.Helper()
	if len(row.Stats) != procs {
		t.Fatalf("%d replicas' Stats, want %d", len(row.Stats), procs)
	}
	for i, raw := range row.Stats {
		if line := statsLine(raw); !strings.Contains(line, "Admitted=") || !strings.Contains(line, "RoundTrips=") {
			t.Errorf("replica %d's Stats: %s", i, line)
		}
	}
}

func TestStatsLine(t *testing.T) {
	st := throttler.Stats{Admitted: 12, Waited: 1500 * time.Millisecond, LimitNow: 20, Redis: throttler.RedisStats{ClockError: 80 * time.Microsecond}}
	st.Rejected[0] = 3
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	got := statsLine(raw)
	for _, want := range []string{"Admitted=12 ", "Waited=1.5s ", "Rejected=[3 ", "LimitNow=20 ", "Redis.ClockError=80µs"} {
		if !strings.Contains(got, want) {
			t.Errorf("statsLine = %q, lacks %q", got, want)
		}
	}
	if strings.Contains(got, "Failed=") || strings.Contains(got, "PausedUntil") {
		t.Errorf("statsLine = %q, has zero fields", got)
	}
	if got := statsLine(json.RawMessage(`{}`)); got != "all zero" {
		t.Errorf("statsLine of zero Stats = %q", got)
	}
}

// matchScores pairs each replica's calls with its own Throttler's
// admissions, nearest first: a call with the score its wait returned at,
// or, when that one went back, with the one it was written at; admissions
// given back, or that no call of the replica could have had, take no
// part.
func TestMatchScores(t *testing.T) {
	ms := func(v int64) int64 { return v * 1000 }                    // ms as µs (scores)
	at := func(v int64) int64 { return v * int64(time.Millisecond) } // ms as ns (traces)
	adm := []Admission{
		{Prefix: "aa", Score: ms(100)}, {Prefix: "bb", Score: ms(100)}, {Prefix: "aa", Score: ms(150)},
		{Prefix: "aa", Score: ms(200), GivenBack: true}, {Prefix: "aa", Score: ms(210)},
		{Prefix: "bb", Score: ms(300)}, {Prefix: "aa", Score: ms(900)},
		// a4's first slot, 500, went back at its connection; it was
		// written on its second, 590, next to a5's slot, 520.
		{Prefix: "aa", Score: ms(500), GivenBack: true}, {Prefix: "aa", Score: ms(520)}, {Prefix: "aa", Score: ms(590)},
	}
	calls := map[int][]handoff{
		0: {{"b1", at(101), at(102)}, {"b2", at(302), at(303)}},
		// a1 dialed: written 85ms after its slot, past a2's.
		1: {{"a2", at(151), at(152)}, {"a1", at(100), at(185)}, {"a3", at(215), at(216)}, {"a4", at(501), at(591)}, {"a5", at(521), at(522)},
			{"a6", at(700), 0}},
	}
	scores, prefixes := matchScores(calls, adm, 75*time.Millisecond, 10*time.Millisecond)
	want := map[string]int64{"a1": ms(100), "a2": ms(150), "a3": ms(210), "a4": ms(590), "a5": ms(520), "b1": ms(100), "b2": ms(300)}
	if fmt.Sprint(scores) != fmt.Sprint(want) {
		t.Errorf("scores = %v, want %v", scores, want)
	}
	if prefixes[0] != "bb" || prefixes[1] != "aa" {
		t.Errorf("prefixes = %v", prefixes)
	}
}

func TestErrorKind(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("wait: %w", errors.Join(throttler.ErrRedis, timeout)), errRedisTimeout},
		{redis.ErrPoolTimeout, errRedisTimeout},
		{fmt.Errorf("slot past the deadline: %w", context.DeadlineExceeded), errDeadline},
		{fmt.Errorf("%w: no answer within the Redis timeout: %w", throttler.ErrRedis, context.DeadlineExceeded), errRedisTimeout},
		{fmt.Errorf("%w: %w", throttler.ErrRedis, reset), errOther},
		{errors.New("EOF"), errOther},
	} {
		if got := errorKind(c.err); got != c.want {
			t.Errorf("errorKind(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	var l goroutineLog
	l.sortError(fmt.Errorf("read tcp 127.0.0.1:4242->127.0.0.1:6379: %w", syscall.ECONNRESET))
	l.sortError(fmt.Errorf("read tcp 127.0.0.1:5151->127.0.0.1:6379: %w", syscall.ECONNRESET))
	l.sortError(fmt.Errorf("next slot at 2026-11-27T23:24:10.016056614Z is after the context deadline 2026-11-27T23:24:09.9246Z: %w", context.DeadlineExceeded))
	want := map[[2]string]int64{
		{"read tcp ADDR->ADDR: connection reset by peer", errOther}:                                      2,
		{"next slot at TIME is after the context deadline TIME: context deadline exceeded", errDeadline}: 1,
	}
	if fmt.Sprint(l.errMsgs) != fmt.Sprint(want) {
		t.Errorf("messages by kind: %v, want %v", l.errMsgs, want)
	}
}
