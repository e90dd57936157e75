package throttler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/counters"
	"github.com/go-throttler/throttler/internal/fakeshopify"
)

// Recipes: a quota per credential for three APIs that meter each of an
// app's customers apart. Each runs against a stand-in for the API on this
// machine (see toServer).

// Shopify's REST Admin API (legacy since October 2024: new apps use the
// GraphQL Admin API, see ExampleGroup_shopifyGraphQL) meters each app on
// each store apart, with a leaky bucket: a store's bucket holds 40
// requests and leaks 2 a second on the Standard plan, 4 on Advanced and 20
// on Plus (Shopify's figures for the leak; the bucket's size other than 40
// is not stated for every plan, and each response says it in
// X-Shopify-Shop-Api-Call-Limit, such as "32/40"). A request that finds
// the bucket full gets a 429.
//
// A sliding window of B requests per B/r seconds never overfills a bucket
// of B leaking r a second: a span of any length d is covered by
// ceil(d/(B/r)) windows, so it holds at most B + r*d requests, which is
// what the bucket takes over d from empty. The window reaches both the
// bucket's burst and its rate (B per B/r = r a second) but not its
// smoothness: after a burst of 40 it admits the next 40 a window later,
// where the bucket would take r a second at once. A smaller window (B'
// requests per B'/r seconds, B' < 40) trades burst for smoothness, as
// safely. The Throttler's buffer covers the time from admission to arrival.
//
// Here every plan gets the 40 the bucket holds at least, per 40/r seconds:
// 40 per 20s on Standard, 40 per 2s on Plus. The key is the store, from
// the request's host: the limits function looks up its plan, and every
// replica of the app shares each store's bucket.
func ExampleGroup_shopify() {
	rdb, stop := embeddedRedis()
	defer stop()

	plans := map[string]string{ // the app's own record of its stores' plans
		"standard-store.myshopify.com": "standard",
		"plus-store.myshopify.com":     "plus",
	}
	api := newFakeShopify(plans)
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	g, err := throttler.NewGroup(rdb, "shopify-admin:", func(store string) (throttler.KeyQuota, error) {
		return shopifyQuota(plans[store]), nil
	})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &throttler.Transport{
		Base: toServer(srv), // in production: nil, the default transport
		Route: g.Route(func(req *http.Request) (string, bool) {
			return req.URL.Host, true // the store
		}),
	}}
	get := func(store string, timeout time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+store+"/admin/api/2024-01/shop.json", nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	// 40 requests on each store go at once: the bucket holds them.
	var first time.Time // when the first request on a store was sent
	for _, store := range []string{"standard-store.myshopify.com", "plus-store.myshopify.com"} {
		first = time.Now()
		answered := 0
		for range 40 {
			if status, err := get(store, 5*time.Second); err != nil {
				panic(err)
			} else if status == http.StatusOK {
				answered++
			}
		}
		fmt.Printf("%s: %d requests answered\n", store, answered)
	}
	// The 41st goes a window after the first: 20s on Standard, where a
	// second's deadline fails at once, without waiting; 2s on Plus (the
	// window's 2s and its buffer, less what the local clock's estimate of
	// Redis's may be off).
	_, err = get("standard-store.myshopify.com", time.Second)
	fmt.Println("standard, 41st with a second's deadline:", errors.Is(err, context.DeadlineExceeded))
	status, err := get("plus-store.myshopify.com", 10*time.Second)
	fmt.Println("plus, 41st:", status, err, "more than 1.5s after the first:", time.Since(first) > 1500*time.Millisecond)
	// Output:
	// standard-store.myshopify.com: 40 requests answered
	// plus-store.myshopify.com: 40 requests answered
	// standard, 41st with a second's deadline: true
	// plus, 41st: 200 <nil> more than 1.5s after the first: true
}

// shopifyLeak is the REST Admin API's leak by plan, in requests a second.
var shopifyLeak = map[string]float64{"standard": 2, "advanced": 4, "plus": 20}

// shopifyQuota models a store's bucket of 40 requests, leaking as its plan
// says (an unknown plan as Standard), as a sliding window of 40 requests
// per 40/leak seconds.
func shopifyQuota(plan string) throttler.KeyQuota {
	const bucket = 40
	leak, ok := shopifyLeak[plan]
	if !ok {
		leak = shopifyLeak["standard"]
	}
	return throttler.KeyQuota{Limit: bucket, Interval: time.Duration(bucket / leak * float64(time.Second))}
}

// newFakeShopify returns a stand-in for the REST Admin API whose stores
// have the plans given, by host: a bucket of 40 requests each, leaking as
// the plan says.
func newFakeShopify(plans map[string]string) *fakeshopify.API {
	cfg := fakeshopify.Config{Plans: map[string]fakeshopify.Plan{}}
	for store, plan := range plans {
		cfg.Plans[store] = fakeshopify.Plan{Requests: 40, Leak: shopifyLeak[plan]}
	}
	return fakeshopify.New(cfg)
}

// toServer returns a transport that sends every request to srv, keeping
// its host in the Host header: the examples' stand-in for the Internet.
func toServer(srv *httptest.Server) http.RoundTripper {
	to, _ := url.Parse(srv.URL)
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		r := req.Clone(req.Context())
		r.Host = req.URL.Host
		r.URL.Scheme, r.URL.Host = to.Scheme, to.Host
		return srv.Client().Transport.RoundTrip(r)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// A GitHub App calls the API as each of its installations, and GitHub
// meters each installation apart: 5,000 requests an hour at least, 50 more
// per user past 20 and per repository past 20, up to 12,500. The key is
// the installation, which the code that picked the installation's token
// puts on the request's context: the token itself changes every hour, and
// is no key. The limits function gives every installation the floor;
// the limit GitHub states for an installation (X-RateLimit-Limit) is
// recorded for every replica with Learn.
//
// GitHub's window is fixed (it resets at X-RateLimit-Reset); a sliding
// window of the same limit and an hour never lets a fixed hour hold more.
func ExampleGroup_githubApp() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "12500") // a large organization's installation
	}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()

	g, err := throttler.NewGroup(rdb, "github:", func(installation string) (throttler.KeyQuota, error) {
		return throttler.KeyQuota{Limit: 5000, Interval: time.Hour}, nil
	}, throttler.WithLearnedLimits())
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &throttler.Transport{
		Base:  toServer(api),
		Route: g.Route(installationOf),
		// Follow each installation's own counter (X-RateLimit-Remaining
		// and -Reset, and the secondary limits' 403s) for every replica.
		// The limit an installation is granted, X-RateLimit-Limit, the
		// app records itself (g.Learn, below).
		Counters: counters.GitHub(),
	}}

	ctx := withInstallation(context.Background(), 42)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.github.com/repos/o/r/issues", nil)
	req.Header.Set("Authorization", "Bearer ghs_installation-token")
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	t, _ := g.For("42")
	fmt.Println("installation 42 before:", t.Limit())

	// An installation granted more than the default: every replica's
	// Group makes its Throttler anew with the limit learned.
	if n, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Limit")); err == nil {
		if err := g.Learn(ctx, "42", n, 24*time.Hour); err != nil {
			panic(err)
		}
	}
	t, _ = g.For("42") // made anew, here and in every replica
	fmt.Println("installation 42 after:", t.Limit())
	t, _ = g.For("7")
	fmt.Println("installation 7:", t.Limit())
	// Output:
	// installation 42 before: 5000
	// installation 42 after: 12500
	// installation 7: 5000
}

type installationKey struct{}

// withInstallation returns ctx for requests made as installation id.
func withInstallation(ctx context.Context, id int64) context.Context {
	return context.WithValue(ctx, installationKey{}, id)
}

// installationOf keys a request by the installation it is made as.
func installationOf(req *http.Request) (string, bool) {
	id, ok := req.Context().Value(installationKey{}).(int64)
	return strconv.FormatInt(id, 10), ok
}

// A service calls OpenAI with each customer's own API key, and OpenAI
// meters each organization or project apart, per model, in requests and
// tokens a minute. Two Groups, one per limit, key each request by a digest
// of its key, so the key itself is never kept, logged or sent to Redis:
// tokens first, then the request. A call's tokens are reserved at what
// OpenAI counts as it arrives (its max_tokens plus its prompt, estimated
// from its characters, see estimateTokens) and kept: no OpenAI page says
// the count is adjusted once the call ends (see ExampleTransport_openAI).
// Key by the OpenAI-Project header
// instead when customers send it, and add the model to the key when they
// use several.
//
// The limits function gives every key the lowest limits a customer's key
// may have (placeholders here: check the tiers you serve); the limits
// OpenAI states for a key are recorded for every replica with Learn.
func ExampleGroup_openAI() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"choices":[{"message":{"content":"..."}}],"usage":{"prompt_tokens":40,"completion_tokens":700,"total_tokens":740}}`)
	}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()

	floor := func(limit int) func(string) (throttler.KeyQuota, error) {
		return func(digest string) (throttler.KeyQuota, error) {
			return throttler.KeyQuota{Limit: limit, Interval: time.Minute}, nil
		}
	}
	tokens, err := throttler.NewGroup(rdb, "openai-tokens:", floor(30000), throttler.WithLearnedLimits())
	if err != nil {
		panic(err)
	}
	requests, err := throttler.NewGroup(rdb, "openai-requests:", floor(500), throttler.WithLearnedLimits())
	if err != nil {
		panic(err)
	}
	byKey := throttler.ByHeader("Authorization")
	client := &http.Client{Transport: &throttler.Transport{
		Route: tokens.Route(byKey),
		Cost:  &throttler.Cost{Estimate: estimateTokens}, // no Actual: the estimate stands
		// OpenAI's refusals pause each key's tokens too (a Cost
		// Transport follows no counter: it holds estimates until they
		// settle), and a refused call is retried here, on the outer
		// Transport only (see Transport.Retries).
		Counters: counters.OpenAI(),
		Retries:  2,
		Base: &throttler.Transport{
			Route: requests.Route(byKey),
			Base:  toServer(api),
			// Follow each key's own request counter
			// (x-ratelimit-remaining-requests, -reset-requests) for
			// every replica.
			Counters: counters.OpenAI(),
		},
	}}

	body := `{"model":"gpt-4o-mini","max_tokens":1000,"messages":[{"role":"user","content":"Summarize this ticket."}]}`
	req, _ := http.NewRequest(http.MethodPost, "https://api.openai.com/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-customer-A")
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body) // read to the end: the call is settled
	resp.Body.Close()

	ctx := context.Background()
	counted := func(g *throttler.Group, authorization string) int {
		digest, _ := byKey(&http.Request{Header: http.Header{"Authorization": {authorization}}})
		t, err := g.For(digest)
		if err != nil {
			panic(err)
		}
		u, err := t.Usage(ctx)
		if err != nil {
			panic(err)
		}
		return u[0].Used + u[0].Reserved
	}
	fmt.Println("customer A:", counted(tokens, "Bearer sk-customer-A"), "tokens,", counted(requests, "Bearer sk-customer-A"), "request")
	fmt.Println("customer B:", counted(tokens, "Bearer sk-customer-B"), "tokens,", counted(requests, "Bearer sk-customer-B"), "requests")
	// Output:
	// customer A: 1009 tokens, 1 request
	// customer B: 0 tokens, 0 requests
}

// estimateTokens prices a chat completion before it is sent at no less
// than OpenAI counts it when it arrives (the maximum of max_tokens and an
// estimate from the request's characters, its rate-limit guide says): its
// messages at about 4 characters a token, plus max_tokens, the most it may
// write.
func estimateTokens(req *http.Request) int {
	var asked struct {
		MaxTokens int `json:"max_tokens"`
		Messages  []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			json.NewDecoder(b).Decode(&asked)
			b.Close()
		}
	}
	n := asked.MaxTokens
	for _, m := range asked.Messages {
		n += len(m.Content)/4 + 4
	}
	return max(1, n)
}

// usageTokens reads what a chat completion cost from its usage's
// total_tokens, and reports false, so that the estimate stands, for an
// answer other than 200 or one without a usage (a refusal never reaches
// it: the Transport settles it at 0).
func usageTokens(resp *http.Response, tail []byte) (int, bool) {
	var done struct {
		Usage *struct {
			Total *int `json:"total_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(tail, &done) != nil || done.Usage == nil || done.Usage.Total == nil {
		return 0, false
	}
	return *done.Usage.Total, true
}

// TestUsageTokens: a 200 without a usage, or a usage without total_tokens,
// is no cost of 0: usageTokens cannot tell, and the estimate stands.
func TestUsageTokens(t *testing.T) {
	ok200 := &http.Response{StatusCode: http.StatusOK}
	for _, tt := range []struct {
		resp *http.Response
		tail string
		n    int
		ok   bool
	}{
		{ok200, `{"usage":{"prompt_tokens":40,"completion_tokens":700,"total_tokens":740}}`, 740, true},
		{ok200, `{"usage":{"total_tokens":0}}`, 0, true},
		{ok200, `{"choices":[]}`, 0, false},
		{ok200, `{"usage":{"prompt_tokens":40}}`, 0, false},
		{ok200, `{"usage":{"total_tokens":7`, 0, false},
		{&http.Response{StatusCode: http.StatusInternalServerError}, `{"usage":{"total_tokens":7}}`, 0, false},
	} {
		if n, ok := usageTokens(tt.resp, []byte(tt.tail)); n != tt.n || ok != tt.ok {
			t.Errorf("usageTokens(%d, %s) = %d, %v; want %d, %v", tt.resp.StatusCode, tt.tail, n, ok, tt.n, tt.ok)
		}
	}
}
