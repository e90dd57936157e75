package harness

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

// KeysRow is the keys scenario for one implementation: what Redis holds
// per key of a quota kept per key (a credential, a customer).
type KeysRow struct {
	Impl  string `json:"impl"`
	Run   int    `json:"run"`
	Keys  int    `json:"keys"`
	Calls int    `json:"calls"` // per key
	// used_memory's growth over the keys, per key: after one call on
	// each, and after Calls on each.
	BytesFirst float64 `json:"bytes_per_key_first"`
	BytesAll   float64 `json:"bytes_per_key_all"`
	// MEMORY USAGE of one key after its Calls calls (the value and its
	// key, without the keyspace's own entries).
	UsageAll     int64   `json:"memory_usage_one_key"`
	AdmitSeconds float64 `json:"admit_seconds"`
}

// keysPrefix prefixes the keys scenario's Redis keys.
const keysPrefix = "bench:keys:"

// keyWaiter waits for a call on one of many keys.
type keyWaiter func(ctx context.Context, key string) error

// keysImpl returns impl's waiter for the keys scenario: this library's
// Group, redis_rate's GCRA with one state per key, or the floor: a byte
// under each key, with a TTL, named as the Group names its keys (see
// impls.Names).
func keysImpl(rdb *redis.Client, sc Scenario, impl string) (keyWaiter, error) {
	switch impl {
	case "throttler":
		g, err := throttler.NewGroup(rdb, keysPrefix, func(string) (throttler.KeyQuota, error) {
			return throttler.KeyQuota{Limit: sc.Limit, Interval: sc.Interval}, nil
		})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, key string) error {
			th, err := g.For(key)
			if err != nil {
				return err
			}
			return th.Wait(ctx)
		}, nil
	case "redis_rate":
		l := redis_rate.NewLimiter(rdb)
		lim := redis_rate.Limit{Rate: sc.Limit, Period: sc.Interval, Burst: sc.Limit}
		return func(ctx context.Context, key string) error {
			res, err := l.Allow(ctx, keysPrefix+key, lim)
			if err == nil && res.Allowed == 0 {
				err = fmt.Errorf("redis_rate refused a call on %s within its burst", key)
			}
			return err
		}, nil
	case "floor":
		return func(ctx context.Context, key string) error {
			sum := sha256.Sum256([]byte(key))
			name := keysPrefix + "{" + base64.RawURLEncoding.EncodeToString(sum[:12]) + "}"
			return rdb.Set(ctx, name, "x", sc.Interval).Err()
		}, nil
	}
	return nil, fmt.Errorf("keys scenario: no such implementation %q", impl)
}

// runKeys makes one call on each of sc.Keys keys, measures, then makes
// sc.Calls-1 more on each (all within the limit, in one window) and
// measures again.
func (h *harness) runKeys(ctx context.Context, sc Scenario, impl string) (KeysRow, error) {
	if err := h.rdb.FlushAll(ctx).Err(); err != nil {
		return KeysRow{}, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr, PoolSize: sc.Goroutines})
	defer rdb.Close()
	wait, err := keysImpl(rdb, sc, impl)
	if err != nil {
		return KeysRow{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	base, err := usedMemory(ctx, h.rdb)
	if err != nil {
		return KeysRow{}, err
	}
	row := KeysRow{Impl: impl, Keys: sc.Keys, Calls: sc.Calls}
	began := time.Now()
	for pass := 1; pass <= sc.Calls; pass++ {
		if err := eachKey(ctx, sc, wait); err != nil {
			return row, fmt.Errorf("pass %d: %w", pass, err)
		}
		if pass != 1 && pass != sc.Calls {
			continue
		}
		used, err := usedMemory(ctx, h.rdb)
		if err != nil {
			return row, err
		}
		per := float64(used-base) / float64(sc.Keys)
		if pass == 1 {
			row.BytesFirst = per
		}
		if pass == sc.Calls {
			row.BytesAll = per
		}
	}
	row.AdmitSeconds = time.Since(began).Seconds()
	if row.AdmitSeconds > sc.Interval.Seconds()/2 {
		return row, fmt.Errorf("the passes took %.0fs, too close to the %s window for the keys to still hold every call", row.AdmitSeconds, sc.Interval)
	}
	keys, _, err := h.rdb.Scan(ctx, 0, "*", 10).Result() // redis_rate prefixes keys of its own
	if err != nil || len(keys) == 0 {
		return row, errors.Join(err, errors.New("keys scenario: no key to measure"))
	}
	row.UsageAll, err = h.rdb.MemoryUsage(ctx, keys[0], 0).Result()
	return row, err
}

// eachKey waits once on each of sc.Keys keys, with sc.Goroutines
// goroutines.
func eachKey(ctx context.Context, sc Scenario, wait keyWaiter) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, sc.Goroutines)
	for g := range sc.Goroutines {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(sc.Keys) {
					return
				}
				if err := wait(ctx, "customer-"+strconv.FormatInt(i, 10)); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// usedMemory reads INFO memory's used_memory.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory: no used_memory")
}
