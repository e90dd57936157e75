package main

import (
	"slices"
	"strings"
	"testing"
)

// Every concern type's fields change only in its own files.
func TestConcernTypesOwnTheirFields(t *testing.T) {
	stray, err := strayWrites("../..", owners)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stray {
		t.Error("a concern type's field changed outside its files: " + s)
	}
}

// The check sees a change outside an owner's files: with overload.go taken
// out of workerState's files, it reports the queue bound's changes there,
// and with heal.go out of health's, the heal's (a pointer method called on
// a field, the journal's Clear).
func TestOwnersCheckFindsStrays(t *testing.T) {
	table := slices.Clone(owners)
	for i, o := range table {
		switch o.typ {
		case "workerState":
			table[i].files = []string{"worker.go"}
		case "health":
			table[i].files = []string{"health.go"}
		}
	}
	stray, err := strayWrites("../..", table)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"overload.go:", "heal.go:"} {
		if !slices.ContainsFunc(stray, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("no stray change reported in %s: %v", want, stray)
		}
	}
	if !slices.ContainsFunc(stray, func(s string) bool { return strings.HasPrefix(s, "heal.go:") && strings.HasSuffix(s, "health.journal") }) {
		t.Errorf("the journal's Clear in heal.go not reported: %v", stray)
	}
}
