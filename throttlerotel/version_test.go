package throttlerotel

import "testing"

// In its own tests the module is the main one, whose version the toolchain
// always records ("(devel)" when it knows no better).
func TestVersion(t *testing.T) {
	if Version() == "" {
		t.Error(`Version() = "" in the module's own tests, want the main module's version`)
	}
}
