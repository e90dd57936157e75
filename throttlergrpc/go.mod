module github.com/go-throttler/throttler/throttlergrpc

go 1.26.0

// For this repository's development only: Go ignores a dependency's
// replace directives. throttlergrpc needs the first release of
// github.com/go-throttler/throttler with Throttler.BackOff; none is
// tagged yet. v0.0.0 below stands for it, and is to be raised to that
// release before throttlergrpc is tagged.
replace github.com/go-throttler/throttler => ../

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/go-throttler/throttler v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
