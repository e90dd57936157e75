package redistest

import (
	"strings"
	"testing"
)

// The rewrite wraps the arguments of each call, nested or not, with the
// number of its line, and touches nothing else: not a call in a comment
// or a string, not the line count (the prelude shares the first line).
func TestGuardSourceWrapsOnlyCalls(t *testing.T) {
	src := "\n-- redis.call('X')\nlocal s = 'redis.call(1)' .. [[redis.pcall(2)]]\n" +
		"return redis.call ('GET', KEYS[1] .. redis.pcall('GET', KEYS[2]), f(1), s..redis.call('TIME')[1])"
	want := "\n-- redis.call('X')\nlocal s = 'redis.call(1)' .. [[redis.pcall(2)]]\n" +
		"return redis.call (__kg(4, 'GET', KEYS[1] .. redis.pcall(__kg(4, 'GET', KEYS[2])), f(1), s..redis.call(__kg(4, 'TIME'))[1]))"
	got, problem := guardSource(src)
	if problem != "" || got != prelude()+want {
		t.Fatalf("guardSource:\n%s\nproblem %q; want\n%s", got, problem, prelude()+want)
	}
	if strings.Count(got, "\n") != strings.Count(src, "\n") {
		t.Fatalf("the guarded copy has %d lines, the script %d", strings.Count(got, "\n"), strings.Count(src, "\n"))
	}
	// Redis 7's flags line stays first.
	if got, _ := guardSource("#!lua flags=no-writes\nreturn 1"); got != "#!lua flags=no-writes\n"+prelude()+"return 1" {
		t.Fatalf("with a flags line: %q", got)
	}
}
