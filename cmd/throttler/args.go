package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	defaultRedisURL = "redis://127.0.0.1:6379/0"
	defaultBuffer   = 50 * time.Millisecond // the library's default
)

// config is a parsed command line.
type config struct {
	key      string
	limit    int
	interval time.Duration
	buffer   time.Duration
	also     []limitSpec
	redis    *redis.Options
	// -inflight KEY:N (WithInFlight): the key of the places in flight and
	// their cap; "" = none.
	inflightKey string
	inflightCap int

	// watch only
	every time.Duration
	count int // redraws before stopping; 0 = until interrupted
}

// limitSpec is one -also limit: KEY:LIMIT:INTERVAL.
type limitSpec struct {
	key      string
	limit    int
	interval time.Duration
}

func (l limitSpec) String() string {
	return l.key + ":" + strconv.Itoa(l.limit) + ":" + l.interval.String()
}

// parseLimitSpec parses KEY:LIMIT:INTERVAL, splitting from the right so that
// the key may contain colons.
func parseLimitSpec(s string) (limitSpec, error) {
	bad := func(why string) (limitSpec, error) {
		return limitSpec{}, fmt.Errorf("%q: %s (want KEY:LIMIT:INTERVAL, e.g. {gh}:hourly:5000:1h)", s, why)
	}
	rest, durText, ok := cutLast(s, ':')
	if !ok {
		return bad("no LIMIT and INTERVAL")
	}
	key, limitText, ok := cutLast(rest, ':')
	if !ok {
		return bad("no LIMIT or no INTERVAL")
	}
	if key == "" {
		return bad("empty KEY")
	}
	n, err := strconv.Atoi(limitText)
	if err != nil || n < 1 {
		return bad(fmt.Sprintf("LIMIT %q is not a whole number of at least 1", limitText))
	}
	d, err := time.ParseDuration(durText)
	if err != nil || d <= 0 {
		return bad(fmt.Sprintf("INTERVAL %q is not a positive duration such as 1s or 1h", durText))
	}
	return limitSpec{key: key, limit: n, interval: d}, nil
}

// parseInFlight parses KEY:N, splitting from the right.
func parseInFlight(s string) (string, int, error) {
	key, capText, ok := cutLast(s, ':')
	n, err := strconv.Atoi(capText)
	if !ok || key == "" || err != nil || n < 1 {
		return "", 0, fmt.Errorf("%q: want KEY:N, N at least 1, e.g. {gh}:inflight:100", s)
	}
	return key, n, nil
}

// cutLast splits s around the last sep.
func cutLast(s string, sep byte) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// alsoFlag collects repeated -also flags.
type alsoFlag []limitSpec

func (a *alsoFlag) String() string {
	if a == nil {
		return ""
	}
	parts := make([]string, len(*a))
	for i, l := range *a {
		parts[i] = l.String()
	}
	return strings.Join(parts, ",")
}

func (a *alsoFlag) Set(s string) error {
	l, err := parseLimitSpec(s)
	if err != nil {
		return err
	}
	*a = append(*a, l)
	return nil
}

// newFlags returns the flags of command cmd ("status" or "watch"), set
// into cfg and the other values given; usage lists each.
func newFlags(cmd string, cfg *config, redisURL *string, also *alsoFlag, inflight *string) *flag.FlagSet {
	fs := flag.NewFlagSet("throttler "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by the caller
	fs.StringVar(redisURL, "redis", *redisURL, "")
	fs.IntVar(&cfg.limit, "limit", 0, "")
	fs.DurationVar(&cfg.interval, "interval", 0, "")
	fs.DurationVar(&cfg.buffer, "buffer", defaultBuffer, "")
	fs.Var(also, "also", "")
	if cmd == "status" {
		fs.StringVar(inflight, "inflight", "", "")
	}
	if cmd == "watch" {
		fs.DurationVar(&cfg.every, "every", time.Second, "")
		fs.IntVar(&cfg.count, "count", 0, "")
	}
	return fs
}

// parseArgs parses the arguments of command cmd ("status" or "watch"), flags
// and the positional KEY in any order. getenv supplies REDIS_URL. It returns
// flag.ErrHelp for -h, and a *usageError for anything wrong.
func parseArgs(cmd string, args []string, getenv func(string) string) (*config, error) {
	cfg := &config{}
	var (
		redisURL = defaultRedisURL
		also     alsoFlag
		inflight string
	)
	if u := getenv("REDIS_URL"); u != "" {
		redisURL = u
	}
	fs := newFlags(cmd, cfg, &redisURL, &also, &inflight)
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(positional) == 0:
		return nil, usagef("missing KEY, the Redis key the Throttlers share")
	case len(positional) > 1:
		return nil, usagef("unexpected argument %q: only one KEY is read (use -also for more limits)", positional[1])
	}
	cfg.key = positional[0]
	cfg.also = also
	if inflight != "" {
		key, n, err := parseInFlight(inflight)
		if err != nil {
			return nil, usagef("-inflight: %v", err)
		}
		cfg.inflightKey, cfg.inflightCap = key, n
	}
	if err := cfg.check(cmd); err != nil {
		return nil, err
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, usagef("-redis: bad URL: %v (want e.g. %s)", err, defaultRedisURL)
	}
	cfg.redis = opts
	return cfg, nil
}

// check reports the first setting of cfg, read for cmd, that is missing
// or out of range.
func (cfg *config) check(cmd string) error {
	switch {
	case cfg.key == "":
		return usagef("empty KEY")
	case cfg.limit < 1:
		return usagef("-limit must be given, at least 1 (got %d)", cfg.limit)
	case cfg.interval <= 0:
		return usagef("-interval must be given, a positive duration such as 1s (got %s)", cfg.interval)
	case cfg.buffer < 0:
		return usagef("-buffer must not be negative (got %s)", cfg.buffer)
	case cmd == "watch" && cfg.every <= 0:
		return usagef("-every must be positive (got %s)", cfg.every)
	case cmd == "watch" && cfg.count < 0:
		return usagef("-count must not be negative (got %d)", cfg.count)
	}
	return nil
}

// parseInterspersed parses args with fs, flags and positionals in any
// order, and returns the positionals. flag stops at the first argument that
// is not a flag: that one is taken as a positional and what follows is
// parsed, until nothing is left or "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
