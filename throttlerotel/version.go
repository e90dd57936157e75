package throttlerotel

import (
	"runtime/debug"
	"sync"
)

// Version returns the version of this module that the program was built
// with, as the Go toolchain recorded it (runtime/debug.ReadBuildInfo): the
// module version required (v1.2.3, or a pseudo-version) when throttlerotel
// is a dependency, "(devel)" when it is the main module (its own tests),
// and "" when the build recorded none (no module information, or a
// replace by a directory). It is the version of the instrumentation scope
// (ScopeName) of the meter and the tracer, which also carry the schema URL
// of the semantic conventions whose attributes are recorded (v1.43.0).
func Version() string { return version() }

var version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Path == ScopeName {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path != ScopeName {
			continue
		}
		if d.Replace != nil {
			return d.Replace.Version
		}
		return d.Version
	}
	return ""
})
