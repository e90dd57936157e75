package fakeshopify

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func rest(a *API, store string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	a.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "https://"+store+"/admin/api/2024-01/shop.json", nil))
	return w
}

type answer struct {
	Errors []struct {
		Message    string
		Extensions struct{ Code string }
	}
	Extensions struct {
		Cost struct {
			RequestedQueryCost int
			ActualQueryCost    *int
			ThrottleStatus     struct {
				MaximumAvailable, CurrentlyAvailable int
				RestoreRate                          float64
			}
		}
	}
}

func query(t *testing.T, a *API, store string, first int) (int, answer) {
	t.Helper()
	w := httptest.NewRecorder()
	body := `{"query":"query($first: Int!) { products(first: $first) { nodes { id } } }","variables":{"first":` + itoa(first) + `}}`
	a.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "https://"+store+"/admin/api/2025-01/graphql.json", strings.NewReader(body)))
	var ans answer
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
		t.Fatalf("answer %q: %v", w.Body, err)
	}
	return w.Code, ans
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// The REST bucket takes 40 at once, refuses the 41st with a 429, and
// leaks as the store's plan says; stores are apart.
func TestREST(t *testing.T) {
	now := time.Unix(1000, 0)
	a := New(Config{Plans: map[string]Plan{"plus.example": {Requests: 40, Leak: 20}}, Default: Plan{Requests: 40, Leak: 2},
		Now: func() time.Time { return now }})
	for i := range 40 {
		if w := rest(a, "std.example"); w.Code != http.StatusOK || w.Header().Get("X-Shopify-Shop-Api-Call-Limit") != itoa(i+1)+"/40" {
			t.Fatalf("request %d: %d, %q", i+1, w.Code, w.Header().Get("X-Shopify-Shop-Api-Call-Limit"))
		}
	}
	if w := rest(a, "std.example"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("the 41st: %d, want 429", w.Code)
	}
	if w := rest(a, "plus.example"); w.Code != http.StatusOK {
		t.Fatalf("another store: %d, want 200", w.Code)
	}
	now = now.Add(500 * time.Millisecond) // Standard leaks 1
	if w := rest(a, "std.example"); w.Code != http.StatusOK {
		t.Fatalf("after 0.5s: %d, want 200", w.Code)
	}
	if w := rest(a, "std.example"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("then: %d, want 429", w.Code)
	}
	if got := a.Counts("std.example"); got.Requests != 41 || got.Refused != 2 {
		t.Fatalf("counts %+v, want 41 answered, 2 refused", got)
	}
}

// A query needs its requested cost (2 + first) in the bucket and costs its
// actual cost; one that does not fit is throttled (200, THROTTLED, actual
// null) and costs nothing; the bucket restores at its rate.
func TestGraphQL(t *testing.T) {
	now := time.Unix(1000, 0)
	a := New(Config{Default: Plan{Points: 100, Restore: 50}, Seed: 1, Now: func() time.Time { return now }})
	status, ans := query(t, a, "std.example", 50)
	cost := ans.Extensions.Cost
	if status != http.StatusOK || cost.RequestedQueryCost != 52 || cost.ActualQueryCost == nil || *cost.ActualQueryCost < 2 || *cost.ActualQueryCost > 52 ||
		cost.ThrottleStatus.CurrentlyAvailable != 100-*cost.ActualQueryCost || cost.ThrottleStatus.MaximumAvailable != 100 || cost.ThrottleStatus.RestoreRate != 50 {
		t.Fatalf("first query: %d %+v", status, ans)
	}
	left := cost.ThrottleStatus.CurrentlyAvailable
	// Ask for more than is left: throttled.
	status, ans = query(t, a, "std.example", left-1)
	if status != http.StatusOK || len(ans.Errors) != 1 || ans.Errors[0].Extensions.Code != "THROTTLED" || ans.Extensions.Cost.ActualQueryCost != nil ||
		ans.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != left {
		t.Fatalf("a query over what is left: %d %+v", status, ans)
	}
	now = now.Add(time.Second) // 50 restored, up to 100
	if _, ans = query(t, a, "std.example", 1); ans.Extensions.Cost.ActualQueryCost == nil ||
		ans.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != min(100, left+50)-*ans.Extensions.Cost.ActualQueryCost {
		t.Fatalf("after a second: %+v", ans)
	}
	if got := a.Counts("std.example"); got.Queries != 2 || got.Throttled != 1 || got.Points != 100-left+*ans.Extensions.Cost.ActualQueryCost {
		t.Fatalf("counts %+v", got)
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "https://std.example/admin/api/2025-01/graphql.json", strings.NewReader(`{"query":"{ shop { name } }"}`)))
	if w.Code != http.StatusBadRequest {
		t.Fatalf("a query without first: %d, want 400", w.Code)
	}
}
