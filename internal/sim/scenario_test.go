package sim

import (
	"flag"
	"testing"
)

var show = flag.Uint64("show", 0, "print this seed's scenario")

func TestShow(t *testing.T) {
	if *show == 0 {
		t.Skip("-show SEED prints a scenario")
	}
	s := Generate(*show)
	t.Log(s)
	for _, f := range s.FaultLines() {
		t.Log(f)
	}
}
