package core

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestNewsRoundTrip(t *testing.T) {
	for _, n := range []News{{Pause: 1_795_500_000_123_456}, {Limit: 40, LimitEnd: 1_795_500_001_000_000, LimitSet: true}, {LimitSet: true},
		{Taken: []int64{1_795_500_000_000_001, 1_795_500_000_000_001, 1_795_500_000_020_000}, From: "0a1b2c3d4e5f6071"}} {
		got, ok := ParseNews(n.String())
		if !ok || !reflect.DeepEqual(got, n) {
			t.Errorf("ParseNews(%q) = %+v, %v; want %+v", n.String(), got, ok, n)
		}
	}
	for _, s := range []string{"", "p", "p x", "p -1", "l 3", "l 3 4 5", "q 1", "p 1 2", "t", "t a", "t a -1", "t a 1 x",
		"t a" + strings.Repeat(" 1", MaxTaken+1)} {
		if n, ok := ParseNews(s); ok {
			t.Errorf("ParseNews(%q) = %+v, want no news", s, n)
		}
	}
}

// Whatever a channel carries, ParseNews neither panics nor accepts a
// message it would not publish the same way.
func FuzzParseNews(f *testing.F) {
	for _, s := range []string{"p 1795500000123456", "l 40 1795500001000000", "l 0 0", "p -1", "", "l 3 4 5", "t 0a1b 17 17 18", "t x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ParseNews(s)
		if !ok {
			return
		}
		again, ok := ParseNews(n.String())
		if !ok || !reflect.DeepEqual(again, n) {
			t.Fatalf("ParseNews(%q) = %+v, whose String %q parses to %+v, %v", s, n, n.String(), again, ok)
		}
		if n.Pause < 0 || n.Limit < 0 || n.LimitEnd < 0 || slices.ContainsFunc(n.Taken, func(s int64) bool { return s < 0 }) {
			t.Fatalf("ParseNews(%q) = %+v: a negative time or limit", s, n)
		}
	})
}
