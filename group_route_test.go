package throttler

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGroupRouteByHeader: a Transport routed by a secret header gives each
// token its own quota, sends requests without it unthrottled, and the
// token shows nowhere: not in Redis, not to the limits function, not in
// what is logged or returned when For fails.
func TestGroupRouteByHeader(t *testing.T) {
	mr, c := miniClient(t)
	const tokenA, tokenB, tokenBad = "Bearer ghs_tokenAAAA", "Bearer ghs_tokenBBBB", "Bearer ghs_tokenBAD"
	var (
		mu   sync.Mutex
		seen []string // keys the limits function was given
	)
	var logs bytes.Buffer
	g, err := NewGroup(c, "gh:", func(key string) (KeyQuota, error) {
		mu.Lock()
		seen = append(seen, key)
		mu.Unlock()
		if key == digestOf(tokenBad) {
			return KeyQuota{}, errors.New("no such installation")
		}
		return KeyQuota{Limit: 2, Interval: time.Hour}, nil
	}, WithGroupLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()
	client := &http.Client{Transport: &Transport{Base: api.Client().Transport, Route: g.Route(ByHeader("Authorization"))}}

	call := func(token string, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, token := range []string{tokenA, tokenA, tokenB, tokenB} {
		if err := call(token, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := call(tokenA, time.Minute); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("third call of the hour on one token: %v after %s; want DeadlineExceeded at once", err, time.Since(start))
	}
	for range 5 {
		if err := call("", time.Second); err != nil {
			t.Fatalf("a request without the header: %v", err)
		}
		if err := call(tokenBad, time.Second); err != nil {
			t.Fatalf("a request whose limits failed: %v (it goes unthrottled)", err)
		}
	}
	if g.Len() != 2 {
		t.Fatalf("Len = %d, want one key per token that has a quota", g.Len())
	}
	if !strings.Contains(logs.String(), "unthrottled") || strings.Count(logs.String(), "\n") != 1 {
		t.Errorf("want one line logged for the failing key (at most one a second), got:\n%s", logs.String())
	}
	for _, where := range append(append(mr.Keys(), logs.String()), seen...) {
		for _, token := range []string{tokenA, tokenB, tokenBad} {
			if strings.Contains(where, strings.TrimPrefix(token, "Bearer ")) {
				t.Fatalf("a token shows in %q", where)
			}
		}
	}
}

func digestOf(v string) string {
	k, _ := ByHeader("X")(&http.Request{Header: http.Header{"X": {v}}})
	return k
}

// ByHeader keys a request by the header's first value, read whatever the
// case of its name, as 32 hex digits of its SHA-256 digest; a request
// without the header, or whose first value is empty, has no key.
func TestByHeaderKeys(t *testing.T) {
	keyOf := ByHeader("x-api-key")
	sum := sha256.Sum256([]byte("secret"))
	want := hex.EncodeToString(sum[:16])
	for _, tc := range []struct {
		name   string
		header http.Header
		key    string
		ok     bool
	}{
		{"absent", http.Header{}, "", false},
		{"empty", http.Header{"X-Api-Key": {""}}, "", false},
		{"empty first of two", http.Header{"X-Api-Key": {"", "secret"}}, "", false},
		{"set", http.Header{"X-Api-Key": {"secret"}}, want, true},
		{"first of two", http.Header{"X-Api-Key": {"secret", "other"}}, want, true},
	} {
		key, ok := keyOf(&http.Request{Header: tc.header})
		if key != tc.key || ok != tc.ok {
			t.Errorf("%s: ByHeader gave (%q, %t), want (%q, %t)", tc.name, key, ok, tc.key, tc.ok)
		}
	}
}
