package main

import (
	"slices"
	"strings"
	"testing"
)

// Every rider's fields are touched only in its own files.
func TestRidersKeepToTheirFiles(t *testing.T) {
	stray, err := strayRiders("../..", riders)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stray {
		t.Error("a rider's field outside its files: " + s)
	}
}

// The check sees a touch outside a rider's files: with news.go taken out
// of the announcements' files, it reports news.go's.
func TestRidersCheckFindsStrays(t *testing.T) {
	table := slices.Clone(riders)
	for i, r := range table {
		if r.name == "announcements of taken slots" {
			table[i].files = slices.DeleteFunc(slices.Clone(r.files), func(f string) bool { return f == "news.go" })
		}
	}
	stray, err := strayRiders("../..", table)
	if err != nil {
		t.Fatal(err)
	}
	found := slices.ContainsFunc(stray, func(s string) bool { return strings.HasPrefix(s, "news.go:") && strings.Contains(s, "Riders.Taken") })
	if !found || len(stray) == 0 {
		t.Fatalf("no stray touch of Riders.Taken in news.go reported: %v", stray)
	}
}
