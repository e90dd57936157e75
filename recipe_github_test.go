package throttler_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/counters"
	"github.com/go-throttler/throttler/internal/fakequota"
	"github.com/redis/go-redis/v9"
)

// GitHub's REST API meters each token twice (its "Rate limits for the REST
// API" page): a primary limit, 5,000 requests an hour for a user's token,
// in a fixed window whose counter every response states
// (x-ratelimit-remaining, x-ratelimit-reset), and secondary limits that
// punish bursts: at most 900 points a minute (a GET costs 1, a write 5)
// and 100 requests at once, among others. One Throttler per token holds
// both rates: the hour, and the minute's points as a second limit.
// Counters: GitHub() follows the token's own counter for every replica, so
// that what another consumer of the token spends (a cron job, a person)
// counts too, and turns a refusal (a 403 or 429 with retry-after, a
// counter at 0, or a secondary limit's message, after which every replica
// backs off a minute, as GitHub asks) into a pause for every replica.
// Retries sends a refused request again once the pause is over.
//
// Here against a stand-in at a compressed scale: a fixed window of 30
// requests per 2s, and a secondary limit of 30 requests in any second,
// answered 429 with retry-after. A cron job on the same token spends 15 of
// the first window outside the throttler; then three replicas with three
// goroutines each make 27 calls: the first response tells every replica
// that 15 are gone. (How many of ours the API refuses, a call let through
// before its replica learned of the cron job's 15 and then retried, is what
// TestGitHubRecipeFollowsCounter counts.)
func ExampleTransport_gitHub() {
	rdb, stop := embeddedRedis()
	defer stop()
	api, srv := githubStandIn()
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	replica := func() *http.Client {
		rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr}) // each replica its own
		// In production: 5000 per time.Hour, and 900 per time.Minute.
		t, err := throttler.New(rc, "{gh:token-1}:hour", 30, 2*time.Second, // the first limit: the API's window
			throttler.WithLimit("{gh:token-1}:minute", 12, time.Second)) // the secondary limit's points, less what others may spend
		if err != nil {
			panic(err)
		}
		return &http.Client{Transport: &throttler.Transport{
			Route:    t.Route(),
			Counters: counters.GitHub(), // x-ratelimit-remaining and -reset, for every replica; 403 and 429 refusals
			Retries:  1,                 // a refused request goes again once the pause is over
			Base:     srv.Client().Transport,
		}}
	}

	answered, _ := githubLoad(srv, api, replica)
	fmt.Println("calls answered:", answered, "of 27")
	// Output:
	// calls answered: 27 of 27
}

// githubStandIn returns ExampleTransport_gitHub's stand-in and its server:
// a fixed window of 30 requests per 2s, a secondary limit of 30 requests
// in any second answered 429 with retry-after, and "cron" a consumer the
// others cannot see.
func githubStandIn() (*fakequota.API, *httptest.Server) {
	api := fakequota.New(fakequota.Config{Style: fakequota.GitHub, Limit: 30, Window: 2 * time.Second,
		Secondary: 30, SecondaryWindow: time.Second, SecondaryStatus: http.StatusTooManyRequests, SecondaryRetryAfter: true},
		func(consumer string) bool { return consumer == "cron" })
	return api, httptest.NewServer(api)
}

// githubLoad runs ExampleTransport_gitHub's calls against api, served by
// srv: 15 as "cron", outside the throttler, then three replicas, each the
// client replica makes, with three goroutines making three calls each. It
// returns how many of those 27 were answered 200, and how many times the
// API refused one of them (a retry answered counts once in each).
func githubLoad(srv *httptest.Server, api *fakequota.API, replica func() *http.Client) (answered, refused int) {
	get := func(client *http.Client, consumer string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/repos/o/r/issues", nil)
		req.Header.Set(fakequota.ConsumerHeader, consumer)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for range 15 {
		get(srv.Client(), "cron") // outside the throttler
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for r := range 3 {
		client := replica()
		for range 3 {
			wg.Go(func() {
				for range 3 {
					if status, err := get(client, fmt.Sprint("replica-", r)); err == nil && status == http.StatusOK {
						mu.Lock()
						answered++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	for _, a := range api.Answers() {
		if a.Consumer != "cron" && a.Status != http.StatusOK {
			refused++
		}
	}
	return answered, refused
}

// TestGitHubRecipeFollowsCounter runs ExampleTransport_gitHub's scenario
// and counts the refusals of ours: a call is refused only when its replica
// admitted it before it learned what the cron job spent (a reading another
// of its goroutines was still applying), and it is then retried. At most
// recipeTolerance refusals, and every call answered.
func TestGitHubRecipeFollowsCounter(t *testing.T) {
	rdb, stop := embeddedRedis()
	defer stop()
	api, srv := githubStandIn()
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	var clients []*redis.Client
	defer func() {
		for _, rc := range clients {
			rc.Close()
		}
	}()
	answered, refused := githubLoad(srv, api, func() *http.Client {
		rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		clients = append(clients, rc)
		th, err := throttler.New(rc, "{gh:token-1}:hour", 30, 2*time.Second, throttler.WithLimit("{gh:token-1}:minute", 12, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &throttler.Transport{Route: th.Route(), Counters: counters.GitHub(), Retries: 1, Base: srv.Client().Transport}}
	})
	t.Logf("%d calls of 27 answered, %d refusals of ours", answered, refused)
	if answered != 27 || refused > recipeTolerance {
		t.Errorf("%d calls of 27 answered, %d refusals of ours; want every call answered, at most %d refused", answered, refused, recipeTolerance)
	}
}

// TestGitHubRecipeRetriesSecondary: with the recipe's Transport, a request
// that another consumer's burst got refused by the secondary limit is
// sent again once the pause is over and answered, whichever way GitHub
// refuses: a 429 with retry-after (the pause lasts that long), or a 403
// with neither retry-after nor a counter at 0 (every replica backs off for
// Transport.Backoff, 1.5s here; unset, it would be the GitHub preset's
// Quota.Backoff, a minute, as GitHub asks, see
// TestGitHubSecondaryBacksOffAMinute).
func TestGitHubRecipeRetriesSecondary(t *testing.T) {
	for _, tt := range []struct {
		name       string
		status     int
		retryAfter bool
		wait       time.Duration // at least, between the refusal and the retry
	}{
		{"429 with retry-after", http.StatusTooManyRequests, true, time.Second},
		{"403 without retry-after", http.StatusForbidden, false, 1500 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rdb, stop := embeddedRedis()
			defer stop()
			api := fakequota.New(fakequota.Config{Style: fakequota.GitHub, Limit: 100, Window: 10 * time.Second,
				Secondary: 20, SecondaryWindow: time.Second, SecondaryStatus: tt.status, SecondaryRetryAfter: tt.retryAfter}, nil)
			srv := httptest.NewServer(api)
			defer srv.Close()
			defer srv.Client().CloseIdleConnections()
			th, err := throttler.New(rdb, "{gh:token-1}:hour", 100, 10*time.Second,
				throttler.WithLimit("{gh:token-1}:minute", 12, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: &throttler.Transport{Route: th.Route(), Counters: counters.GitHub(), Retries: 1,
				Backoff: 1500 * time.Millisecond, Base: srv.Client().Transport}}

			send := func(c *http.Client, consumer string) int {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/user", nil)
				req.Header.Set(fakequota.ConsumerHeader, consumer)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			for range 20 {
				send(srv.Client(), "cron") // a burst outside the throttler fills the secondary limit
			}
			if status := send(client, "ours"); status != http.StatusOK {
				t.Fatalf("status %d, want 200 after a retry", status)
			}
			var ours []fakequota.Answer
			for _, a := range api.Answers() {
				if a.Consumer == "ours" {
					ours = append(ours, a)
				}
			}
			if len(ours) != 2 || ours[0].Status != tt.status || !ours[0].Secondary || ours[1].Status != http.StatusOK {
				t.Fatalf("the API answered ours %+v; want a secondary refusal (%d), then 200", ours, tt.status)
			}
			if gap := ours[1].At.Sub(ours[0].At); gap < tt.wait {
				t.Fatalf("the retry went %v after the refusal, want at least %v", gap, tt.wait)
			}
			t.Logf("refused %d, retried %v later: 200", tt.status, ours[1].At.Sub(ours[0].At).Round(time.Millisecond))
		})
	}
}

// Without Transport.Backoff, GitHub's secondary rate limit backs every
// replica off for the minute GitHub asks for.
func TestGitHubSecondaryBacksOffAMinute(t *testing.T) {
	rdb, stop := embeddedRedis()
	defer stop()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`)
	}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	th, err := throttler.New(rdb, "{gh:token-1}:hour", 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &throttler.Transport{Route: th.Route(), Counters: counters.GitHub(), Base: srv.Client().Transport}}
	before := time.Now()
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := th.Stats().PausedUntil.Sub(before); d < 59*time.Second || d > 62*time.Second {
		t.Fatalf("paused for %s after a secondary rate limit, want GitHub's minute", d)
	}
}
