package harness

import (
	"os"
	"strings"
	"testing"
)

// TestREADMETablesMatchResults fails when the benchmark tables of the
// repository's README.md are not what the committed results render: a
// figure edited by hand, or results measured anew without the README
// following (write them with `go run ./cmd/harness -readme ../README.md`).
func TestREADMETablesMatchResults(t *testing.T) {
	r, err := LoadReport("../../results/results.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := READMETables(r)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadmeTables(readme)
	if err != nil {
		t.Fatal(err)
	}
	if got == want {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("README.md's benchmark tables disagree with bench/results/results.json at their line %d:\n README:  %s\n results: %s\n(cd bench && go run ./cmd/harness -readme ../README.md writes them)", i+1, gl, wl)
		}
	}
}
