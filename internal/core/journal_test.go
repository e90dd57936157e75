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

func TestJournalProbeBefore(t *testing.T) {
	j := Journal{Cap: 4, W: 100}
	if _, ok := j.ProbeBefore(j.Mark()); ok {
		t.Fatal("ProbeBefore of an empty journal reports a member")
	}
	j.Add(10, []string{"a", "b"})
	mark := j.Mark()
	j.Add(5, []string{"c"}) // added later, though scored earlier
	if p, ok := j.ProbeBefore(mark); !ok || p.Member != "b" {
		t.Fatalf("ProbeBefore(mark after b) = %+v, %v; want b", p, ok)
	}
	j.Forget([]string{"b"})
	if p, ok := j.ProbeBefore(mark); !ok || p.Member != "a" {
		t.Fatalf("after Forget(b): ProbeBefore = %+v, %v; want a", p, ok)
	}
	if p, _ := j.Probe(); p.Member != "c" {
		t.Fatalf("Probe() = %+v, want c, the newest added", p)
	}
	j.Add(20, []string{"d", "e", "f"}) // Cap 4: a goes
	if _, ok := j.ProbeBefore(mark); ok {
		t.Fatalf("ProbeBefore(mark) after every entry before it went: %v", members(j))
	}
	if p, ok := j.ProbeBefore(j.Mark()); !ok || p.Member != "f" {
		t.Fatalf("ProbeBefore(Mark()) = %+v, %v; want f", p, ok)
	}
	j.Clear()
	if _, ok := j.Probe(); ok || len(j.seqs) != 0 {
		t.Fatalf("after Clear: %v, %d seqs", members(j), len(j.seqs))
	}
}
