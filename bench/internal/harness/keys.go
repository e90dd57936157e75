package harness

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
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
	// used_memory's growth over the keys, per key: one call on each, and
	// Calls on each (see runKeys).
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

// runKeys measures what sc.Keys keys cost Redis, in two parts, each on an
// empty Redis, so that every key counted holds every call it was given:
//
//   - one call on each key, one key after another (which takes less than
//     half the window on this machine: the scenario fails otherwise), then
//     used_memory's growth per key;
//   - sc.Calls calls on each key, back to back, one key after another,
//     with Redis's active expiry off (DEBUG SET-ACTIVE-EXPIRE 0): on a
//     small machine a million calls take longer than a window, and the
//     first keys would expire before the last were made; no key is read
//     again, so none expires lazily either. Then used_memory's growth per
//     key, and MEMORY USAGE of one key.
//
// Calls on one key come within a second of each other, well inside the
// window, and none waits: sc.Calls is at most the limit.
func (h *harness) runKeys(ctx context.Context, sc Scenario, impl string) (KeysRow, error) {
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr, PoolSize: sc.Goroutines})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	row := KeysRow{Impl: impl, Keys: sc.Keys, Calls: sc.Calls}
	first, err := h.keysPart(ctx, sc, impl, rdb, 1)
	if err != nil {
		return row, fmt.Errorf("one call on each key: %w", err)
	}
	if first.took > sc.Interval/2 {
		return row, fmt.Errorf("one call on each key took %s, too close to the %s window for the keys to still hold it", first.took.Round(time.Second), sc.Interval)
	}
	row.BytesFirst = first.perKey
	if err := h.rdb.Do(ctx, "DEBUG", "SET-ACTIVE-EXPIRE", "0").Err(); err != nil {
		return row, fmt.Errorf("turning active expiry off: %w", err)
	}
	defer h.rdb.Do(context.WithoutCancel(ctx), "DEBUG", "SET-ACTIVE-EXPIRE", "1")
	all, err := h.keysPart(ctx, sc, impl, rdb, sc.Calls)
	if err != nil {
		return row, fmt.Errorf("%d calls on each key: %w", sc.Calls, err)
	}
	row.BytesAll, row.AdmitSeconds = all.perKey, all.took.Seconds()
	row.UsageAll, err = liveKeyUsage(ctx, h.rdb)
	return row, err
}

// keysPartResult is what keysPart measured: the growth of used_memory per
// key, and how long the calls took.
type keysPartResult struct {
	perKey float64
	took   time.Duration
}

// keysPart is one part of runKeys: on an empty Redis, calls calls on each
// of sc.Keys keys.
func (h *harness) keysPart(ctx context.Context, sc Scenario, impl string, rdb *redis.Client, calls int) (keysPartResult, error) {
	if err := h.rdb.FlushAll(ctx).Err(); err != nil {
		return keysPartResult{}, err
	}
	wait, err := keysImpl(rdb, sc, impl)
	if err != nil {
		return keysPartResult{}, err
	}
	base, err := usedMemory(ctx, h.rdb)
	if err != nil {
		return keysPartResult{}, err
	}
	began := time.Now()
	if err := eachKey(ctx, sc, func(ctx context.Context, key string) error {
		for range calls {
			if err := wait(ctx, key); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return keysPartResult{}, err
	}
	took := time.Since(began)
	used, err := usedMemory(ctx, h.rdb)
	if err != nil {
		return keysPartResult{}, err
	}
	return keysPartResult{perKey: float64(used-base) / float64(sc.Keys), took: took}, nil
}

// liveKeyUsage returns MEMORY USAGE of a key that has not expired: SCAN
// and MEMORY USAGE delete a key past its TTL when they meet it.
func liveKeyUsage(ctx context.Context, rdb *redis.Client) (int64, error) {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 100).Result()
		if err != nil {
			return 0, err
		}
		for _, k := range keys {
			if n, err := rdb.MemoryUsage(ctx, k, 0).Result(); err == nil {
				return n, nil
			}
		}
		if cursor = next; cursor == 0 {
			return 0, errors.New("keys scenario: no key left to measure")
		}
	}
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
	m, err := memoryInfo(ctx, rdb, "used_memory")
	return m["used_memory"], err
}

// memoryInfo reads the fields of INFO memory named, each an integer.
func memoryInfo(ctx context.Context, rdb *redis.Client, fields ...string) (map[string]int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && slices.Contains(fields, name) {
			if out[name], err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Errorf("INFO memory: %s: %w", name, err)
			}
		}
	}
	for _, f := range fields {
		if _, ok := out[f]; !ok {
			return nil, fmt.Errorf("INFO memory: no %s", f)
		}
	}
	return out, nil
}
