package throttler_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestREADMEQuickStart builds and runs README.md's quick start as a user
// who pastes it would: the program alone, in a fresh module that requires
// this one, against an embedded Redis and a stand-in for GitHub (the
// program's two addresses replaced by theirs, nothing else). It checks
// that the call went through and was admitted.
func TestREADMEQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	src := quickStart(t)
	mr := miniredis.RunT(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Remaining", "4999")
		w.Header().Set("X-RateLimit-Reset", "0")
		w.Write([]byte("Keep it logically awesome."))
	}))
	defer api.Close()
	for from, to := range map[string]string{`"localhost:6379"`: `"` + mr.Addr() + `"`, `"https://api.github.com/zen"`: `"` + api.URL + `/zen"`} {
		if !strings.Contains(src, from) {
			t.Fatalf("the quick start no longer holds %s", from)
		}
		src = strings.Replace(src, from, to, 1)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main.go", src)
	write("go.mod", "module quickstart\n\ngo 1.26.0\n\nrequire github.com/go-throttler/throttler v0.0.0\n\nreplace github.com/go-throttler/throttler => "+root+"\n")
	run := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	// -e: tidy also looks for the packages the dependencies' own tests
	// import (go-redis's ginkgo, say), which a fresh module cache does not
	// hold and GOPROXY=off does not fetch; the build needs none of them.
	run("mod", "tidy", "-e")
	// What the tests and examples use is no part of a user's build, nor
	// of the requirements tidy writes into the user's go.mod.
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(run("list", "-deps", "."))
	for _, testOnly := range []string{"miniredis", "gopher-lua", "goleak"} {
		for _, pkg := range deps {
			if strings.Contains(pkg, testOnly) {
				t.Errorf("the quick start builds %s", pkg)
			}
		}
		if bytes.Contains(mod, []byte(testOnly)) {
			t.Errorf("go mod tidy wrote %s into the user's go.mod:\n%s", testOnly, mod)
		}
	}
	start := time.Now()
	out := run("run", ".")
	if want := "200 OK - admitted so far by this pod: 1"; !strings.Contains(out, want) {
		t.Fatalf("the quick start printed %q, want %q", out, want)
	}
	t.Logf("built and ran in %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
}

// quickStart is the Go program under README.md's "Quick start" heading.
func quickStart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	_, code, ok := strings.Cut(after, "```go\n")
	if !ok {
		t.Fatal("README.md's quick start has no Go block")
	}
	code, _, ok = strings.Cut(code, "```")
	if !ok || !strings.HasPrefix(code, "// ") && !strings.HasPrefix(code, "package main") {
		t.Fatal("README.md's quick start is not a whole program")
	}
	return code
}
