package core

import (
	"slices"
	"testing"
)

func TestJournal(t *testing.T) {
	j := Journal{Cap: 3, W: 100}
	if _, ok := j.Probe(); ok {
		t.Fatal("Probe() of an empty journal reports a member")
	}
	j.Add(10, []string{"a", "b"})
	j.Add(50, []string{"c", "d"})
	if got := members(j); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("after 4 adds with Cap 3: %v, want the newest 3", got)
	}
	if p, ok := j.Probe(); !ok || p.Member != "d" || p.Score != 50 {
		t.Fatalf("Probe() = %+v, %v; want the newest, d at 50", p, ok)
	}
	j.Forget([]string{"d"})
	if p, _ := j.Probe(); p.Member != "c" || j.Holds("d") || !j.Holds("c") {
		t.Fatalf("after Forget(d): probe %q, holds d %v, holds c %v", p.Member, j.Holds("d"), j.Holds("c"))
	}
	j.Trim(110) // 10 <= 110-100: b no longer counts; c (50) does
	if got := members(j); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after Trim(110): %v, want [c]", got)
	}
	j.Trim(150)
	if len(j.Entries) != 0 {
		t.Fatalf("after Trim(150): %v, want none", members(j))
	}
}

func members(j Journal) []string {
	var out []string
	for _, e := range j.Entries {
		out = append(out, e.Member)
	}
	return out
}
