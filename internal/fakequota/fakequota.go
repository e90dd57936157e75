// Package fakequota is a fake third-party API whose quota is shared by
// every consumer of one account, and which states its own counter on
// every response, as GitHub's and OpenAI's APIs do. The examples and tests
// of the throttler's Transport.Counters run against it, with consumers
// that go through the throttler and one that does not.
//
// In the GitHub style the quota is a fixed window: at most Limit calls in
// each Window, aligned on multiples of Window since the Unix epoch (so that
// its reset is a whole number of epoch seconds), stated in
// x-ratelimit-limit, -remaining, -used, -reset (epoch seconds) and
// -resource ("core"); a call beyond it is answered 403 with remaining 0.
// That is GitHub's primary rate limit as its "Rate limits for the REST
// API" page describes it (5,000 requests an hour for a user's token),
// scaled. A secondary limit (Secondary calls in any SecondaryWindow,
// counted over every consumer: the page's points per minute, a GET
// costing 1) answers with a message saying a secondary rate limit was
// exceeded, and the primary counter's headers, but no remaining of 0: the
// page says such a refusal is a 403 or a 429 (SecondaryStatus), with
// retry-after or without it (SecondaryRetryAfter), and asks a client
// without retry-after to wait at least a minute. Without retry-after, a
// 403, is the hardest case.
//
// In the OpenAI style the quota is a sliding window (at most Limit calls
// in any Window), stated in x-ratelimit-limit-requests, -remaining-requests
// and -reset-requests, the time until the window holds no call, as a
// duration ("9.95s"); a call beyond it is answered 429, and counts all the
// same: OpenAI's help center says unsuccessful requests contribute to the
// per-minute limit, so that resending at once does not work.
//
// In the GitHub style a refused call is not counted. Each request names its consumer in the
// Consumer header; the API records every answer so that a run can be
// checked afterwards.
package fakequota

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Style is the vendor whose counter and refusals the API imitates.
type Style int

const (
	// GitHub: a fixed window, x-ratelimit-* headers, 403 refusals.
	GitHub Style = iota
	// OpenAI: a sliding window, x-ratelimit-*-requests headers, 429
	// refusals.
	OpenAI
)

func (s Style) String() string {
	if s == OpenAI {
		return "openai"
	}
	return "github"
}

// ConsumerHeader names the consumer of a request.
const ConsumerHeader = "Consumer"

// TraceHeader, when a request sets it, names the request in its Answer
// (Answer.Trace), so that a run's trace can tie what a client sent to
// what the API counted.
const TraceHeader = "Trace-Id"

// SecondaryMessage is the message of a 403 for the secondary limit.
const SecondaryMessage = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."

// Config sets an API's quota.
type Config struct {
	Style  Style
	Limit  int           // calls per Window; default 100
	Window time.Duration // default 10s
	// Secondary, when positive, refuses a call that would put more than
	// Secondary calls of any consumer into a SecondaryWindow (GitHub
	// style only). SecondaryWindow defaults to a second.
	Secondary       int
	SecondaryWindow time.Duration
	// SecondaryStatus is the status of a secondary limit's refusal:
	// http.StatusForbidden (the default) or http.StatusTooManyRequests.
	SecondaryStatus int
	// SecondaryRetryAfter sends retry-after with a secondary limit's
	// refusal: the whole seconds, rounded up, until the window has room.
	SecondaryRetryAfter bool
	// Now reads the time; default time.Now. Called with the API's mutex
	// held; it must not go backwards.
	Now func() time.Time
}

// Answer is one request as the API answered it.
type Answer struct {
	Consumer string
	At       time.Time // arrival
	Status   int       // 200, or the refusal's status
	// Secondary: refused by the secondary limit.
	Secondary bool
	// Remaining is the remaining quota the response stated.
	Remaining int
	// Foreign is how many calls of consumers named foreign the quota
	// counted when the response was written: a response to another
	// consumer with Foreign > 0 reveals their use.
	Foreign int
	// Ours is how many calls of the other consumers it counted then.
	Ours int
	// Reset is the reset the response stated, as sent: epoch seconds
	// (GitHub style) or a duration (OpenAI style).
	Reset string
	// Trace is the request's TraceHeader, if any.
	Trace string
}

// API is the fake. It implements http.Handler and is safe for concurrent
// use.
type API struct {
	cfg     Config
	foreign func(consumer string) bool

	mu       sync.Mutex
	accepted []call // the calls the quota counts, in order of arrival
	seconds  []time.Time
	answers  []Answer
}

type call struct {
	at      time.Time
	foreign bool
}

// New returns an API with cfg's quota; foreign tells the consumers whose
// use the others cannot see (nil: none).
func New(cfg Config, foreign func(consumer string) bool) *API {
	if cfg.Limit <= 0 {
		cfg.Limit = 100
	}
	if cfg.Window <= 0 {
		cfg.Window = 10 * time.Second
	}
	if cfg.SecondaryWindow <= 0 {
		cfg.SecondaryWindow = time.Second
	}
	if cfg.SecondaryStatus != http.StatusTooManyRequests {
		cfg.SecondaryStatus = http.StatusForbidden
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if foreign == nil {
		foreign = func(string) bool { return false }
	}
	return &API{cfg: cfg, foreign: foreign}
}

// Config returns the API's configuration, defaults filled in.
func (a *API) Config() Config { return a.cfg }

// WindowStart returns the start of the fixed window holding at.
func (a *API) WindowStart(at time.Time) time.Time { return at.Truncate(a.cfg.Window) }

// ServeHTTP answers any request; see the package documentation.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	consumer := r.Header.Get(ConsumerHeader)
	ans := a.answer(consumer, a.foreign(consumer), r.Header.Get(TraceHeader), w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ans.Status)
	switch {
	case ans.Secondary:
		fmt.Fprintf(w, `{"message":%q}`+"\n", SecondaryMessage)
	case ans.Status == http.StatusForbidden:
		io.WriteString(w, `{"message":"API rate limit exceeded."}`+"\n")
	case ans.Status == http.StatusTooManyRequests:
		io.WriteString(w, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`+"\n")
	default:
		io.WriteString(w, `{"ok":true}`+"\n")
	}
}

// answer decides consumer's request as it arrives (foreign: its use is
// not the others' to see), records the answer, and sets the headers that
// state the quota in h.
func (a *API) answer(consumer string, foreign bool, trace string, h http.Header) Answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Now()
	live := a.counted(now)
	ans := Answer{Consumer: consumer, At: now, Status: http.StatusOK, Trace: trace}
	switch {
	case a.cfg.Style == GitHub && a.cfg.Secondary > 0 && a.recent(now) >= a.cfg.Secondary:
		ans.Status, ans.Secondary = a.cfg.SecondaryStatus, true
		if a.cfg.SecondaryRetryAfter {
			room := a.seconds[len(a.seconds)-a.cfg.Secondary].Add(a.cfg.SecondaryWindow).Sub(now)
			h.Set("Retry-After", strconv.FormatInt(int64((room+time.Second-1)/time.Second), 10))
		}
	case len(live) >= a.cfg.Limit && a.cfg.Style == OpenAI:
		// Refused, and counted all the same.
		ans.Status = http.StatusTooManyRequests
		a.accepted = append(a.accepted, call{at: now, foreign: foreign})
		live = a.counted(now)
	case len(live) >= a.cfg.Limit:
		ans.Status = http.StatusForbidden
	default:
		a.accepted = append(a.accepted, call{at: now, foreign: foreign})
		a.seconds = append(a.seconds, now)
		live = a.counted(now)
	}
	ans.Remaining = max(0, a.cfg.Limit-len(live))
	for _, c := range live {
		if c.foreign {
			ans.Foreign++
		}
	}
	ans.Ours = len(live) - ans.Foreign
	ans.Reset = a.state(h, now, live, ans.Remaining)
	a.answers = append(a.answers, ans)
	return ans
}

// state sets the headers that state the quota at now, live the calls it
// counts, in the Style's shape, and returns the reset as sent.
func (a *API) state(h http.Header, now time.Time, live []call, remaining int) (reset string) {
	switch a.cfg.Style {
	case GitHub:
		h.Set("X-RateLimit-Limit", strconv.Itoa(a.cfg.Limit))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("X-RateLimit-Used", strconv.Itoa(len(live)))
		reset = strconv.FormatInt(a.WindowStart(now).Add(a.cfg.Window).Unix(), 10)
		h.Set("X-RateLimit-Reset", reset)
		h.Set("X-RateLimit-Resource", "core")
	case OpenAI:
		d := time.Duration(0)
		if len(live) > 0 {
			d = live[len(live)-1].at.Add(a.cfg.Window).Sub(now)
		}
		h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(a.cfg.Limit))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(remaining))
		reset = d.Round(time.Millisecond).String()
		h.Set("X-Ratelimit-Reset-Requests", reset)
	}
	return reset
}

// counted returns the accepted calls the quota counts at now, oldest
// first.
func (a *API) counted(now time.Time) []call {
	var from time.Time
	if a.cfg.Style == GitHub {
		from = a.WindowStart(now).Add(-1) // the window is [start, start+Window)
	} else {
		from = now.Add(-a.cfg.Window) // (now-Window, now]
	}
	i, _ := slices.BinarySearchFunc(a.accepted, from, func(c call, t time.Time) int {
		if c.at.After(t) {
			return 1
		}
		return -1
	})
	return a.accepted[i:]
}

// recent counts the accepted calls in the last SecondaryWindow.
func (a *API) recent(now time.Time) int {
	from := now.Add(-a.cfg.SecondaryWindow)
	for len(a.seconds) > 0 && !a.seconds[0].After(from) {
		a.seconds = a.seconds[1:]
	}
	return len(a.seconds)
}

// Answers returns a copy of every answer, in order.
func (a *API) Answers() []Answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.answers)
}
