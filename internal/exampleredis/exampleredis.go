// Package exampleredis gives the examples their Redis: the server named by
// REDIS_URL when it is set, or else an embedded miniredis, so that the
// examples run on a fresh machine with nothing installed.
package exampleredis

import (
	"context"
	"fmt"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Start returns a constructor of clients (each call a new client, as each
// replica would have), a description of the server for the examples'
// output, and a function that stops the embedded server (a no-op for
// REDIS_URL). With REDIS_URL set it checks the server answers a PING.
func Start() (newClient func() *redis.Client, where string, stop func(), err error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		newClient = func() *redis.Client { o := *opts; return redis.NewClient(&o) }
		c := newClient()
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err != nil {
			return nil, "", nil, err
		}
		return newClient, "REDIS_URL (" + opts.Addr + ")", func() {}, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, err
	}
	newClient = func() *redis.Client { return redis.NewClient(&redis.Options{Addr: mr.Addr()}) }
	return newClient, "embedded miniredis at " + mr.Addr(), mr.Close, nil
}
