package main

import (
	"path/filepath"
	"testing"
)

// The size targets of the issue that made the round pluggable hold in every
// library package: no struct over 16 fields, no function over 60 lines, no
// type over 40 methods; the Store's file at most 600 lines, and core's
// Attempt and Reply at most 10 fields each.
func TestSizeTargets(t *testing.T) {
	const (
		maxFields  = 16
		maxLines   = 60
		maxMethods = 40
	)
	for _, dir := range libraryDirs {
		z, err := measureDir(filepath.Join("../..", dir))
		if err != nil {
			t.Fatal(err)
		}
		for name, n := range z.structs {
			if n > maxFields {
				t.Errorf("%s: struct %s has %d fields, more than %d", dir, name, n, maxFields)
			}
		}
		for name, n := range z.methods {
			if n > maxMethods {
				t.Errorf("%s: type %s has %d methods, more than %d", dir, name, n, maxMethods)
			}
		}
		for _, f := range z.funcs {
			if f.lines > maxLines {
				t.Errorf("%s: %s is %d lines long, more than %d", dir, f.name, f.lines, maxLines)
			}
		}
		switch dir {
		case "internal/redisstore":
			if n := z.fileLines["store.go"]; n == 0 || n > 600 {
				t.Errorf("internal/redisstore/store.go: %d lines, want 1 to 600", n)
			}
		case "internal/core":
			for _, name := range []string{"Attempt", "Reply"} {
				if n, ok := z.structs[name]; !ok || n > 10 {
					t.Errorf("core.%s: %d fields (found %t), want at most 10", name, n, ok)
				}
			}
		}
	}
}

// The measure sees what the targets judge: the root's Throttler is a
// struct of several fields with many methods, and its longest function has
// more than a few lines.
func TestMeasureSeesTheRoot(t *testing.T) {
	z, err := measureDir("../..")
	if err != nil {
		t.Fatal(err)
	}
	if z.structs["Throttler"] < 5 || z.methods["Throttler"] < 10 || len(z.funcs) == 0 || z.funcs[0].lines < 20 {
		t.Fatalf("Throttler: %d fields, %d methods; longest function %v: the measure reads nothing", z.structs["Throttler"], z.methods["Throttler"], z.funcs[:min(1, len(z.funcs))])
	}
}
