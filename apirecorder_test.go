package throttler

// The parent's side of the fault tests: the fake API the replicas call.

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/fakeapi"
)

// apiRecorder is the fake API behind a recorder that sees every request, the
// refused ones too, with its replica and request id.
type apiRecorder struct {
	api      *fakeapi.API
	interval time.Duration

	mu        sync.Mutex
	arrivals  []time.Time
	byReplica map[string]int // requests received, 429s included
	replicaAt map[string][]time.Time
	ids       map[string]bool
	dups      []string
	noID      int
}

func newAPIRecorder(t *testing.T, limit int, interval time.Duration, opts ...fakeapi.Option) (*apiRecorder, string) {
	a := &apiRecorder{
		api: fakeapi.New(limit, interval, opts...), interval: interval,
		byReplica: map[string]int{}, replicaAt: map[string][]time.Time{}, ids: map[string]bool{},
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func (a *apiRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	id, rep := r.Header.Get(requestIDHeader), r.Header.Get(fakeapi.ReplicaHeader)
	a.mu.Lock()
	a.arrivals = append(a.arrivals, now)
	a.byReplica[rep]++
	a.replicaAt[rep] = append(a.replicaAt[rep], now)
	switch {
	case id == "":
		a.noID++
	case a.ids[id]:
		a.dups = append(a.dups, id)
	default:
		a.ids[id] = true
	}
	a.mu.Unlock()
	a.api.ServeHTTP(w, r)
}

// check fails t if a request came twice or without an id, if any window of
// interval held more than limit arrivals (refused ones included), or if the
// API refused any. It returns the worst window.
func (a *apiRecorder) check(t *testing.T, limit int) int {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.dups) > 0 {
		t.Errorf("the API received %d requests twice, e.g. %q", len(a.dups), a.dups[0])
	}
	if a.noID > 0 {
		t.Errorf("the API received %d requests without an id", a.noID)
	}
	worst := fakeapi.MaxInWindow(a.arrivals, a.interval)
	if worst > limit {
		t.Errorf("at the API a window of %s held %d arrivals, limit %d (%d arrivals)", a.interval, worst, limit, len(a.arrivals))
	}
	if st := a.api.Stats(); st.Rejected > 0 {
		t.Errorf("the API refused %d of %d requests (429)", st.Rejected, st.Rejected+st.Accepted)
	}
	return worst
}

func (a *apiRecorder) received(replicaID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byReplica[replicaID]
}

// countBetween returns, per replica, the requests received within [from, to).
func (a *apiRecorder) countBetween(ids []string, from, to time.Time) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := make([]int, len(ids))
	for i, id := range ids {
		for _, at := range a.replicaAt[id] {
			if !at.Before(from) && at.Before(to) {
				n[i]++
			}
		}
	}
	return n
}
