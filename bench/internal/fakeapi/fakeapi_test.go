package fakeapi

import (
	"net/http"
	"testing"
	"time"
)

// With a strict window, the API refuses a request that would put more
// than the limit into the window ending at its arrival, counts it in no
// window, and records it as refused, with its call's name and tenant.
func TestStrictWindow(t *testing.T) {
	s, err := StartConfig(Config{Limit: 2, Window: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get := func(call string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.URL, nil)
		req.Header.Set(CallHeader, call)
		req.Header.Set(ReplicaHeader, "1")
		req.Header.Set(TenantHeader, "t-"+call)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var codes []int
	for _, c := range []string{"a", "b", "c", "d"} {
		codes = append(codes, get(c))
	}
	time.Sleep(350 * time.Millisecond) // the window slides past a and b
	codes = append(codes, get("e"))
	want := []int{200, 200, 429, 429, 200}
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("status codes %v, want %v", codes, want)
		}
	}
	arr := s.Take()
	if len(arr) != 5 {
		t.Fatalf("%d arrivals, want 5", len(arr))
	}
	for i, a := range arr {
		if a.Call != string(rune('a'+i)) || a.Replica != 1 || a.Refused != (want[i] == 429) || a.Proto != "HTTP/1.1" || a.Tenant != "t-"+a.Call {
			t.Errorf("arrival %d: %+v", i, a)
		}
	}
	if !arr[0].NewConn || arr[1].NewConn {
		t.Errorf("connections: first %v, second %v; want the first call alone new", arr[0].NewConn, arr[1].NewConn)
	}
}
