package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/fakequota"
	"github.com/redis/go-redis/v9"
)

// A trace (-trace file) is what a run did, one JSON object a line, for
// working out afterwards why a call of ours was refused: every answer of
// the API (consumer, arrival, status, what the response stated, the
// request's trace id), every request of ours as its replica sent it (the
// trace id, when it was handed to the connection and when the response
// came back, the counter the response stated), every Redis round trip of
// each replica on the window's key (the members added with their scores,
// the members removed, the shared pause and lowered limit read or
// written, the counts read), and what each replica's Observer heard (a
// pause or a changed limit learned, a call admitted). Times are Unix
// microseconds on this machine's clock, which the embedded miniredis
// shares: a member's score is comparable with them.
//
// Members are hex; the members that are not calls are named ("pause",
// "limit", "limit-end", "marker", "backoff", "backoff-end"). The trace
// only observes: the Throttlers and the Transport are the ones a run
// without it uses, the Transport's Base is wrapped to stamp the trace id
// on a clone of the request.
type tracer struct {
	mu     sync.Mutex
	events []map[string]any
}

func newTracer() *tracer { return &tracer{} }

func us(t time.Time) int64 { return t.UnixMicro() }

func (tc *tracer) add(ev map[string]any) {
	if tc == nil {
		return
	}
	tc.mu.Lock()
	tc.events = append(tc.events, ev)
	tc.mu.Unlock()
}

// write writes the events, then the API's answers, to path.
func (tc *tracer) write(path string, c config, start time.Time, answers []fakequota.Answer) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.Encode(map[string]any{"ev": "config", "style": c.style.String(), "limit": c.limit, "window": c.window.Microseconds(),
		"windows": c.windows, "foreign": c.foreign, "replicas": c.replicas, "goroutines": c.goroutines, "burst": c.burst,
		"secondary": c.secondary, "buffer": c.buffer.Microseconds(), "ahead": c.ahead.Microseconds(), "start": us(start)})
	tc.mu.Lock()
	for _, ev := range tc.events {
		enc.Encode(ev)
	}
	tc.mu.Unlock()
	for _, a := range answers {
		enc.Encode(map[string]any{"ev": "answer", "consumer": a.Consumer, "at": us(a.At), "status": a.Status,
			"secondary": a.Secondary, "remaining": a.Remaining, "foreign": a.Foreign, "ours": a.Ours,
			"reset": a.Reset, "trace": a.Trace})
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// observer records what a replica's Throttler hears.
func (tc *tracer) observer(replica string) throttler.Observer {
	return throttler.Observer{
		Paused: func(until time.Time) {
			tc.add(map[string]any{"ev": "paused", "r": replica, "at": us(time.Now()), "until": us(until)})
		},
		LimitChanged: func(limit int) {
			tc.add(map[string]any{"ev": "limit", "r": replica, "at": us(time.Now()), "limit": limit})
		},
		Admitted: func(n int, waited time.Duration) {
			tc.add(map[string]any{"ev": "admitted", "r": replica, "at": us(time.Now()), "waited": waited.Microseconds()})
		},
	}
}

// tracingRT stamps a trace id on a clone of each request and records its
// round trip.
type tracingRT struct {
	tc      *tracer
	base    http.RoundTripper
	replica string
	seq     atomic.Int64
}

func (rt *tracingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	id := fmt.Sprintf("%s-%d", rt.replica, rt.seq.Add(1))
	out := req.Clone(req.Context())
	out.Header.Set(fakequota.TraceHeader, id)
	sent := time.Now()
	resp, err := rt.base.RoundTrip(out)
	ev := map[string]any{"ev": "send", "r": rt.replica, "id": id, "sent": us(sent), "recv": us(time.Now())}
	if err != nil {
		ev["err"] = err.Error()
	} else {
		ev["status"] = resp.StatusCode
		for _, h := range []string{"X-RateLimit-Remaining", "X-RateLimit-Reset", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"} {
			if v := resp.Header.Get(h); v != "" {
				ev[strings.ToLower(h)] = v
			}
		}
	}
	rt.tc.add(ev)
	return resp, err
}

// redisTrace is a go-redis hook recording a replica's commands on the
// window's key.
type redisTrace struct {
	tc      *tracer
	replica string
	key     string
}

func (h redisTrace) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisTrace) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmd)
		h.record(sent, time.Now(), []redis.Cmder{cmd}, err)
		return err
	}
}

func (h redisTrace) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmds)
		h.record(sent, time.Now(), cmds, err)
		return err
	}
}

var metaNames = map[string]string{
	"\x00pause": "pause", "\x00limit": "limit", "\x00limit-end": "limit-end", "\x00m": "marker",
	"\x00backoff": "backoff", "\x00backoff-end": "backoff-end",
}

func memberName(v any) string {
	s := fmt.Sprint(v)
	if n, ok := metaNames[s]; ok {
		return n
	}
	return hex.EncodeToString([]byte(s))
}

func (h redisTrace) record(sent, recv time.Time, cmds []redis.Cmder, err error) {
	var (
		adds    [][2]any
		rems    []string
		meta    map[string]int64
		counts  [][3]any
		serverT int64
	)
	for _, cmd := range cmds {
		args := cmd.Args()
		if len(args) == 0 {
			continue
		}
		name := strings.ToLower(fmt.Sprint(args[0]))
		if name == "time" {
			if tc, ok := cmd.(*redis.TimeCmd); ok && tc.Err() == nil {
				serverT = us(tc.Val())
			}
			continue
		}
		if len(args) < 2 || fmt.Sprint(args[1]) != h.key {
			continue
		}
		switch name {
		case "zadd":
			i := 2
			for i < len(args) {
				if s, ok := args[i].(string); ok {
					switch strings.ToLower(s) {
					case "lt", "gt", "nx", "xx", "ch", "incr":
						i++
						continue
					}
				}
				break
			}
			for ; i+1 < len(args); i += 2 {
				score, _ := args[i].(float64)
				adds = append(adds, [2]any{memberName(args[i+1]), int64(score)})
			}
		case "zrem":
			for _, m := range args[2:] {
				rems = append(rems, memberName(m))
			}
		case "zmscore":
			if fc, ok := cmd.(*redis.FloatSliceCmd); ok && fc.Err() == nil {
				meta = map[string]int64{}
				for i, v := range fc.Val() {
					if i+2 < len(args) && v != 0 {
						meta[memberName(args[i+2])] = -int64(v)
					}
				}
			}
		case "zcount":
			if ic, ok := cmd.(*redis.IntCmd); ok && len(args) == 4 {
				counts = append(counts, [3]any{fmt.Sprint(args[2]), fmt.Sprint(args[3]), ic.Val()})
			}
		}
	}
	if adds == nil && rems == nil && meta == nil && counts == nil {
		return
	}
	ev := map[string]any{"ev": "redis", "r": h.replica, "sent": us(sent), "recv": us(recv), "n": len(cmds)}
	if adds != nil {
		ev["add"] = adds
	}
	if rems != nil {
		ev["rem"] = rems
	}
	if meta != nil {
		ev["meta"] = meta
	}
	if counts != nil {
		ev["zcount"] = counts
	}
	if serverT != 0 {
		ev["server"] = serverT
	}
	if err != nil {
		ev["err"] = err.Error()
	}
	h.tc.add(ev)
}
