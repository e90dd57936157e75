package throttler

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-throttler/throttler/counters"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
)

// reading is one response's Quota, with when its request was sent and its
// response read, on the local clock, and the score its call was admitted
// at (server µs; 0 = admitted without Redis).
type reading struct {
	q          counters.Quota
	sent, recv time.Time
	scored     int64
}

// follower applies the readings of one Transport for one Throttler, one
// batch at a time: readings that come while a batch is applied wait as
// pending (the newest maxPending), and are applied together next, in one
// round trip, by the same caller.
type follower struct {
	mu      sync.Mutex
	busy    bool
	pending []reading
}

// maxFollowRounds bounds the batches one caller applies for others before
// its response goes back to it, and maxPending the readings one batch
// holds.
const (
	maxFollowRounds = 3
	maxPending      = 16
)

// learn applies what resp says of the API's quota, and returns its verdict
// and whether the API refused the call without counting it (see unread).
func (tr *Transport) learn(t *Throttler, req *http.Request, resp *http.Response, body []byte, sent time.Time, scored int64) (counters.Verdict, bool) {
	// The caller's context may be about to end; the news is for everyone.
	ctx := context.WithoutCancel(req.Context())
	now := t.now()
	c := counters.Default()
	if tr.Counters != nil {
		c = tr.Counters
	}
	q, refused := unread(resp, c.Read(resp, body, now))
	if q.Verdict == counters.Pause {
		if q.Until.IsZero() {
			tr.backOff(ctx, t, q.Backoff)
		} else {
			limit := tr.maxPause()
			if q.Until.Equal(q.Reset) && q.Remaining <= 0 { // until a counter at zero resets
				limit = tr.pauseCap(t)
			}
			t.PauseUntil(ctx, minTime(q.Until, now.Add(limit))) // a failure is logged; the response stands
		}
	}
	// follow when it states a counter and the window counts calls; a
	// pause until a fixed counter at zero resets was written above, once.
	follows := tr.Counters != nil && tr.Cost == nil && !q.Reset.IsZero()
	pausedToReset := q.Verdict == counters.Pause && q.Until.Equal(q.Reset) && q.Remaining <= 0 && !q.Gradual
	if follows && !pausedToReset {
		tr.follow(ctx, req.Context(), t, reading{q: q, sent: sent, recv: now, scored: scored})
	}
	tr.followLimitHeader(ctx, t, resp)
	return q.Verdict, refused
}

// unread gives a refusal that Counters made nothing of its one meaning
// (no verdict, no counter at zero to follow): a 429 is a refusal for quota
// that states no end (back off); a 503 that states none is this call's
// alone (RetryCall). It also reports whether the API refused the call
// without counting it, which settles the call's cost at 0 (see Cost): a
// 429, or any verdict the Counters gave, whatever the status; not a 503
// that states nothing, which says nothing of whether the call counted, so
// it keeps its estimate. This is the one place that decides both.
func unread(resp *http.Response, q counters.Quota) (counters.Quota, bool) {
	if q.Verdict != counters.Proceed || !q.Reset.IsZero() && q.Remaining <= 0 {
		return q, q.Verdict != counters.Proceed || resp.StatusCode == http.StatusTooManyRequests
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		q.Verdict = counters.Pause
		return q, true
	case http.StatusServiceUnavailable:
		q.Verdict = counters.RetryCall
	}
	return q, false
}

func (tr *Transport) maxPause() time.Duration {
	if tr.MaxPause > 0 {
		return tr.MaxPause
	}
	return DefaultMaxPause
}

// pauseCap is the longest pause until a counter at zero resets: MaxPause,
// or t's interval when that is longer (see Transport.MaxPause).
func (tr *Transport) pauseCap(t *Throttler) time.Duration {
	return max(tr.maxPause(), t.Interval())
}

// follow holds every replica to what the API's counter leaves: no call
// before Reset when Remaining is 0, and otherwise a lowered limit (see
// apply). ctx bounds the writes; caller is the request's own context:
// once it has ended, readings other requests left pending are not applied
// on its goroutine.
func (tr *Transport) follow(ctx, caller context.Context, t *Throttler, rd reading) {
	if !rd.q.Reset.After(rd.recv) {
		return // the counter has started afresh: our window rules
	}
	if rd.q.Remaining <= 0 && !rd.q.Gradual {
		// A fixed window at zero: no call before it starts afresh. (A
		// gradual counter at zero frees a call as one ages out: apply
		// holds us to the calls of ours it counts, which age out as
		// theirs do.)
		t.PauseUntil(ctx, minTime(rd.q.Reset, rd.recv.Add(tr.pauseCap(t))))
		return
	}
	if rd.q.Remaining >= t.Limit() && !lowered(t) {
		return // the API leaves at least New's limit, and nothing is lowered: nothing to learn
	}
	v, _ := tr.followers.LoadOrStore(t, &follower{})
	f := v.(*follower)
	f.mu.Lock()
	if len(f.pending) == maxPending {
		f.pending = slices.Delete(f.pending, 0, 1)
	}
	f.pending = append(f.pending, rd)
	if f.busy {
		f.mu.Unlock()
		return
	}
	f.busy = true
	for round := 1; ; round++ {
		batch := f.pending
		f.pending = nil
		f.mu.Unlock()
		tr.apply(ctx, t, batch)
		f.mu.Lock()
		if len(f.pending) == 0 || round == maxFollowRounds || caller.Err() != nil {
			// Past the bound, or once the caller's context has ended
			// (the response is its own, the readings of others are not),
			// the pending readings are dropped: the next response brings
			// a fresher one. The entry goes with the last batch, so that
			// a Throttler a Group evicted is not kept alive by it.
			f.pending, f.busy = nil, false
			tr.followers.CompareAndDelete(t, f)
			f.mu.Unlock()
			return
		}
	}
}

// apply lowers the shared limit so that, of the calls scored after a
// reading's request was sent, at most Remaining go before Reset: the
// limit becomes the calls of ours the API already counted (read from
// Redis) plus Remaining, until Reset, in one step for the batch (see
// redisstore.CounterScript).
//
// Why that bound holds: every window of ours that holds a call scored
// before Reset also holds the calls of ours since the start of the API's
// window (Reset minus the interval, for a fixed window), when Reset is at
// most a window (interval + buffer) away; a call admitted under the lowered
// limit n finds at most n calls there, so at most n minus those calls are
// new. When Reset is further, the limit becomes Remaining divided by the
// windows before Reset.
//
// Within one reset (within a twentieth of the interval, at most a second)
// the limit only goes down, for a later reading may come from an earlier
// request; a reading with a later reset replaces it, up or down, never
// above New's limit; one with an earlier reset than the one followed is
// stale and ignored. A gradual counter's limit is the least that its
// readings of the last interval imply. A reading that leaves nothing at
// all pauses every replica until its reset.
func (tr *Transport) apply(ctx context.Context, t *Throttler, batch []reading) {
	x := t.rules.Wins[0]
	interval := x.Interval.Microseconds()
	a := core.CountersApply{
		Limit:    x.Limit,
		Gradual:  batch[len(batch)-1].q.Gradual,
		Interval: interval,
		Tol:      min(time.Second, x.Interval/20).Microseconds(),
		MaxFor:   (tr.maxPause() + x.Interval).Microseconds(),
		TTL:      t.rules.TTL().Milliseconds(),
		Channel:  redisstore.NewsChannel(x.Key),
	}
	for _, rd := range batch {
		// The calls of ours the API had counted when it answered: scored
		// since the start of its window, and no later than the moment the
		// request was sent, or its own score if later. A call never goes
		// before its score (see internal/core's margin.go): one scored later went after
		// the request, and one scored earlier went before it, unless it
		// went late. (By the score alone, a request sent late would leave
		// out the calls scored while it was on its way, and a reading
		// taken in a burst would count too few of ours.)
		reset, sent := t.clock.Server(rd.q.Reset), max(rd.scored, t.clock.Server(rd.sent))
		r := core.CountersReading{From: reset - interval, To: sent, Reset: reset, Remaining: rd.q.Remaining, Windows: 1}
		if rd.q.Gradual {
			r.From = sent - interval
		}
		if reset-sent > x.W {
			r.Windows = (reset - sent + x.W - 1) / x.W
			r.From = sent // count nothing: the bound is per window
		}
		a.Readings = append(a.Readings, r)
	}
	rctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
	got, err := t.st.ApplyCounters(rctx, a)
	cancel()
	if err != nil {
		t.stats.redisError(err)
		return
	}
	t.mu.Lock()
	t.newsLocked(core.News{Limit: int64(got.Limit), LimitEnd: got.End, LimitSet: true})
	t.mu.Unlock()
	if got.ZeroUntil > 0 {
		last := batch[len(batch)-1]
		t.PauseUntil(ctx, minTime(t.clock.Local(got.ZeroUntil), last.recv.Add(tr.pauseCap(t))))
	}
}

// backOff pauses every replica after a refusal that states no end: for
// Transport.Backoff, by default asked (the API's own, see
// counters.Quota.Backoff) or else a second, or twice the last back-off
// when the API refuses again within that back-off's length after it
// ended, at most MaxPause. A refusal while a back-off lasts (a call sent
// before it) changes nothing.
func (tr *Transport) backOff(ctx context.Context, t *Throttler, asked time.Duration) {
	d := tr.Backoff
	if d <= 0 {
		d = asked
	}
	t.BackOff(ctx, d, tr.maxPause()) // a failure is logged; the pause holds here
}

// followLimitHeader lowers (or restores) the shared limit to what
// LimitHeader states, when set.
func (tr *Transport) followLimitHeader(ctx context.Context, t *Throttler, resp *http.Response) {
	if tr.LimitHeader == "" {
		return
	}
	n, ok := counters.HeaderInt(resp.Header, tr.LimitHeader)
	if !ok || n == 0 {
		return
	}
	d := tr.LimitFor
	if d <= 0 {
		d = time.Hour
	}
	lowerTo(ctx, t, n, d)
}

// retryCallDelay is how long a Transport waits before sending a call again
// whose refusal concerned it alone (RetryCall): 100ms, doubled with each
// attempt, at most 2s.
func retryCallDelay(try int) time.Duration {
	return min(100*time.Millisecond<<min(try, 5), 2*time.Second)
}

// sleepCtx waits d, or until ctx ends, and reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// peekBody reads up to PeekBytes of resp's body and puts them back in
// front of the rest, so that the caller reads the body unchanged (a read
// error is returned to the caller after the bytes read before it).
func peekBody(resp *http.Response) []byte {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	rest := resp.Body
	buf, err := io.ReadAll(io.LimitReader(rest, counters.PeekBytes))
	var tail io.Reader = rest
	if err != nil {
		tail = errReader{err}
	}
	resp.Body = peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), tail), Closer: rest}
	return buf
}

type peekedBody struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// lowered reports whether t's process knows of a lowered limit in force.
func lowered(t *Throttler) bool {
	serverNow := t.clock.Server(t.now())
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shared.loweredAt(serverNow)
}

// lowerTo lowers (or restores) t's shared limit to n, what the API stated,
// for d (see LowerLimit), writing to Redis only when that changes what is in
// force or the lowering is past half its time. A failure is logged; the
// response stands.
func lowerTo(ctx context.Context, t *Throttler, n int, d time.Duration) {
	t.mu.Lock()
	serverNow := t.clock.Server(t.now())
	lowered := t.shared.loweredAt(serverNow)
	fresh := lowered && t.shared.lowered == n && t.shared.lowerTill-serverNow > d.Microseconds()/2
	t.mu.Unlock()
	if fresh || (!lowered && n >= t.Limit()) {
		return
	}
	t.LowerLimit(ctx, n, d)
}
