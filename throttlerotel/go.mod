module github.com/go-throttler/throttler/throttlerotel

go 1.26.0

// For this repository's development only: Go ignores a dependency's
// replace directives. throttlerotel needs the first release of
// github.com/go-throttler/throttler with Throttler.AddObserver,
// Group.AddObserver and Transport.AddObserver (and Refusal.At); none is
// tagged yet. v0.0.0 below stands for it, and is to be raised to that
// release before throttlerotel is tagged.
replace github.com/go-throttler/throttler => ../

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/go-throttler/throttler v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
