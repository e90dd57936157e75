module github.com/go-throttler/throttler/bench

go 1.26.0

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/go-throttler/throttler v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	golang.org/x/time v0.16.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/go-throttler/throttler => ../
